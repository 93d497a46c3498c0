"""Group commit on PostgreSQL: one transaction, one COMMIT, for the appends of many threads.

Theory of operation
-------------------
An append is assigned its ordinal and hash by its thread's writer (`threadlog.store.postgres
.writer`) and handed to the `Committer` as a `Pending`: the record, its canonical line, the
writer (whose fencing token it carries) and, for an asyncio caller, its event loop's future
(a thread waiting in `Pending.wait` waits on its own append's lock, so a commit wakes exactly
the writers it carried; a commit resolves the futures of each event loop with one
``call_soon_threadsafe``, one wake-up of the loop however many appends it carried). The
committer has `LANES` (2) *lanes*, each a thread with a connection of its own. A lane sleeps
until there is a critical append (or a flush) waiting, or until the oldest buffered one has
waited ``interval`` seconds; then it takes everything queued, from every thread of the
process, and writes it in one transaction:

1. one statement (`FENCED_COMMIT`) locks the lease rows of the batch's threads
   (``SELECT … FOR UPDATE``, held until COMMIT, so no takeover can come in between),
   inserts the records whose fencing token is still their thread's token, all rows at once
   (``unnest`` of prebuilt binary arrays, `threadlog.store.postgres.arrays`) and brings those
   threads' ``threads`` rows up to date; the records of the other threads are refused with
   `LeaseLost` (their writer is marked lost: it appends nothing more);
2. the other projections of the records (turns, tool calls, memories: `run_ops`), each
   statement fenced the same way (it applies only where the token is current), then one
   ``COMMIT``: all of it sent in one pipeline, so a batch costs **one round trip** to the
   server whatever its size. A batch with no other projections (appends of events that
   change no turn, call or memory) sends the fenced statement alone, in autocommit: a
   transaction of its own, the same round trip without the pipeline's BEGIN and COMMIT.
   Only then are the listeners called (in order per thread) and the appends woken: an
   acknowledged record is a committed one. One notification per thread is queued for the
   `Sender` too (`threadlog.store.postgres.notify`: not in the transaction, whose NOTIFY
   lock would make the lanes' commits wait for each other's WAL flush).

*Two commits in flight.* While one lane's transaction runs (and waits for its WAL flush),
the other lane takes what has queued meanwhile and sends it on its own connection: the
server runs both, their flushes shared, and the writers the first commit wakes queue for
the next lane instead of waiting for a committer. A lane that finds no other committing takes
only its share of the queue (half, with two lanes, in whole threads), and the other lane
the rest at once: without it, 64 writers each waiting for its append fall into one commit
of 64 at a time, the server idle while the writers queue their next appends and the writers
idle while the server commits; with it, each half queues while the other half's commit is
on the server. The lanes never split a thread: a lane takes only the appends of threads no
other lane is committing (`_take`); a thread's later appends stay queued until its commit in
flight is over. They chain onto its records (their ordinals follow, their ``prev`` is its
hash), so they must not be sent before those are known to be in the table: if that commit
fails, its writers are marked broken and the appends that waited for it are refused, never
written after a gap. The two transactions
therefore lock disjoint lease rows, and per thread the commits (and the listeners) stay in
order. Fencing is unchanged: each transaction checks its own threads' tokens under the
rows' locks.

While commits run, new appends queue up for the next one, so the more writers append at
once, the more appends each COMMIT carries (and the fewer WAL flushes they wait for). Woken
by a critical append, a lane waits up to `GATHER` (1 ms) while fewer appends are queued
than its last commit carried: the writers its last commit woke are about to queue their
next ones, and one commit for all of them beats several for a few each. `commits` counts
the transactions (tests read it).

*Fail-stop.* If the transaction fails (the connection drops, the server restarts, a
constraint is violated), every append in it fails with `StorageError`, never retried: a
COMMIT that errs may or may not have happened. The batch's writers are marked broken, so
that the next append to any of their threads first re-reads the thread's head from the
database (the truth) instead of chaining onto records that may not exist; the connection is
replaced. The store's error listeners hear of it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import psycopg

from threadlog import _hooks
from threadlog.errors import LeaseLost, StorageError
from threadlog.store.postgres.arrays import register as register_arrays
from threadlog.store.postgres.notify import Sender
from threadlog.store.postgres.projections import (
    FENCED_COMMIT,
    fenced_commit,
    notify_payload,
    run_ops,
)
from threadlog.store.postgres.writer import resolve_waiters

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

    from threadlog.model.envelope import Record
    from threadlog.store.postgres.projections import Row
    from threadlog.store.postgres.writer import Pending

__all__ = ["GATHER", "LANES", "SPLIT", "Committer"]

GATHER = 0.001
"""The longest a lane waits for the writers its last commit woke (seconds)."""

LANES = 2
"""Transactions in flight at once (each lane a thread with its own connection)."""

SPLIT = 16
"""From this many queued appends, a lane that finds no other committing takes its share."""

log = logging.getLogger("threadlog.store")


class Committer:
    """The group-commit lanes (module docstring).

    Args:
        connect: a new connection for a lane (in autocommit: a lane sends its BEGIN and
            COMMIT itself, or a statement that is a transaction of its own).
        channel: the NOTIFY channel; ``origin``: this store's id, in each notification.
        interval: the longest a buffered append waits for its commit (seconds).
        on_durable: ``(thread_id, records)`` after each commit, per thread in order.
        on_failure: a failed commit's error.
        max_batch: at most this many appends per transaction (None: no limit).
        lanes: how many transactions may be in flight at once, each on its connection.
    """

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        *,
        channel: str,
        origin: str,
        interval: float,
        on_durable: Callable[[str, list[Record]], None],
        on_failure: Callable[[StorageError], None],
        max_batch: int | None = None,
        lanes: int = LANES,
    ) -> None:
        self._connect = connect
        self._channel = channel
        self._origin = origin
        self.interval = interval
        self.max_batch = max_batch
        """At most this many appends per transaction (None: all that are queued); 1 turns
        group commit off (one COMMIT per append: the benchmark's baseline)."""
        self._on_durable = on_durable
        self._on_failure = on_failure
        self._queue: list[Pending] = []
        self._in_flight: set[str] = set()
        """The threads whose records a lane is committing: no other lane takes theirs."""
        self._cond = threading.Condition(threading.Lock())  # never re-entered
        self._urgent = False
        self._flushing = 0
        """Threads waiting in `flush`: while any is, every queued append is urgent."""
        self._oldest = 0.0
        self._stopping = False
        self._submitted = 0
        self._done = 0
        self.commits = 0
        """Transactions committed so far (each carries one or more appends)."""
        self._gathering = 1 << 30
        """How many queued appends end a gathering lane's wait (`_set_gathering`)."""
        self._sender = Sender(connect, channel)
        """Sends each commit's notifications once it is over (`notify`)."""
        self._lanes = [_Lane(i) for i in range(max(1, lanes))]
        for lane in self._lanes:
            lane.thread = threading.Thread(
                target=self._run,
                args=(lane,),
                name=f"threadlog-pg-commit-{lane.index}",
                daemon=True,
            )
            lane.thread.start()

    def submit(self, pending: Pending, *, urgent: bool) -> None:
        """Queue an append for the next commit (``urgent``: commit without waiting)."""
        with self._cond:
            if self._stopping:
                raise StorageError("the store's committer has stopped")
            if not self._queue:
                self._oldest = time.monotonic()
            pending.urgent = urgent
            self._queue.append(pending)
            self._submitted += 1
            if urgent and not self._urgent:
                self._urgent = True
                self._cond.notify()  # a lane waiting for work (a busy one sees the flag)
            elif len(self._queue) >= self._gathering:
                self._cond.notify()  # the lane gathering has what it waits for

    def _set_gathering(self) -> None:
        """Keep ``_gathering`` (how many queued appends end a gathering lane's wait: its
        last commit's size; none gathering, never) up to date. The caller holds the
        condition."""
        self._gathering = min(
            (lane.last_size for lane in self._lanes if lane.gathering), default=1 << 30
        )

    def flush(self) -> None:
        """Wait until everything queued so far is committed (or has failed)."""
        with self._cond:
            target = self._submitted
            if self._done >= target:
                return
            self._flushing += 1  # everything queued is urgent until this flush is over
            try:
                self._cond.notify_all()
                while self._done < target:
                    self._cond.wait()
            finally:
                self._flushing -= 1

    def stop(self) -> None:
        """Commit what is queued, then stop the lanes and close their connections."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for lane in self._lanes:
            if lane.thread is not None:
                lane.thread.join()
            if lane.conn is not None:
                lane.conn.close()
                lane.conn = None
        self._sender.stop()

    def _gather(self, lane: _Lane) -> None:
        """Give the writers the lane's last commit woke a moment to queue their next
        appends, so that they share the next commit rather than trickle into several: wait
        (at most `GATHER` seconds, under the condition) while fewer appends are queued than
        the lane's last commit carried. The caller holds the condition."""
        deadline = time.monotonic() + GATHER
        lane.gathering = True
        self._set_gathering()
        try:
            while len(self._queue) < lane.last_size and not self._stopping:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)
        finally:
            lane.gathering = False
            self._set_gathering()

    def _take(self) -> list[Pending]:
        """The queued appends of every thread no other lane is committing, in order (the
        caller holds the condition). A thread's later appends wait for its commit in flight:
        they chain onto its records, so they may be sent only once those are known to be
        in the table (or known not to be, and are then refused, their writer broken).

        When no lane is committing, the lane takes its share only (half of the queue with
        two lanes, whole threads, from `SPLIT` appends up) and leaves the rest to the next
        lane: the two commits run side by side, and from then on each lane's writers queue
        their next appends while the other lane's commit is on the server (gathering keeps
        the shares: a lane waits for as many as its last commit carried)."""
        busy = self._in_flight
        if busy:
            taken = [p for p in self._queue if p.writer.thread_id not in busy]
            if len(taken) < len(self._queue):
                self._queue = [p for p in self._queue if p.writer.thread_id in busy]
            else:
                self._queue = []
        elif len(self._lanes) > 1 and len(self._queue) >= SPLIT:
            share = -(-len(self._queue) // len(self._lanes))
            mine: set[str] = set()
            count = 0
            for p in self._queue:
                if count >= share:
                    break
                mine.add(p.writer.thread_id)
                count += 1
            taken = [p for p in self._queue if p.writer.thread_id in mine]
            self._queue = [p for p in self._queue if p.writer.thread_id not in mine]
        else:
            taken, self._queue = self._queue, []
        if taken:
            self._urgent = any(p.urgent for p in self._queue)
            if self._queue:
                self._oldest = time.monotonic()
                if self._urgent:
                    self._cond.notify()  # the rest is the next lane's
            busy.update(p.writer.thread_id for p in taken)
        return taken

    def _next(self, lane: _Lane) -> list[Pending] | None:
        """Wait for the lane's next appends; None when the committer stops and all is
        committed. The caller holds the condition."""
        while True:
            ready = bool(self._queue) and (
                not self._in_flight
                or any(p.writer.thread_id not in self._in_flight for p in self._queue)
            )
            if ready and (self._urgent or self._flushing or self._stopping):
                self._gather(lane)
                taken = self._take()
                if taken:
                    return taken
                continue
            if ready:
                wait = self._oldest + self.interval - time.monotonic()
                if wait <= 0:
                    taken = self._take()
                    if taken:
                        return taken
                    continue
                self._cond.wait(wait)
            elif self._stopping and not self._queue:
                return None
            else:
                self._cond.wait()

    def _run(self, lane: _Lane) -> None:
        while True:
            with self._cond:
                batch = self._next(lane)
                if batch is None:
                    return
                lane.last_size = len(batch)
            try:
                step = self.max_batch or len(batch)
                for start in range(0, len(batch), step):
                    self._commit(lane, batch[start : start + step])
            except BaseException as exc:  # a bug: fail the batch rather than hang its waiters
                log.exception("the group commit failed unexpectedly")
                error = StorageError(f"the group commit failed: {exc!r}")
                for p in batch:
                    p.fail(error)
                    p.writer.break_(error)
            finally:
                with self._cond:
                    for p in batch:
                        self._in_flight.discard(p.writer.thread_id)
                    self._done += len(batch)
                    self._cond.notify_all()
                waiters: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
                for p in batch:
                    p.done()
                    if p.waiter is not None:
                        waiters.setdefault(p.waiter.get_loop(), []).append(p.waiter)
                for loop, futures in waiters.items():
                    try:  # one wake-up per loop and commit
                        loop.call_soon_threadsafe(resolve_waiters, futures)
                    except RuntimeError:  # the loop is closed: nobody awaits them any more
                        pass

    def _commit(self, lane: _Lane, batch: list[Pending]) -> None:
        live: dict[str, list[Pending]] = {}
        for p in batch:
            refusal = p.writer.refusal()
            if refusal is not None:
                p.fail(refusal)
            else:
                live.setdefault(p.writer.thread_id, []).append(p)
        if not live:
            return
        fenced: dict[str, list[Pending]] = {}
        try:
            conn = lane.conn
            if conn is None or conn.closed or conn.broken:
                conn = lane.conn = self._connect()
                conn.autocommit = True  # the transactions are the lane's own (see connect)
                register_arrays(conn)
            by_thread: dict[str, list[Row]] = {
                t: [(p.record, p.line, p.writer.token) for p in items] for t, items in live.items()
            }
            metrics = _hooks.METRICS
            started = time.perf_counter() if metrics is not None else 0.0
            params, ops = fenced_commit(
                {t: by_thread[t] for t in sorted(by_thread)}, origin=self._origin
            )
            # One round trip. With no other projections, the fenced statement (the inserts,
            # the threads rows) alone, in autocommit: a transaction of its own,
            # committed (the WAL flushed) before the server answers, the lease rows locked
            # until then. Otherwise BEGIN, the fenced statement, the other projections (each
            # fenced the same way: they apply only where the inserts did) and COMMIT,
            # pipelined.
            with conn.cursor() as cur:
                if not ops:
                    cur.execute(FENCED_COMMIT, params)
                else:
                    with conn.cursor() as rest, conn.pipeline():
                        conn.execute("BEGIN")
                        cur.execute(FENCED_COMMIT, params)
                        run_ops(rest, ops)
                        conn.execute("COMMIT")
                rows = cur.fetchall()
            inserted = 0
            for thread_id, token, holder in rows:
                if thread_id is None:
                    inserted = int(token)
                    continue
                fenced[thread_id] = items = live.pop(thread_id)
                writer = items[0].writer
                writer.lose(LeaseLost(thread_id, writer.token, holder))
            expected = sum(len(items) for items in live.values())
            if inserted != expected:  # cannot be: a thread's rows share one token
                log.error("%d of %d rows committed", inserted, expected)
            if metrics is not None:  # the COMMIT is the durability wait: the fsync's equivalent
                metrics.observe("threadlog_fsync_seconds", time.perf_counter() - started)
                metrics.observe("threadlog_commit_records", len(batch))
                metrics.set("threadlog_queue_depth", len(self._queue))
            if live:
                with self._cond:
                    self.commits += 1
        except psycopg.Error as exc:
            error = StorageError(f"the commit of {len(batch)} append(s) failed: {exc}")
            error.__cause__ = exc
            for items in live.values():
                items[0].writer.break_(error)
                for p in items:
                    p.fail(error)
            if lane.conn is not None:
                lane.conn.close()  # its transaction is in doubt: a new connection next time
                lane.conn = None
            self._on_failure(error)
            return  # nothing of it is acknowledged, nor heard of by the listeners
        for thread_id, items in fenced.items():
            refusal = items[0].writer.refusal()
            for p in items:
                p.fail(refusal or LeaseLost(thread_id, None))
        for thread_id, items in live.items():
            items[0].writer.committed([p.record.id for p in items])
            self._on_durable(thread_id, [p.record for p in items])
        if live:
            self._notify(live)

    def _notify(self, live: dict[str, list[Pending]]) -> None:
        """Have the other processes' readers of the threads a commit just made longer told
        (one notification per thread, by the `Sender`, queued before the thread's next commit
        can be taken: a thread's notifications go out in order). The records are committed
        whatever happens next: if the process dies before the notification is sent, it is
        lost, which costs the readers latency only (they poll too: `notify`)."""
        self._sender.send(
            [
                notify_payload(t, items[0].record.ord, items[-1].record.ord, self._origin)
                for t, items in live.items()
            ]
        )


class _Lane:
    """One committing thread, its connection and the size of its last batch."""

    __slots__ = ("conn", "gathering", "index", "last_size", "thread")

    def __init__(self, index: int) -> None:
        self.index = index
        self.conn: psycopg.Connection[Any] | None = None
        self.thread: threading.Thread | None = None
        self.last_size = 0
        self.gathering = False
