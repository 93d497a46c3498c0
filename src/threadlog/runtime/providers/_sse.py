"""Server-sent events: a pure incremental parser, and the HTTP request both providers make.

The wire format (https://html.spec.whatwg.org/multipage/server-sent-events.html) is UTF-8 text
in lines ended by CRLF, LF or CR. ``field: value`` lines accumulate an event (one space after
the colon is dropped); a blank line dispatches it. ``data`` lines are joined with ``\\n``;
``event`` names the event (``message`` when absent); ``id`` and ``retry`` are ignored here;
a line starting with ``:`` is a comment (servers send them as keep-alives).

`SSEParser` is fed text in chunks that may split anywhere (inside a line, between the CR and
LF of a CRLF) and returns the events each chunk completes. `post_sse` POSTs a JSON body and
yields the events of the response, turning HTTP error statuses into `ProviderError`.
"""

from __future__ import annotations

import codecs
import json
import re
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import httpx

from threadlog.runtime.models import ProviderError, TextDelta

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator

__all__ = ["SSEEvent", "SSEParser", "error_excerpt", "is_retryable_status", "post_sse"]

_LINE_END = re.compile(r"\r\n|\r|\n")
_EXCERPT = 300


class SSEEvent(NamedTuple):
    """One dispatched event: its name (``message`` by default) and its data."""

    event: str
    data: str


class SSEParser:
    """An incremental SSE parser: feed it text, get back the events each piece completes.

    Example:
        >>> parser = SSEParser()
        >>> parser.feed("event: ping\\r\\ndata: {}\\r")
        []
        >>> parser.feed("\\n\\r\\n")
        [SSEEvent(event='ping', data='{}')]
    """

    def __init__(self) -> None:
        self._pending: list[str] = []
        """Text of the current, unterminated line."""
        self._skip_lf = False
        """The last chunk ended with CR: an LF starting the next one belongs to it."""
        self._event = ""
        self._data: list[str] = []

    def feed(self, text: str) -> list[SSEEvent]:
        """Add a chunk of the stream.

        Args:
            text: the next piece of decoded text; it may end anywhere.

        Returns:
            The events completed (by a blank line) within this chunk, in order.
        """
        if not text:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if text[0] == "\n":
                text = text[1:]
                if not text:
                    return []
        if "\n" not in text and "\r" not in text:
            self._pending.append(text)
            return []
        self._pending.append(text)
        lines = _LINE_END.split("".join(self._pending))
        rest = lines.pop()
        self._pending = [rest] if rest else []
        self._skip_lf = text[-1] == "\r"
        events: list[SSEEvent] = []
        for line in lines:
            self._line(line, events)
        return events

    def finish(self) -> list[SSEEvent]:
        """End of stream.

        An event whose lines all arrived but whose closing blank line did not is still
        dispatched; an unterminated last line is dropped (the stream was cut inside it).

        Returns:
            The final event, if there is one.
        """
        events: list[SSEEvent] = []
        if not self._pending and self._data:
            self._line("", events)
        self._pending = []
        self._data = []
        self._event = ""
        self._skip_lf = False
        return events

    def _line(self, line: str, events: list[SSEEvent]) -> None:
        if not line:
            if self._data:
                events.append(SSEEvent(self._event or "message", "\n".join(self._data)))
            self._event = ""
            self._data = []
            return
        if line[0] == ":":
            return
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value


def is_retryable_status(status: int) -> bool:
    """Whether an HTTP status is worth retrying: timeouts, rate limits and server errors."""
    return status in (408, 429) or status >= 500


def error_excerpt(body: bytes | str) -> str:
    """A short, one-line description of an error body (its ``error.message`` when JSON)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        payload: Any = json.loads(text)
    except ValueError:
        payload = None
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            kind = error.get("type") or error.get("code")
            text = f"{kind}: {error['message']}" if isinstance(kind, str) else error["message"]
        elif isinstance(error, str):
            text = error
    text = " ".join(text.split())
    return text if len(text) <= _EXCERPT else text[: _EXCERPT - 1] + "…"


async def post_sse(
    client: httpx.AsyncClient | None,
    url: str,
    *,
    provider: str,
    headers: dict[str, str],
    body: dict[str, Any],
    read_timeout: float,
) -> AsyncGenerator[SSEEvent, None]:
    """POST ``body`` as JSON and yield the server-sent events of the response.

    Use it under `contextlib.aclosing` so that the connection is released when the caller
    stops early.

    Args:
        client: the client to use, or None to open (and close) one for this request.
        url: the endpoint.
        provider: a name for error messages.
        headers: request headers (``Accept`` and ``Content-Type`` are added).
        body: the JSON request body.
        read_timeout: seconds allowed to connect and between received chunks.

    Yields:
        The events, in order, until the server ends the response.

    Raises:
        ProviderError: the server answered with a non-2xx status (``retryable`` for 408,
            429 and 5xx) or with a JSON body instead of an event stream.
        httpx.HTTPError: the connection failed (the caller adds the partial response).
    """
    if client is None:
        async with (
            httpx.AsyncClient() as own,
            aclosing(
                post_sse(
                    own,
                    url,
                    provider=provider,
                    headers=headers,
                    body=body,
                    read_timeout=read_timeout,
                )
            ) as events,
        ):
            async for event in events:
                yield event
        return
    headers = {"accept": "text/event-stream", **headers}
    request = client.build_request("POST", url, json=body, headers=headers, timeout=read_timeout)
    response = await client.send(request, stream=True)
    try:
        if not 200 <= response.status_code < 300:
            excerpt = error_excerpt(await response.aread())
            raise ProviderError(
                f"{provider}: HTTP {response.status_code}: {excerpt or response.reason_phrase}",
                retryable=is_retryable_status(response.status_code),
            )
        if response.headers.get("content-type", "").startswith("application/json"):
            excerpt = error_excerpt(await response.aread())
            raise ProviderError(f"{provider}: expected an event stream, got JSON: {excerpt}")
        parser = SSEParser()
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        async for chunk in response.aiter_bytes():
            for event in parser.feed(decoder.decode(chunk)):
                yield event
        for event in parser.feed(decoder.decode(b"", final=True)) + parser.finish():
            yield event
    finally:
        await response.aclose()


class StreamState(Protocol):
    """What `stream_deltas` needs of a provider's response assembler."""

    delta: str
    """The text the last event added."""

    @property
    def text(self) -> str: ...

    def feed(self, event: SSEEvent) -> bool:
        """Take one event; True when the response is complete."""
        ...


async def stream_deltas(
    client: httpx.AsyncClient | None,
    url: str,
    *,
    provider: str,
    headers: dict[str, str],
    body: dict[str, Any],
    read_timeout: float,
    state: StreamState,
) -> AsyncIterator[TextDelta]:
    """POST a streaming request, feed its events to ``state`` and yield the text deltas.

    Raises:
        ProviderError: as `post_sse`, or a broken connection mid-stream (``retryable``, with
            ``partial`` set to the text so far).
    """
    try:
        async with aclosing(
            post_sse(
                client,
                url,
                provider=provider,
                headers=headers,
                body=body,
                read_timeout=read_timeout,
            )
        ) as events:
            async for event in events:
                if state.feed(event):
                    break
                if state.delta:
                    yield TextDelta(state.delta)
    except httpx.HTTPError as exc:
        raise ProviderError(
            f"{provider}: stream broken: {type(exc).__name__}: {exc}",
            partial=state.text,
            retryable=isinstance(exc, httpx.TransportError),
        ) from exc
