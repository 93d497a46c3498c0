"""Group commit on PostgreSQL: one transaction, one COMMIT, for the appends of many threads.

Theory of operation
-------------------
An append is assigned its ordinal and hash by its thread's writer (`threadlog.store.postgres
.writer`) and handed to the `Committer` as a `Pending`: the record, its canonical line, the
writer (whose fencing token it carries) and a future. The committer is one thread with one
connection of its own. It sleeps until there is a critical append (or a flush) waiting, or
until the oldest buffered one has waited ``interval`` seconds; then it takes **everything**
queued, from every thread of the process, and writes it in one transaction:

1. ``SELECT thread_id, token FROM leases WHERE thread_id = ANY(…) FOR UPDATE``: the lease
   rows of the batch's threads, locked until COMMIT, so no takeover can come in between;
2. the records of the threads whose writer's token is the row's token are inserted (with
   their projections and one ``pg_notify`` per thread, `insert_records`); the others are
   refused with `LeaseLost` (their writer is marked lost: it appends nothing more);
3. one ``COMMIT``; only then are the listeners called (in order per thread) and the futures
   resolved: an acknowledged record is a committed one.

While a commit runs, new appends queue up for the next one, so the more writers append at
once, the more appends each COMMIT carries (and the fewer WAL flushes they wait for).
`commits` counts the transactions (tests read it).

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

from threadlog.errors import LeaseLost, StorageError
from threadlog.store.postgres.projections import insert_records

if TYPE_CHECKING:
    from collections.abc import Callable

    from threadlog.model.envelope import Record
    from threadlog.store.postgres.projections import Row
    from threadlog.store.postgres.writer import Pending

__all__ = ["Committer"]

log = logging.getLogger("threadlog.store")


class Committer:
    """The group-commit thread (module docstring).

    Args:
        connect: a new connection for the committer (autocommit off).
        channel: the NOTIFY channel; ``origin``: this store's id, in each notification.
        interval: the longest a buffered append waits for its commit (seconds).
        on_durable: ``(thread_id, records)`` after each commit, per thread in order.
        on_failure: a failed commit's error.
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
    ) -> None:
        self._connect = connect
        self._conn: psycopg.Connection[Any] | None = None
        self._channel = channel
        self._origin = origin
        self.interval = interval
        self._on_durable = on_durable
        self._on_failure = on_failure
        self._queue: list[Pending] = []
        self._cond = threading.Condition()
        self._urgent = False
        self._oldest = 0.0
        self._stopping = False
        self._submitted = 0
        self._done = 0
        self.commits = 0
        """Transactions committed so far (each carries one or more appends)."""
        self._thread = threading.Thread(target=self._run, name="threadlog-pg-commit", daemon=True)
        self._thread.start()

    def submit(self, pending: Pending, *, urgent: bool) -> None:
        """Queue an append for the next commit (``urgent``: commit without waiting)."""
        with self._cond:
            if self._stopping:
                raise StorageError("the store's committer has stopped")
            if not self._queue:
                self._oldest = time.monotonic()
            self._queue.append(pending)
            self._submitted += 1
            if urgent:
                self._urgent = True
                self._cond.notify()

    def flush(self) -> None:
        """Wait until everything queued so far is committed (or has failed)."""
        with self._cond:
            target = self._submitted
            if self._done >= target:
                return
            self._urgent = True
            self._cond.notify_all()
            while self._done < target:
                self._cond.wait()

    def stop(self) -> None:
        """Commit what is queued, then stop the thread and close the connection."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._queue and (self._urgent or self._stopping):
                        break
                    if self._queue:
                        wait = self._oldest + self.interval - time.monotonic()
                        if wait <= 0:
                            break
                        self._cond.wait(wait)
                    elif self._stopping:
                        return
                    else:
                        self._cond.wait()
                batch, self._queue = self._queue, []
                self._urgent = False
            try:
                self._commit(batch)
            except BaseException as exc:  # a bug: fail the batch rather than hang its waiters
                log.exception("the group commit failed unexpectedly")
                error = StorageError(f"the group commit failed: {exc!r}")
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(error)
                        p.writer.break_(error)
            finally:
                with self._cond:
                    self._done += len(batch)
                    self._cond.notify_all()

    def _commit(self, batch: list[Pending]) -> None:
        live: dict[str, list[Pending]] = {}
        for p in batch:
            refusal = p.writer.refusal()
            if refusal is not None:
                p.future.set_exception(refusal)
            else:
                live.setdefault(p.writer.thread_id, []).append(p)
        if not live:
            return
        try:
            conn = self._conn
            if conn is None or conn.closed or conn.broken:
                conn = self._conn = self._connect()
            with conn.transaction(), conn.cursor() as cur:
                rows = cur.execute(
                    "SELECT thread_id, token, holder FROM leases WHERE thread_id = ANY(%s) "
                    "ORDER BY thread_id FOR UPDATE",
                    (sorted(live),),
                ).fetchall()
                tokens = {str(t): (int(k), str(h)) for t, k, h in rows}
                fenced: dict[str, list[Pending]] = {}
                for thread_id, items in list(live.items()):
                    token, holder = tokens.get(thread_id, (None, None))
                    writer = items[0].writer
                    if token != writer.token:
                        del live[thread_id]
                        fenced[thread_id] = items
                        writer.lose(LeaseLost(thread_id, writer.token, holder))
                if live:
                    by_thread: dict[str, list[Row]] = {
                        t: [(p.record, p.line, p.writer.token) for p in items]
                        for t, items in live.items()
                    }
                    insert_records(cur, by_thread, channel=self._channel, origin=self._origin)
            if live:
                self.commits += 1
        except psycopg.Error as exc:
            error = StorageError(f"the commit of {len(batch)} append(s) failed: {exc}")
            error.__cause__ = exc
            for items in live.values():
                items[0].writer.break_(error)
                for p in items:
                    if not p.future.done():
                        p.future.set_exception(error)
            if self._conn is not None and (self._conn.broken or self._conn.closed):
                self._conn = None
            self._on_failure(error)
            return
        for thread_id, items in fenced.items():
            refusal = items[0].writer.refusal()
            for p in items:
                p.future.set_exception(refusal or LeaseLost(thread_id, None))
        for thread_id, items in live.items():
            items[0].writer.committed([p.record.id for p in items])
            try:
                self._on_durable(thread_id, [p.record for p in items])
            finally:
                for p in items:
                    p.future.set_result(p.record)
