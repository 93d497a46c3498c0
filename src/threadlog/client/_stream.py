"""Following a thread's live stream, without I/O: the cursor, de-duplication and backoff.

Theory of operation. ``GET /v1/threads/{t}/stream`` sends each durable record as one
Server-Sent Event whose ``id`` is its ordinal (``docs/service.md``, "The live stream"). A
`Follow` is the state of one ``Client.stream`` across its connections:

- the **cursor** is the ordinal of the last record delivered; every connection asks for what
  follows it (``Last-Event-ID: cursor``, and ``?after=cursor`` for servers behind proxies
  that drop the header), so a reconnect neither skips nor repeats a record;
- a record is delivered only if its ordinal is above the cursor **and** its event id is not
  among the last `SEEN_WINDOW` ids delivered (two independent guards: a server that replays a
  record under a new ordinal is caught by the second);
- a connection ends by a drop (the body ends, a read fails, the read timeout passes without
  even a heartbeat) or by an ``event: end`` frame (``reason`` ``shutdown`` or ``overflow``:
  reconnect; ``deleted``: the thread is gone, ``damaged``: its log is damaged, the stream
  ends). Then the follower waits a
  backoff (0.1 s doubling to ``max_backoff``, with jitter) and reconnects. Any record frame
  resets the backoff: the server works. With ``reconnect=False`` the first end ends it;
- an HTTP error answer ends it with `ServiceError`, except a 5xx, which is retried (a proxy
  in front of a restarting server). A 4xx is never retried: the token or the thread is wrong,
  and asking again cannot change that. Failing to connect the *first* time raises
  `ServiceUnreachable` (a wrong URL should say so, not hang); after a stream has been open,
  it is retried (the server is restarting).

``: ping`` heartbeats are SSE comments: the parser (``httpx_sse``) drops them before they get
here, and their only effect is to keep the read timeout from firing on a quiet thread.

The SSE framing itself is ``httpx_sse``'s: on one core it parses about 550,000 frames a
second of records with ~300 bytes of data (650-byte frames), and the whole ``stream()``
(parser, JSON, `Record`, cursor, de-duplication) delivers about 240,000 records a second,
sync or async (``benchmarks/bench_client.py``): well past the ~100,000 a second that is the
bar, so the client has no parser of its own. The two clients drive a `Follow` the same way,
one with ``for``, the other with ``async for``.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Final

import orjson

from threadlog.client._core import (
    backoff,
    decode_record,
    error_from,
    invalid,
    thread_path,
    unreachable,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    import httpx
    from httpx_sse import ServerSentEvent

    from threadlog.model.envelope import Record

__all__ = ["SEEN_WINDOW", "Follow"]

SEEN_WINDOW: Final = 4096
"""How many recently delivered event ids a follower remembers."""

_ENDS_FOR_GOOD: Final = frozenset({"deleted", "damaged"})
"""``event: end`` reasons after which reconnecting cannot help."""


class Follow:
    """The state of one ``stream()``: feed it what the connection brings, ask it what next."""

    def __init__(
        self,
        url: str,
        thread_id: str,
        *,
        after: int,
        reconnect: bool,
        max_backoff: float,
        stop: Callable[[Record], bool] | None,
    ) -> None:
        self.url = url
        self.path = thread_path(thread_id) + "/stream"
        self.cursor = after
        """The ordinal of the last record delivered (or ``after``)."""
        self.done = False
        """The stream is over: `stop` said so, the thread was deleted, or no reconnect."""
        self.closing = False
        """The current connection is over (an ``end`` frame came); reconnect or finish."""
        self._reconnect = reconnect
        self._max_backoff = max_backoff
        self._stop = stop
        self._attempt = 0
        self._connected_once = False
        self._seen: set[str] = set()
        self._order: deque[str] = deque()

    def request(self) -> tuple[dict[str, int], dict[str, str]]:
        """The query and headers of the next connection (the path is `path`)."""
        self.closing = False
        headers = {
            "Accept": "text/event-stream",
            "Cache-Control": "no-store",
            "Last-Event-ID": str(self.cursor),
        }
        return {"after": self.cursor}, headers

    def opened(self, response: httpx.Response) -> bool:
        """Check the answer to a connection (an error's body already read). True: read
        events from it; False: it failed in a way worth retrying (5xx). Raises
        `ServiceError` for any other error."""
        if response.is_server_error and self._connected_once:
            return False
        if response.is_error:
            raise error_from(response)
        kind = response.headers.get("content-type", "").partition(";")[0].strip()
        if kind != "text/event-stream":
            raise invalid(response, f"a {kind or 'untyped'} answer instead of an event stream")
        self._connected_once = True
        return True

    def feed(self, sse: ServerSentEvent) -> Record | None:
        """One event from the connection: the record to deliver, or None (a duplicate, a
        control event). After an ``end`` frame `closing` is set; after the record that
        `stop` accepts, `done`."""
        if sse.event == "end":
            self.closing = True
            try:
                reason = orjson.loads(sse.data).get("reason")
            except (orjson.JSONDecodeError, AttributeError):
                reason = None
            if reason in _ENDS_FOR_GOOD or not self._reconnect:
                self.done = True
            return None
        if sse.event not in ("", "message") or not sse.data:
            return None  # an event this client does not know: newer servers may send more
        try:
            obj = orjson.loads(sse.data)
        except orjson.JSONDecodeError:
            obj = None
        record = decode_record(obj)
        self._attempt = 0  # the server works: the next outage starts the backoff afresh
        if record.ord <= self.cursor or record.id in self._seen:
            return None
        self.cursor = record.ord
        self._seen.add(record.id)
        self._order.append(record.id)
        if len(self._order) > SEEN_WINDOW:
            self._seen.discard(self._order.popleft())
        if self._stop is not None and self._stop(record):
            self.done = True
        return record

    def failed(self, exc: httpx.TransportError) -> None:
        """The connection could not be made or broke. Raises `ServiceUnreachable` when it
        never worked (the first connection failed to connect)."""
        if not self._connected_once:
            raise unreachable(self.url, exc) from exc

    def next_delay(self) -> float | None:
        """After a connection ended: the pause before the next one, or None: the stream is
        over."""
        if self.done or not self._reconnect:
            self.done = True
            return None
        delay = backoff(self._attempt, cap=self._max_backoff)
        self._attempt += 1
        return delay
