"""The live stream's fan-out: every durable record of a thread, to any number of SSE clients.

Theory of operation
===================

**The store is the truth; notifications only say "look".** Every frame a client receives is a
record the store made durable, and every client keeps its own *cursor*, the ordinal of the last
record it was sent. Ordinals are gap-free, so "send the record ``cursor + 1`` next" is the whole
seam between replay and live: whatever path a record takes (a replay read, the shared ring), a
client can neither skip one nor get one twice. A lost wake-up costs latency, never an event.

**One pump per watched thread.** The first subscriber of a thread starts its pump, the last one
to leave stops it. The pump keeps ``head`` (the last durable ordinal it knows) and a *ring*: the
encoded frames of the last ``ring`` records, ``(ord, bytes)`` with contiguous ordinals. It
learns of new records in two ways:

* the store's listener (`Store.add_listener`), called from the store's commit thread once
  records are durable; the hub hops onto the event loop with ``call_soon_threadsafe``. When the
  records continue ``head`` exactly they go straight into the ring: they *are* the store's
  durable records, and re-reading them would cost a scan of the whole log (an embedded store's
  ``read(after=N)`` parses the file from its start whatever ``N``). Anything else (a gap, the
  pump not started yet) only wakes the pump, which reads the store;
* for a store shared by many processes (the `Watch` capability: PostgreSQL), the same
  listener also hears the records other processes commit to a watched thread (the hub
  watches each thread it has a pump for), woken by LISTEN/NOTIFY;
* a poll every ``poll`` seconds, for records other processes append to the same store: it
  reads ``store.read(thread, after=head)`` in a worker thread (``asyncio.to_thread``). A poll
  is skipped when the listener delivered records since the last one (the single-writer lease
  says nobody else can be writing the thread then), and the interval stretches to four times
  the last read's duration, so that watching an idle, long thread costs at most a fifth of a
  core.

A client's own replay read (below) also moves ``head`` on and fills the ring, and counts as
a poll when it reaches the end of the log; the pump reads only when nobody else did, so a
client resuming a long thread costs one scan, not two. After each batch the waiting clients
are woken (a fresh `asyncio.Event` per batch).

**Each client reads at its own pace.** When the ring holds ``cursor + 1`` the client takes the
frames from there (all it can, joined into one chunk of at most ~1 MiB); when it is behind the
ring (a resume from long ago, a slow reader) it reads the store itself, in pages of `_PAGE_MAX`
(at least ``batch``) records, read *and encoded* in a worker thread; a
full page means the log may go on, so it reads again without waiting. So 200
clients share one reader, and a slow client slows neither the writer (the store never waits
for the hub) nor the other clients (nobody waits for it; the ring drops old frames).

**Overflow.** A client that falls more than ``max_lag`` records behind the head is sent
``event: end`` with reason ``"overflow"`` and its stream ends (it reconnects with ``after``).
Lag counts only what was appended since the client connected: a client resuming a long thread
from its start is catching up, not falling behind.

**Heartbeats and the end.** After ``heartbeat`` seconds without a frame a client is sent the
comment ``: ping``. `StreamHub.close` ends every stream with ``event: end`` (its reason and the
client's cursor, where it resumes); so does a thread the store no longer holds (``"deleted"``),
and one whose log is damaged past the client's cursor (``"damaged"``: `IntegrityError`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from threadlog.errors import IntegrityError, ThreadNotFound, UsageError
from threadlog.server.sse import PING, end_frame, parse_last_event_id, record_frames
from threadlog.store.protocol import Watch

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from threadlog.model.envelope import Record
    from threadlog.store.protocol import Store

__all__ = ["StreamHub", "parse_last_event_id"]

log = logging.getLogger("threadlog.server")

_CHUNK = 1 << 20
"""A chunk a client is sent holds frames up to about this many bytes."""
_PAGE_MAX = 131_072
"""The most records one replay read asks for. An embedded store scans (and holds) the whole
log for a read after N whatever its limit, so pages are large: fewer pages, fewer scans
(100,000 records replay at ~60,000/s over HTTP in one page, ~48,000/s in pages of 64 Ki).
A page of 128 Ki records of ~600 bytes is ~80 MB of frames while it is sent; `batch` is the
least a read asks for."""

Frames = list[tuple[int, bytes]]


class _Topic:
    """One watched thread: its pump's state, shared by its clients."""

    __slots__ = (
        "changed",
        "clients",
        "failed",
        "frames",
        "head",
        "heard",
        "hint",
        "readers",
        "task",
        "thread_id",
        "wake",
    )

    def __init__(self, thread_id: str, hint: int) -> None:
        self.thread_id = thread_id
        self.frames: Frames = []
        """The ring: ``(ord, frame)`` of the latest records, contiguous ordinals."""
        self.head: int | None = None
        """The last durable ordinal the pump knows (None until its first read)."""
        self.changed = asyncio.Event()
        """Set (and replaced) whenever the ring or the topic's state changes."""
        self.clients = 0
        self.hint = hint
        """Where the first subscriber starts: the pump's first read begins just before it."""
        self.heard = False
        """Whether the listener delivered records, or a client read to the end of the log,
        since the last poll."""
        self.readers = 0
        """Clients' replay reads under way (each will tell the head: the pump need not)."""
        self.failed: BaseException | None = None
        self.task: asyncio.Task[None] | None = None
        self.wake = asyncio.Event()
        """Set to make the pump read the store now."""

    def signal(self) -> None:
        """Wake every client waiting on this topic."""
        event, self.changed = self.changed, asyncio.Event()
        event.set()


class StreamHub:
    """Streams threads' durable records as SSE to many clients (see the module docstring).

    Args:
        store: the store whose threads are streamed.
        poll: seconds between looks for records other processes append.
        ring: how many recent frames each watched thread keeps for its clients.
        heartbeat: seconds of silence before a ``: ping``.
        max_lag: how far behind the head a client may fall before its stream ends.
        batch: the least number of records a store read asks for.
    """

    def __init__(
        self,
        store: Store,
        *,
        poll: float = 0.2,
        ring: int = 4096,
        heartbeat: float = 15.0,
        max_lag: int = 50_000,
        batch: int = 1000,
    ) -> None:
        if poll <= 0 or heartbeat <= 0 or ring < 1 or max_lag < 1 or batch < 1:
            raise UsageError("StreamHub: poll and heartbeat must be > 0; ring, max_lag, batch >= 1")
        self._store = store
        self._poll = poll
        self._ring = ring
        self._heartbeat = heartbeat
        self._max_lag = max_lag
        self._batch = batch
        self._topics: dict[str, _Topic] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed: str | None = None
        self._watching: set[str] = set()
        """Threads this hub asked a `Watch` store to watch (one `watch` each)."""

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start listening to the store (inside the event loop that will serve the streams)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._store.add_listener(self._listener)

    async def close(self, reason: str = "shutdown") -> None:
        """End every open stream with ``event: end`` (``reason``, its cursor), and every later
        one at once; stop the pumps and the store listener. Idempotent."""
        if self._closed is not None:
            return
        self._closed = reason
        if self._loop is not None:
            try:
                self._store.remove_listener(self._listener)
            except ValueError:
                pass
        tasks = [t.task for t in self._topics.values() if t.task is not None]
        for thread_id in list(self._watching):
            self._unwatch(thread_id)
        for topic in self._topics.values():
            topic.signal()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def watched(self) -> int:
        """How many threads have subscribers now (each has a pump)."""
        return len(self._topics)

    # -- one client -----------------------------------------------------------------------------

    async def stream(self, thread_id: str, after: int) -> AsyncIterator[bytes]:
        """The SSE body of one client: the records with ``ord > after``, then each new one, as
        chunks of frames, until the hub closes, the client overflows, the thread disappears or
        the consumer stops iterating (which unsubscribes it). The caller has checked that the
        thread exists and is the caller's."""
        cursor = max(after, 0)
        if self._closed is not None:
            yield end_frame(self._closed, cursor)
            return
        if self._loop is None:
            raise UsageError("StreamHub.start() was not awaited before stream()")
        topic = self._subscribe(thread_id, cursor)
        start_head: int | None = None
        more = False  # whether the last replay read was a full page (the log may go on)
        last_sent = time.monotonic()
        try:
            while True:
                changed = topic.changed  # taken before looking: a later change sets it
                if self._closed is not None:
                    yield end_frame(self._closed, cursor)
                    return
                if topic.failed is not None:
                    if isinstance(topic.failed, ThreadNotFound):
                        yield end_frame("deleted", cursor)
                        return
                    if isinstance(topic.failed, IntegrityError):
                        yield end_frame("damaged", cursor)
                        return
                    raise topic.failed
                head = topic.head
                if head is None or cursor < head or more:
                    if start_head is None:
                        start_head = head
                    if head is not None and head - max(cursor, start_head or 0) > self._max_lag:
                        yield end_frame("overflow", cursor)
                        return
                    chunks = self._from_ring(topic, cursor)
                    if chunks is None:
                        try:
                            chunks, more = await self._replay(topic, cursor)
                            if start_head is None:  # its own read told the head
                                start_head = topic.head
                        except ThreadNotFound:
                            yield end_frame("deleted", cursor)
                            return
                        except IntegrityError:
                            # the log is damaged past the cursor (`threadlog verify` names
                            # where): end the stream with a reason, not a cut connection
                            yield end_frame("damaged", cursor)
                            return
                    for last, chunk in chunks:
                        yield chunk
                        cursor = last
                    if chunks:
                        last_sent = time.monotonic()
                        continue
                wait = self._heartbeat - (time.monotonic() - last_sent)
                if wait <= 0:
                    yield PING
                    last_sent = time.monotonic()
                    continue
                try:
                    async with asyncio.timeout(wait):
                        await changed.wait()
                except TimeoutError:
                    pass
        finally:
            self._unsubscribe(thread_id, topic)

    def _from_ring(self, topic: _Topic, cursor: int) -> list[tuple[int, bytes]] | None:
        """The frames after ``cursor`` in the ring as one chunk ``[(last ord, bytes)]``; None
        when the ring does not hold ``cursor + 1`` (the client is behind it)."""
        frames = topic.frames
        if not frames:
            return None
        i = cursor + 1 - frames[0][0]
        if i < 0 or i >= len(frames):
            return None
        taken: list[bytes] = []
        size = 0
        n = len(frames)
        while i < n and size < _CHUNK:
            last, frame = frames[i]
            taken.append(frame)
            size += len(frame)
            i += 1
        return [(last, b"".join(taken))]

    async def _replay(self, topic: _Topic, cursor: int) -> tuple[list[tuple[int, bytes]], bool]:
        """The next page after ``cursor`` read from the store (and encoded) in a worker thread,
        as chunks ``[(last ord, bytes)]``, and whether it was a full page. What it read also moves the topic's head on (and
        fills its ring) when it reaches past it: a client's read saves the pump one."""
        # Not bounded by head - cursor: head is only what the hub knows, and a read costs a
        # scan of the whole log (embedded store) however little it returns.
        limit = max(self._batch, _PAGE_MAX)
        topic.readers += 1
        try:
            chunks, tail = await asyncio.to_thread(
                self._read_chunks, topic.thread_id, cursor, limit
            )
        finally:
            topic.readers -= 1
        full = bool(chunks) and chunks[-1][0] - cursor >= limit
        if tail:
            self._publish(topic, tail, cursor + 1)
        if not full:
            topic.heard = True  # it read to the end of the log: as good as a poll
        return chunks, full

    def _read_chunks(
        self, thread_id: str, cursor: int, limit: int
    ) -> tuple[list[tuple[int, bytes]], Frames]:
        records = self._store.read(thread_id, cursor, limit=limit)
        _check_follows(thread_id, cursor, records)
        frames = record_frames(records)
        chunks: list[tuple[int, bytes]] = []
        taken: list[bytes] = []
        size = 0
        for ord_, frame in frames:
            taken.append(frame)
            size += len(frame)
            if size >= _CHUNK:
                chunks.append((ord_, b"".join(taken)))
                taken, size = [], 0
        if taken:
            chunks.append((records[-1].ord, b"".join(taken)))
        return chunks, frames[-self._ring :]

    # -- topics and their pumps -----------------------------------------------------------------

    def _subscribe(self, thread_id: str, cursor: int) -> _Topic:
        topic = self._topics.get(thread_id)
        if topic is None:
            topic = self._topics[thread_id] = _Topic(thread_id, cursor)
            topic.task = asyncio.create_task(self._pump(thread_id, topic), name=f"pump {thread_id}")
            if isinstance(self._store, Watch) and self._closed is None:
                self._store.watch(thread_id)  # records other processes append: heard too
                self._watching.add(thread_id)
        topic.clients += 1
        return topic

    def _unsubscribe(self, thread_id: str, topic: _Topic) -> None:
        topic.clients -= 1
        if topic.clients == 0 and self._topics.get(thread_id) is topic:
            del self._topics[thread_id]
            self._unwatch(thread_id)
            if topic.task is not None:
                topic.task.cancel()  # it holds no resource; close() awaits the rest

    def _unwatch(self, thread_id: str) -> None:
        if thread_id in self._watching and isinstance(self._store, Watch):
            self._watching.discard(thread_id)
            self._store.unwatch(thread_id)

    def _listener(self, thread_id: str, records: list[Record]) -> None:
        """The store's listener (its commit thread): hand watched threads' records to the loop."""
        loop = self._loop
        if loop is None or thread_id not in self._topics:
            return
        try:
            loop.call_soon_threadsafe(self._on_records, thread_id, records)
        except RuntimeError:  # the loop is closed: nobody is streaming any more
            pass

    def _on_records(self, thread_id: str, records: list[Record]) -> None:
        topic = self._topics.get(thread_id)
        if topic is None or not records:
            return
        head = topic.head
        if head is None:
            topic.wake.set()  # the pump's first read is under way: make it look again
            return
        fresh = [r for r in records if r.ord > head] if records[0].ord <= head else records
        if not fresh:
            return
        if not self._publish(topic, record_frames(fresh), fresh[0].ord):
            topic.wake.set()  # a gap (records we did not hear of): the pump reads the store
            return
        topic.heard = True

    def _publish(self, topic: _Topic, frames: Frames, start: int) -> bool:
        """Move ``head`` on to the end of ``frames``: the last frames of a gap-free run of
        records that began at ord ``start`` (a read may return more than the ring keeps).
        False, and nothing taken, when the run begins past ``head + 1`` (a gap)."""
        head = topic.head
        if head is not None:
            if start > head + 1:
                return False
            frames = [f for f in frames if f[0] > head]
        if not frames:
            return True
        ring = topic.frames
        if ring and frames[0][0] != ring[-1][0] + 1:
            ring.clear()  # the run was longer than the ring: keep only its end
        ring.extend(frames[-self._ring :])
        if len(ring) > self._ring:
            del ring[: len(ring) - self._ring]
        topic.head = frames[-1][0]
        topic.signal()
        return True

    async def _pump(self, thread_id: str, topic: _Topic) -> None:
        """Keep the topic's head and ring up to date (see the module docstring)."""
        try:
            delay = self._poll  # a client's first read usually tells the head before that
            while True:
                wake = topic.wake
                try:
                    async with asyncio.timeout(delay):
                        await wake.wait()
                except TimeoutError:
                    if topic.heard or topic.readers:
                        # this process writes the thread (nobody else can), or a client
                        # read it to the end since the last poll, or is reading it now
                        topic.heard = False
                        continue
                wake.clear()
                started = time.monotonic()
                head = topic.head
                after = head if head is not None else max(topic.hint - 1, 0)
                frames = await asyncio.to_thread(self._read_tail, thread_id, after)
                if head is None and not frames:  # the first client starts past the end
                    after = 0
                    frames = await asyncio.to_thread(self._read_tail, thread_id, after)
                self._publish(topic, frames, after + 1)  # (others may have moved head on)
                delay = max(self._poll, 4 * (time.monotonic() - started))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if isinstance(exc, IntegrityError):
                log.warning("thread %s: the live stream stops at damage: %s", thread_id, exc)
            elif not isinstance(exc, ThreadNotFound):
                log.exception("thread %s: the live stream cannot read the store", thread_id)
            topic.failed = exc
            topic.signal()

    def _read_tail(self, thread_id: str, after: int) -> Frames:
        """The records after ``after`` (all of them: one read, one scan), encoded; only the
        last ``ring`` are kept (clients further behind read the store themselves)."""
        records = self._store.read(thread_id, after)
        _check_follows(thread_id, after, records)
        return record_frames(records[-self._ring :])


def _check_follows(thread_id: str, after: int, records: list[Record]) -> None:
    """A read after ``after`` must start at ``after + 1``: the seam relies on it."""
    if records and records[0].ord != after + 1:
        raise IntegrityError(
            thread_id,
            after + 1,
            f"a read after ord {after} began at ord {records[0].ord} (ordinals must be gap-free)",
        )
