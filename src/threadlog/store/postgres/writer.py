"""One thread's writer in this process: the head of its log, its legality state, its lease.

Theory of operation
-------------------
A `Writer` exists while this store holds the thread's lease. It knows the thread's head (the
next ordinal, the last hash and id), which it read from the database *after* taking the lease,
so it continues exactly what the previous holder committed. `Writer.submit` does, under the
writer's lock, what makes an append an append: the idempotency check of an explicit id
(against the records still on their way to a commit, then the table), ``expect_ord``, the
parent check, the record and its canonical line (`threadlog.model.envelope.encode_record`:
the same bytes as an embedded rollout line, so hashes verify byte for byte on either
backend), the legality check (`threadlog.store.admission`) and the caller's ``check``; then
it moves the head on and hands the record to the committer. Ordinals are therefore assigned
in order and without gaps, and each record chains onto the one before it, however many
threads of the process append at once.

A writer ends in one of three ways: released (the store drops it), *lost* (its fencing token
was found stale: every later append raises the `LeaseLost` until `Store.release`), or
*broken* (a commit it had records in failed: the store replaces it with one that reads the
head again from the database, and its records still queued fail).
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

from threadlog.errors import (
    DuplicateEventConflict,
    IntegrityError,
    OrdinalConflict,
    UsageError,
)
from threadlog.model import codec
from threadlog.model.envelope import FORMAT_VERSION, BadRecord, Record, encode_record, parse_line
from threadlog.store.admission import Admission

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager
    from types import EllipsisType

    import psycopg

    from threadlog.errors import LeaseLost, StorageError
    from threadlog.model.state import ThreadState

__all__ = ["Pending", "Writer", "decode_line", "resolve_waiters"]

_FOUND = 1024
"""At most this many looked-up records are kept per writer (then they are dropped)."""


def decode_line(thread_id: str, ord_: int, line: bytes) -> Record:
    """A stored line as a record, its hash checked; damage is an `IntegrityError`."""
    try:
        record = parse_line(bytes(line))
    except BadRecord as exc:
        raise IntegrityError(thread_id, ord_, str(exc)) from None
    if record.ord != ord_:
        raise IntegrityError(thread_id, ord_, f"the row of ord {ord_} holds ord {record.ord}")
    return record


class Pending:
    """An append on its way to a commit: its record, line and writer; ``error`` is set
    (before `done`) if it was not written.

    A thread waits in `wait`, on the append's own lock, so that a commit wakes exactly the
    writers it carried. An asyncio caller gives the append a ``waiter`` (a future of its
    event loop) before queuing it: the committer resolves all of a commit's waiters of one
    loop with a single ``call_soon_threadsafe`` (one wake-up of the loop per commit, not one
    per append)."""

    __slots__ = ("_done", "error", "line", "record", "urgent", "waiter", "writer")

    def __init__(self, record: Record, line: bytes, writer: Writer) -> None:
        self.record = record
        self.line = line
        self.writer = writer
        self.error: BaseException | None = None
        self.urgent = False
        self.waiter: asyncio.Future[None] | None = None
        """The asyncio caller's future, resolved (in its loop) once the commit is over."""
        self._done = threading.Lock()
        self._done.acquire()  # released once, by the committer (`done`)

    def fail(self, error: BaseException) -> None:
        """Mark the append as not written (the first reason counts)."""
        if self.error is None:
            self.error = error

    def done(self) -> None:
        """The append's commit is over (``error`` says how): wake its waiters."""
        self._done.release()

    def wait(self) -> Record:
        """Block until the append is committed; its record, or raise why it is not."""
        self._done.acquire()
        self._done.release()  # for another waiter of the same append (a replayed id)
        if self.error is not None:
            raise self.error
        return self.record

    async def wait_async(self) -> Record:
        """`wait` for asyncio, for a caller other than the one that queued the append (an
        append of the same id, replayed while this one is on its way): in a worker thread,
        on the append's lock, so that neither caller's cancellation touches the other (the
        owner's future may be cancelled with its task; the commit goes on)."""
        return await asyncio.to_thread(self.wait)

    async def own_wait(self) -> Record:
        """`wait` for the asyncio caller that queued the append with its ``waiter``
        (cancelling that caller cancels only its own future: the commit goes on)."""
        assert self.waiter is not None
        await self.waiter
        if self.error is not None:
            raise self.error
        return self.record


def resolve_waiters(waiters: list[asyncio.Future[None]]) -> None:
    """Resolve the futures of one event loop whose appends' commit is over (in that loop:
    the committer schedules it with ``call_soon_threadsafe``). A cancelled one is skipped."""
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)


class Writer:
    """The writing side of one thread (module docstring)."""

    def __init__(
        self,
        thread_id: str,
        token: int,
        connection: Callable[[], AbstractContextManager[psycopg.Connection[Any]]],
        load_state: Callable[[], ThreadState | None],
    ) -> None:
        self.thread_id = thread_id
        self.token = token
        self._connection = connection
        self.lock = threading.Lock()
        self._pending: dict[str, Pending] = {}
        self._ids: set[str] = set()
        """The ids this writer appended (queued or committed)."""
        self._found: dict[str, Record] = {}
        """Records of the table looked up by id (an explicit id's replay, a parent), a few."""
        self._absent: set[str] = set()
        """Ids looked up and not in the table. Valid while this writer lives: it alone
        appends to the thread, and what it appends is in ``_ids``, which is asked first."""
        self._lost: LeaseLost | None = None
        self._broken: StorageError | None = None
        with connection() as conn:
            row = conn.execute(
                "SELECT ord, hash, id FROM events WHERE thread_id = %s ORDER BY ord DESC LIMIT 1",
                (thread_id,),
            ).fetchone()
        if row is None:
            raise IntegrityError(thread_id, 1, "the thread has no records")
        self.next_ord = int(row[0]) + 1
        self.last_hash: str = row[1]
        self.last_id: str = row[2]
        self._load_state = load_state
        self.admission = Admission(thread_id, load_state)
        self.prepared = False
        """Whether `prepare` ran: the next append needs no database round trip before its
        commit (an event loop may then call `submit` without blocking)."""

    def prepare(self) -> None:
        """Read what the first append would read (the thread's state) now, so that it does
        not wait for the database. Idempotent; safe beside appends."""
        if self.prepared:
            return
        state = self._load_state()
        with self.lock:
            if not self.admission_ready:
                self.admission = Admission(self.thread_id, self._load_state, first=lambda: state)
            self.prepared = True

    def needs_lookup(self, *ids: str | None) -> bool:
        """Whether checking these ids (an explicit id, a parent) would ask the database."""
        return any(
            i is not None
            and i != self.last_id
            and i not in self._ids
            and i not in self._found
            and i not in self._absent
            for i in ids
        )

    def look_up(self, *ids: str | None) -> None:
        """Look these ids up in the table now (one indexed query each), so that the append
        that names them does not (an event loop's `aappend` calls this in a worker thread)."""
        for id_ in ids:
            if id_ is not None and self.needs_lookup(id_):
                record = self._query(id_)
                with self.lock:
                    self._remember(id_, record)

    @property
    def admission_ready(self) -> bool:
        """Whether the legality state was built (by a first append)."""
        return bool(self.admission._ready)

    # -- the committer's side ----------------------------------------------------------------

    def refusal(self) -> Exception | None:
        """Why this writer's queued records must not be written, if they must not."""
        return self._lost or self._broken

    def lose(self, error: LeaseLost) -> None:
        """The lease passed to another holder: refuse everything from now on."""
        if self._lost is None:
            self._lost = error
        self.admission.forget()

    def break_(self, error: StorageError) -> None:
        """A commit with this writer's records failed: its head is in doubt."""
        if self._broken is None:
            self._broken = error
        self.admission.forget()

    def committed(self, ids: list[str]) -> None:
        """These records are in the table now (no longer looked up among the pending)."""
        with self.lock:
            for id_ in ids:
                self._pending.pop(id_, None)

    @property
    def lost(self) -> LeaseLost | None:
        """The loss of the lease, once found."""
        return self._lost

    @property
    def broken(self) -> StorageError | None:
        """The failed commit, once one failed."""
        return self._broken

    # -- appending -------------------------------------------------------------------------

    def submit(
        self,
        type_name: str,
        data: Any,
        data_json: bytes,
        *,
        id: str | None,
        new_id: str,
        ts: str,
        parent: str | None | EllipsisType,
        expect_ord: int | None,
        check: Callable[[Record], object] | None,
    ) -> tuple[Pending | None, Record]:
        """Make the record and queue-ready `Pending`; ``(None, stored record)`` for a replay.
        Raises what the append's checks raise; the caller holds ``lock``."""
        refusal = self.refusal()
        if refusal is not None:
            raise refusal
        if id is not None:
            stored = self._stored(id)
            if stored is not None:
                want = stored.parent if parent is ... else parent
                if not stored.same_content(type_name, codec.loads(data_json), want):
                    raise DuplicateEventConflict(self.thread_id, id, stored.ord)
                return None, stored
        ord_ = self.next_ord
        if expect_ord is not None and expect_ord != ord_:
            raise OrdinalConflict(self.thread_id, expect_ord, ord_)
        parent_id = self.last_id if parent is ... else parent
        if parent_id is not None and parent_id != self.last_id and not self._has(parent_id):
            raise UsageError(
                f"thread {self.thread_id} has no record {parent_id!r:.80} to continue: pass "
                "the id of one of its records as parent, None for a new root, or leave "
                "it out for the previous record"
            )
        event_id = id or new_id
        line, digest = encode_record(
            id=event_id,
            thread=self.thread_id,
            ord=ord_,
            parent=parent_id,
            ts=ts,
            type=type_name,
            data_json=data_json,
            prev=self.last_hash,
        )
        record = Record(
            FORMAT_VERSION,
            event_id,
            self.thread_id,
            ord_,
            parent_id,
            ts,
            type_name,
            data,
            self.last_hash,
            digest,
        )
        self.admission.admit(record, check)  # an illegal event raises: nothing is queued
        pending = Pending(record, line, self)
        self.next_ord = ord_ + 1
        self.last_hash = digest
        self.last_id = event_id
        self._pending[event_id] = pending
        self._ids.add(event_id)
        self._absent.discard(event_id)
        return pending, record

    def pending_of(self, id: str) -> Pending | None:
        """The queued append of event ``id``, if it is still on its way."""
        return self._pending.get(id)

    def _query(self, id: str) -> Record | None:
        """The record of event ``id`` in the table (the ``(thread_id, id)`` index), if any."""
        with self._connection() as conn:
            row = conn.execute(
                "SELECT ord, line FROM events WHERE thread_id = %s AND id = %s",
                (self.thread_id, id),
            ).fetchone()
        return decode_line(self.thread_id, int(row[0]), row[1]) if row else None

    def _remember(self, id: str, record: Record | None) -> None:
        """Keep a lookup's answer (the lock held): a few records, every absence."""
        if record is None:
            self._absent.add(id)
            return
        if len(self._found) >= _FOUND:
            self._found.clear()
        self._found[id] = record

    def _stored(self, id: str) -> Record | None:
        """The record of event ``id``, if the thread has one: queued, or in the table."""
        pending = self._pending.get(id)
        if pending is not None:
            return pending.record
        found = self._found.get(id)
        if found is not None:
            return found
        if id in self._absent and id not in self._ids:
            return None
        record = self._query(id)
        self._remember(id, record)
        return record

    def _has(self, id: str) -> bool:
        return id in self._ids or self._stored(id) is not None
