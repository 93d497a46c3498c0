"""`AsyncClient`: the service's API as coroutines (httpx.AsyncClient underneath).

The same calls as `threadlog.client.Client`, built, decoded and retried by the same code
(`threadlog.client._core`, `threadlog.client._stream`); only the I/O is awaited."""

from __future__ import annotations

from contextlib import aclosing
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import httpx
from httpx_sse import EventSource

from threadlog.client._core import Call, base_url, default_headers, unreachable
from threadlog.client._stream import Follow

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Awaitable, Callable
    from types import TracebackType

    from threadlog.model.envelope import Record

__all__ = ["AsyncClient"]

T = TypeVar("T")


class AsyncClient:
    """A connection to a threadlog service (``threadlog serve``): coroutines.

    The methods of `threadlog.client.Client`, awaited; `stream` is an async generator (wrap
    it in ``contextlib.aclosing`` to close its connection as soon as you leave the loop)::

        async with AsyncClient("http://127.0.0.1:8765", token) as service:
            async for record in service.stream(thread_id, stop=lambda r: r.type == "turn.ended"):
                print(record.ord, record.type)

    Args: as `Client`'s (``sleep`` is awaited; ``transport`` is an async transport).
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self.url = base_url(url)
        self._sleep = sleep
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers=default_headers(token),
            timeout=timeout,
            transport=transport,
        )

    async def aclose(self) -> None:
        """Close the connections (idempotent)."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _call(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = await self._http.request(
                    call.method, call.path, params=call.params, json=call.body, headers=call.headers
                )
            except httpx.TransportError as exc:
                delay = call.retry_delay(exc, attempt)
                if delay is None:
                    raise unreachable(self.url, exc) from exc
                attempt += 1
                await self._sleep(delay)
                continue
            return call.finish(response)

    async def threads(self, *, limit: int = 50) -> list[dict[str, Any]]:
        """The principal's threads (``ThreadSummary`` dicts), most recently active first."""
        return await self._call(Call.threads(limit))

    async def create_thread(
        self, *, title: str | None = None, cwd: str | None = None, input: str | None = None
    ) -> dict[str, Any]:
        """A new thread (its ``ThreadSummary``); with ``input``, its first turn starts."""
        return await self._call(Call.create_thread(title, cwd, input))

    async def thread(self, thread_id: str) -> dict[str, Any]:
        """The thread's ``ThreadDetail``: summary, turns, tool calls, calls waiting."""
        return await self._call(Call.thread(thread_id))

    async def events(
        self,
        thread_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[Record]:
        """A page of the thread's records: after ``after``, or the ``limit`` before
        ``before`` (not both), or the first ``limit``."""
        return await self._call(Call.events(thread_id, after, before, limit))

    async def event(self, thread_id: str, ord: int) -> Record:
        """The record at ``ord``."""
        return await self._call(Call.event(thread_id, ord))

    async def submit(
        self, thread_id: str, text: str, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Start a turn with ``text``. The answer is the ``turn.started`` record's ``ord``,
        ``event_id``, ``type``, ``turn_id`` and ``duplicate`` (true when this key was
        already used: nothing new was recorded), or ``queued`` when another process holds
        the thread. A key is generated when none is given; it is what makes the retry of
        a request whose answer was lost safe."""
        return await self._call(Call.submit(thread_id, text, idempotency_key))

    async def steer(self, thread_id: str, text: str) -> dict[str, Any]:
        """Steer the running turn with ``text`` (starts a turn when none runs)."""
        return await self._call(Call.steer(thread_id, text))

    async def cancel(self, thread_id: str) -> dict[str, Any]:
        """Cancel the running turn: ``{"cancelled": true, "turn_id"}``; 409 when none runs."""
        return await self._call(Call.cancel(thread_id))

    async def approve(
        self, thread_id: str, call_id: str, *, reason: str | None = None
    ) -> dict[str, Any]:
        """Approve a tool call waiting for a decision (recorded as the token's principal)."""
        return await self._call(Call.approve(thread_id, call_id, reason))

    async def deny(
        self, thread_id: str, call_id: str, *, reason: str | None = None
    ) -> dict[str, Any]:
        """Deny a tool call waiting for a decision; the model is told ``reason``."""
        return await self._call(Call.deny(thread_id, call_id, reason))

    async def resolve(
        self, thread_id: str, call_id: str, as_: str, *, note: str | None = None
    ) -> dict[str, Any]:
        """Resolve a call of unknown outcome: ``as_`` is ``done``, ``retry`` or ``abort``."""
        return await self._call(Call.resolve(thread_id, call_id, as_, note))

    async def fork(
        self, thread_id: str, *, at: int | str | None = None, title: str | None = None
    ) -> dict[str, Any]:
        """Fork the thread after ``at`` (an ordinal or an entry id; default its end): the
        new thread's ``ThreadSummary``."""
        return await self._call(Call.fork(thread_id, at, title))

    async def artifact(self, thread_id: str, digest: str) -> bytes:
        """An artifact's bytes, through a thread whose records reference it."""
        return await self._call(Call.artifact(thread_id, digest))

    async def stream(
        self,
        thread_id: str,
        *,
        after: int = 0,
        reconnect: bool = True,
        max_backoff: float = 5.0,
        stop: Callable[[Record], bool] | None = None,
    ) -> AsyncGenerator[Record, None]:
        """Follow the thread live: its records after ``after``, then each new one.

        Reconnects after a drop or a server restart from the last record delivered, with
        backoff up to ``max_backoff`` seconds, and never delivers a record twice (see
        `threadlog.client._stream`). Ends when ``stop(record)`` is true (after yielding
        that record), when the thread is deleted, or with ``reconnect=False`` at the first
        drop. Raises `ServiceError` on a 4xx (a bad token, an unknown thread).
        """
        follow = Follow(
            self.url,
            thread_id,
            after=after,
            reconnect=reconnect,
            max_backoff=max_backoff,
            stop=stop,
        )
        while not follow.done:
            params, headers = follow.request()
            try:
                async with self._http.stream(
                    "GET", follow.path, params=params, headers=headers
                ) as r:
                    if r.is_error:
                        await r.aread()
                    if follow.opened(r):
                        # aclosing: leaving the loop early closes the parser's generator now,
                        # not whenever the event loop finalises it
                        async with aclosing(EventSource(r).aiter_sse()) as events:
                            async for sse in events:
                                record = follow.feed(sse)
                                if record is not None:
                                    yield record
                                if follow.closing or follow.done:
                                    break
            except httpx.TransportError as exc:
                follow.failed(exc)
            delay = follow.next_delay()
            if delay is not None:
                await self._sleep(delay)
