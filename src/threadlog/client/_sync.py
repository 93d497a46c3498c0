"""`Client`: the service's API as blocking calls (httpx.Client underneath)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from httpx_sse import EventSource

from threadlog.client._core import Call, base_url, default_headers, unreachable
from threadlog.client._stream import Follow

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import TracebackType

    from threadlog.model.envelope import Record

__all__ = ["Client"]

T = TypeVar("T")


class Client:
    """A connection to a threadlog service (``threadlog serve``): blocking calls.

    Each method is one route of ``docs/service.md`` and returns its JSON answer (records as
    `threadlog.model.envelope.Record`). A refusal raises `ServiceError` with the status and
    the error's type; no answer at all raises `ServiceUnreachable`, which names the URL.
    A request that never reached the server is sent again (a few times, with backoff); one
    whose answer was lost only when that is safe (reads, and ``submit`` with its key).

    Use it as a context manager, or call `close`::

        with Client("http://127.0.0.1:8765", token) as service:
            thread = service.create_thread(title="fix the tests", input="run them")
            for record in service.stream(thread["thread_id"]):
                print(record.ord, record.type)

    Args:
        url: the service, ``http://HOST:PORT`` (a trailing slash or a path prefix is fine).
        token: the bearer token; default ``$THREADLOG_TOKEN``; none for a server in open mode.
        timeout: seconds to connect, and to wait for each read. A stream reads heartbeats
            every 15 s by default (``serve --heartbeat``), so keep this above that.
        transport: an httpx transport, e.g. ``httpx.MockTransport`` in tests.
        sleep: how to wait before a retry (tests pass one that does not).
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = base_url(url)
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=self.url,
            headers=default_headers(token),
            timeout=timeout,
            transport=transport,
        )

    def close(self) -> None:
        """Close the connections (idempotent)."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = self._http.request(
                    call.method, call.path, params=call.params, json=call.body, headers=call.headers
                )
            except httpx.TransportError as exc:
                delay = call.retry_delay(exc, attempt)
                if delay is None:
                    raise unreachable(self.url, exc) from exc
                attempt += 1
                self._sleep(delay)
                continue
            return call.finish(response)

    def threads(self, *, limit: int = 50) -> list[dict[str, Any]]:
        """The principal's threads (``ThreadSummary`` dicts), most recently active first."""
        return self._call(Call.threads(limit))

    def create_thread(
        self, *, title: str | None = None, cwd: str | None = None, input: str | None = None
    ) -> dict[str, Any]:
        """A new thread (its ``ThreadSummary``); with ``input``, its first turn starts."""
        return self._call(Call.create_thread(title, cwd, input))

    def thread(self, thread_id: str) -> dict[str, Any]:
        """The thread's ``ThreadDetail``: summary, turns, tool calls, calls waiting."""
        return self._call(Call.thread(thread_id))

    def events(
        self,
        thread_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[Record]:
        """A page of the thread's records: after ``after``, or the ``limit`` before
        ``before`` (not both), or the first ``limit``."""
        return self._call(Call.events(thread_id, after, before, limit))

    def event(self, thread_id: str, ord: int) -> Record:
        """The record at ``ord``."""
        return self._call(Call.event(thread_id, ord))

    def submit(
        self, thread_id: str, text: str, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Start a turn with ``text``. The answer is the ``turn.started`` record's ``ord``,
        ``event_id``, ``type``, ``turn_id`` and ``duplicate`` (true when this key was
        already used: nothing new was recorded), or ``queued`` when another process holds
        the thread. A key is generated when none is given; it is what makes the retry of
        a request whose answer was lost safe."""
        return self._call(Call.submit(thread_id, text, idempotency_key))

    def steer(self, thread_id: str, text: str) -> dict[str, Any]:
        """Steer the running turn with ``text`` (starts a turn when none runs)."""
        return self._call(Call.steer(thread_id, text))

    def cancel(self, thread_id: str) -> dict[str, Any]:
        """Cancel the running turn: ``{"cancelled": true, "turn_id"}``; 409 when none runs."""
        return self._call(Call.cancel(thread_id))

    def approve(self, thread_id: str, call_id: str, *, reason: str | None = None) -> dict[str, Any]:
        """Approve a tool call waiting for a decision (recorded as the token's principal)."""
        return self._call(Call.approve(thread_id, call_id, reason))

    def deny(self, thread_id: str, call_id: str, *, reason: str | None = None) -> dict[str, Any]:
        """Deny a tool call waiting for a decision; the model is told ``reason``."""
        return self._call(Call.deny(thread_id, call_id, reason))

    def resolve(
        self, thread_id: str, call_id: str, as_: str, *, note: str | None = None
    ) -> dict[str, Any]:
        """Resolve a call of unknown outcome: ``as_`` is ``done``, ``retry`` or ``abort``."""
        return self._call(Call.resolve(thread_id, call_id, as_, note))

    def fork(
        self, thread_id: str, *, at: int | str | None = None, title: str | None = None
    ) -> dict[str, Any]:
        """Fork the thread after ``at`` (an ordinal or an entry id; default its end): the
        new thread's ``ThreadSummary``."""
        return self._call(Call.fork(thread_id, at, title))

    def artifact(self, thread_id: str, digest: str) -> bytes:
        """An artifact's bytes, through a thread whose records reference it."""
        return self._call(Call.artifact(thread_id, digest))

    def stream(
        self,
        thread_id: str,
        *,
        after: int = 0,
        reconnect: bool = True,
        max_backoff: float = 5.0,
        stop: Callable[[Record], bool] | None = None,
    ) -> Iterator[Record]:
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
                with self._http.stream("GET", follow.path, params=params, headers=headers) as r:
                    if r.is_error:
                        r.read()
                    if follow.opened(r):
                        for sse in EventSource(r).iter_sse():
                            record = follow.feed(sse)
                            if record is not None:
                                yield record
                            if follow.closing or follow.done:
                                break
            except httpx.TransportError as exc:
                follow.failed(exc)
            delay = follow.next_delay()
            if delay is not None:
                self._sleep(delay)
