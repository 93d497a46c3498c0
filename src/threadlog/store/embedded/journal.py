"""Group commit across threads: the store's journal and the per-thread rollout writers.

Theory of operation
-------------------
Every record is written twice: first to the store's **journal** (one append-only file per open
store, shared by all the threads it writes), then to its thread's **rollout**. Durability comes
from the journal: a batch of records from any number of threads is made durable by *one*
``write`` and *one* ``fdatasync`` of the journal, and only then copied into the rollouts (plain
writes, no fsync). So 64 conversations written at once share fsyncs exactly like 64 writers on
one conversation do, instead of paying one fsync per file (which, in Python, is also paid in GIL
hand-offs: on a 2-core machine per-file fsyncs from 64 threads top out near 20k/s).

*Leader/follower.* `Journal.wait(seq)` blocks until journal sequence ``seq`` is durable. The
first waiter that finds no flush running becomes the leader: it takes every queued line, writes
and fsyncs the journal without holding the lock, copies the lines into their rollouts, marks
them durable and wakes the rest. A waiter whose record came in during that flush leads the
next one. `RolloutLog.submit` assigns the ordinal and queues the line *under the rollout's
lock*, so each thread's records reach the journal (and its rollout) in ordinal order.

*Checkpoints.* When the journal passes ``rotate_bytes``, and when the store closes, the leader
fsyncs every rollout written since the last checkpoint and only then deletes the old journal
(RELIABILITY B2); a new journal is created under a temporary name, locked, renamed into place
and its directory fsynced before it takes records. It starts with a header keyed by the
home's secret (`threadlog.store._perms.journal_header`): recovery replays no other journal.

*Recovery.* A journal belongs to a live store while that store holds an exclusive ``flock`` on
it. A journal nobody holds is *dead*: its store crashed before its checkpoint. Before a thread
is opened for writing, its records from dead journals are copied into its rollout: the rollout's
valid prefix is kept, and if the journal continues it (its first record for the thread is at or
before the prefix's next ordinal, and the hashes agree) the rollout is truncated to that prefix
and the journal's later records are appended and fsynced. Damage in a rollout that the journal
does not cover stays an `IntegrityError`.

*Fail-stop.* Any write or fsync error poisons the journal: the batch's waiters and every later
append get `StorageError`, and nothing more is acknowledged until the store is reopened, which
re-reads the files and replays the journal. fsync is never retried.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import orjson

from threadlog.errors import (
    DuplicateEventConflict,
    IntegrityError,
    OrdinalConflict,
    RecordTooLarge,
    StorageError,
    UsageError,
)
from threadlog.model.envelope import BadRecord, Record, encode_record, parse_line
from threadlog.store._perms import journal_header

if TYPE_CHECKING:
    from types import EllipsisType

    from threadlog.store._fileops import FileOps
    from threadlog.store.embedded.rollout import Scan

__all__ = ["Journal", "LogClosed", "RolloutLog"]

log = logging.getLogger("threadlog.store")

DurableCallback = Callable[["RolloutLog", list[Record], int], None]

_SCALARS = frozenset({str, int, float, bool, type(None)})


class LogClosed(StorageError):
    """The rollout was closed (released or evicted); reopen the thread to append."""


class RolloutLog:
    """One thread's rollout while this store holds its lease: ordinals, chain, id index."""

    def __init__(
        self,
        *,
        thread_id: str,
        path: str,
        fd: int,
        journal: Journal,
        scanned: Scan,
        max_record_bytes: int,
        anchor: Record | None = None,
        load_prefix: Callable[[], Scan] | None = None,
        publish: Callable[[int], None] | None = None,
    ) -> None:
        """``scanned`` covers the file from its start, or (with ``anchor``, the verified record
        just before it, e.g. a snapshot's) only its tail; the prefix's offsets and ids are
        then loaded with ``load_prefix`` the first time they are needed."""
        self.thread_id = thread_id
        self.path = path
        self.fd = fd
        self.publish = publish
        """Announces the durable end to readers in other processes (the lease's notice)."""
        self._journal = journal
        self._max_record_bytes = max_record_bytes
        self._lock = threading.Lock()
        records = scanned.records
        last = records[-1] if records else anchor
        self.last_ord = last.ord if last else 0
        self.last_hash: str | None = last.hash if last else None
        self.last_id: str | None = last.id if last else None
        self._first_ord = anchor.ord + 1 if anchor else 1
        """The first ord whose offset and id are loaded (the prefix is loaded lazily)."""
        self._prefix_end = (scanned.offsets[0] if scanned.offsets else scanned.end) if anchor else 0
        """Where the records before ``_first_ord`` end in the file."""
        self._load_prefix = load_prefix
        self.durable_ord = self.last_ord
        """Highest ord that is durable (in the journal) and written to the rollout file."""
        self.size = scanned.end
        """Bytes of the rollout file written so far."""
        self.last_seq = 0
        """Journal sequence of this log's latest queued record."""
        self._offsets: list[int] = list(scanned.offsets)
        self._queued_bytes = 0
        self._ids: dict[str, int] = {r.id: r.ord for r in records}
        self._unwritten: dict[int, Record] = {}
        self.closed = False
        self.uses = 0
        """Appends so far (the store evicts the least used idle logs)."""
        self.fresh: Scan | None = scanned if anchor is None else None
        """The whole-file scan the log was opened with, kept for the one read that usually
        follows (a session replaying the thread) and dropped at the first append."""

    def submit(
        self,
        *,
        id: str,
        type: str,
        data: Any,
        data_json: bytes,
        parent: str | None | EllipsisType,
        ts: str,
        expect_ord: int | None,
        check: Callable[[Record], object] | None = None,
        explicit_id: bool = True,
    ) -> tuple[Record, int]:
        """Assign the next ordinal, chain, encode and queue one record; ``(record, seq)``.

        ``parent=...`` means "the previous record". An id that is already in the log returns
        the stored record if the content is the same (with the sequence to wait for), and
        raises `DuplicateEventConflict` if not. ``check(record)`` runs before the record is
        queued; if it raises, nothing is queued and the ordinal stays free.
        """
        with self._lock:
            if self.closed:
                raise LogClosed(f"thread {self.thread_id}: the log is closed")
            self.uses += 1
            self.fresh = None
            # The record's data must equal what a later read returns. A flat object of plain
            # scalars already does (and is kept: no allocation on the hot path); anything else
            # is replaced by the decoded bytes (orjson writes UUIDs and enums as their values).
            flat = data.__class__ is dict and len(data) <= 32  # (`type` is a parameter here)
            if flat:
                for value in data.values():
                    if value.__class__ not in _SCALARS:
                        flat = False
                        break
            if not flat:
                data = orjson.loads(data_json)
            existing = self._ids.get(id)
            if existing is None and explicit_id and self._first_ord > 1:
                self._complete_prefix()
                existing = self._ids.get(id)
            if existing is not None:
                stored = self._record_at(existing)
                want_parent = stored.parent if parent is ... else parent
                if not stored.same_content(type, data, want_parent):
                    raise DuplicateEventConflict(self.thread_id, id, existing)
                return stored, (self.last_seq if existing > self.durable_ord else 0)
            ord_ = self.last_ord + 1
            if expect_ord is not None and expect_ord != ord_:
                raise OrdinalConflict(self.thread_id, expect_ord, ord_)
            parent_id = self.last_id if parent is ... else parent
            if parent_id is not None and parent_id != self.last_id:
                self._check_parent(parent_id)
            prev = self.last_hash
            line, digest = encode_record(
                id=id,
                thread=self.thread_id,
                ord=ord_,
                parent=parent_id,
                ts=ts,
                type=type,
                data_json=data_json,
                prev=prev,
            )
            if len(line) > self._max_record_bytes:
                raise RecordTooLarge(
                    f"record of {len(line)} bytes is over the limit of {self._max_record_bytes}"
                )
            record = Record(1, id, self.thread_id, ord_, parent_id, ts, type, data, prev, digest)
            if check is not None:
                check(record)
            seq = self._journal.enqueue(self, line, record)
            self._offsets.append(self.size + self._queued_bytes)
            self._queued_bytes += len(line)
            self._unwritten[ord_] = record
            self._ids[id] = ord_
            self.last_ord, self.last_hash, self.last_id, self.last_seq = ord_, digest, id, seq
            return record, seq

    def _check_parent(self, parent: str) -> None:
        """Refuse a parent that names no record of this thread (a dangling edge would make
        the conversation tree lie about where a record continues). Lock held."""
        if parent not in self._ids and self._first_ord > 1:
            self._find_in_prefix(parent)
        if parent not in self._ids:
            raise UsageError(
                f"thread {self.thread_id} has no record {parent!r:.80} to continue: pass the "
                "id of one of its records as parent, None for a new root, or leave it out "
                "for the previous record"
            )

    def _find_in_prefix(self, id_: str) -> None:
        """Look a record id up in the part of the file before ``_first_ord`` (a log opened
        from a snapshot anchor), adding it to the id index if it is there. Lock held.

        A byte search, confirmed by parsing the one line it lands in, instead of the whole
        scan `_complete_prefix` does: a session resumed from a snapshot names its conversation
        leaf, often before the anchor, as the parent of its first record.
        """
        prefix = os.pread(self.fd, self._prefix_end, 0)
        needle = b'"id":"' + id_.encode("utf-8", "replace") + b'"'
        pos = prefix.find(needle)
        while pos >= 0:
            start = prefix.rfind(b"\n", 0, pos) + 1
            end = prefix.find(b"\n", pos) + 1 or len(prefix)
            try:
                record = parse_line(prefix[start:end])
            except BadRecord:
                record = None
            if record is not None and record.id == id_ and record.ord < self._first_ord:
                self._ids[id_] = record.ord
                return
            pos = prefix.find(needle, end)

    def take_fresh(self) -> list[Record] | None:
        """The records of the opening scan, once, if nothing was appended since."""
        with self._lock:
            scanned, self.fresh = self.fresh, None
            if scanned is None or self.size != scanned.end or self._unwritten:
                return None
            return scanned.records

    def _complete_prefix(self) -> None:
        """Load the offsets and ids of the records before ``_first_ord``. Lock held."""
        assert self._load_prefix is not None
        full = self._load_prefix()
        if full.error is not None:
            raise full.error
        prefix = [
            (r, off)
            for r, off in zip(full.records, full.offsets, strict=True)
            if r.ord < self._first_ord
        ]
        if len(prefix) != self._first_ord - 1:
            raise IntegrityError(
                self.thread_id, len(prefix) + 1, "the rollout's prefix is incomplete"
            )
        self._offsets = [off for _, off in prefix] + self._offsets
        for record, _ in prefix:
            self._ids[record.id] = record.ord
        self._first_ord = 1

    def offset_after(self, ord_: int) -> int | None:
        """The byte offset just after record ``ord_`` if it is written, else None."""
        with self._lock:
            if ord_ > self.durable_ord or ord_ < self._first_ord - 1:
                return None
            index = ord_ + 1 - self._first_ord
            return self._offsets[index] if index < len(self._offsets) else self.size

    def written(self, records: list[Record], nbytes: int) -> None:
        """Called by the journal leader once ``records`` are durable and in the file."""
        with self._lock:
            self.size += nbytes
            self._queued_bytes -= nbytes
            self.durable_ord = records[-1].ord
            for record in records:
                del self._unwritten[record.ord]

    def _record_at(self, ord_: int) -> Record:
        """A record of this log by ordinal (queued ones from memory). Lock held."""
        unwritten = self._unwritten.get(ord_)
        if unwritten is not None:
            return unwritten
        if ord_ < self._first_ord:
            self._complete_prefix()
        index = ord_ - self._first_ord
        start = self._offsets[index]
        end = self._offsets[index + 1] if index + 1 < len(self._offsets) else self.size
        line = os.pread(self.fd, end - start, start)
        try:
            return parse_line(line)
        except BadRecord as exc:
            raise IntegrityError(self.thread_id, ord_, str(exc), offset=start) from None


class Journal:
    """The store's shared journal and group committer. See the module docstring."""

    def __init__(
        self,
        directory: str,
        fops: FileOps,
        on_durable: DurableCallback,
        *,
        rotate_bytes: int = 64 * 1024 * 1024,
        secret: bytes = b"",
        on_failure: Callable[[StorageError], None] | None = None,
    ) -> None:
        """``secret`` is the home's (see `threadlog.store._perms`): each journal starts with a
        header keyed by it, so that recovery replays only journals this home wrote.
        ``on_failure(error)`` is called once, from the failing thread and without the
        journal's lock, when the journal stops (fail-stop), so that whoever waits for records
        that will now never come (subscribers) is told instead of waiting forever."""
        self.directory = directory
        self._secret = secret
        self._fops = fops
        self._on_durable = on_durable
        self._on_failure = on_failure
        self._rotate_bytes = rotate_bytes
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
        self._pending: list[tuple[RolloutLog, bytes, Record]] = []
        self._submitted = 0
        self.durable_seq = 0
        self._flushing = False
        self._poisoned: StorageError | None = None
        self._fd: int | None = None
        self.path: str | None = None
        self._size = 0
        self._dirty: dict[str, RolloutLog] = {}
        self.closed = False

    @property
    def submitted(self) -> int:
        return self._submitted

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def _poison(self, what: str, failure: BaseException) -> NoReturn:
        """Fail-stop (A4): no write is acknowledged after this one failed. Condition held."""
        first = self._poisoned is None
        self._poisoned = error = StorageError(
            f"{what} and the store stopped acknowledging writes ({failure}); "
            "close and reopen the store to continue"
        )
        log.error("journal %s: %s", self.path, failure)
        self._cond.notify_all()  # every waiter wakes and raises it (`check`)
        if first and self._on_failure is not None:
            self._cond.release()  # the callback may call into the store
            try:
                self._on_failure(error)
            except Exception:
                log.exception("a store failure listener failed")
            finally:
                self._cond.acquire()
        raise error from failure

    @property
    def error(self) -> StorageError | None:
        """The error that stopped the journal, if one did."""
        return self._poisoned

    def check(self) -> None:
        """Raise the error that stopped the journal, if one did."""
        if self._poisoned is not None:
            raise self._poisoned

    def enqueue(self, rollout: RolloutLog, line: bytes, record: Record) -> int:
        """Queue a line (the caller holds ``rollout``'s lock); returns its sequence number."""
        with self._mutex:  # the condition's own lock, without the Python-level wrapper
            self.check()
            if self.closed:
                raise StorageError("the store's journal is closed")
            self._pending.append((rollout, line, record))
            self._submitted += 1
            return self._submitted

    def wait(self, seq: int) -> None:
        """Block until ``seq`` is durable, leading a group commit when none is running."""
        with self._cond:
            while self.durable_seq < seq:
                self.check()
                if self._flushing:
                    self._cond.wait()
                else:
                    self._flush_locked()

    def flush(self) -> None:
        """Make everything queued so far durable."""
        self.wait(self._submitted)

    def _flush_locked(self) -> None:
        batch = self._pending
        if not batch:
            return
        self._pending = []
        upto = self._submitted
        self._flushing = True
        failure: BaseException | None = None
        self._cond.release()
        try:
            self._commit(batch)
        except BaseException as exc:
            failure = exc
        finally:
            self._cond.acquire()
            self._flushing = False
        if failure is not None:
            self._poison("append failed", failure)
        self.durable_seq = upto
        self._cond.notify_all()

    def _commit(self, batch: list[tuple[RolloutLog, bytes, Record]]) -> None:
        """Make a batch durable, then copy the lines into the rollouts. No lock held.

        A batch of one thread's records is written straight to its rollout with one
        ``fdatasync`` (which also covers that rollout's earlier unsynced writes): the journal
        would cost a second write for nothing. A batch that spans threads goes through the
        journal: one write and one ``fdatasync`` for all of them.
        """
        fops = self._fops
        # Group by rollout, keeping each thread's order.
        groups: dict[str, tuple[RolloutLog, list[bytes], list[Record]]] = {}
        for rollout, line, record in batch:
            group = groups.get(rollout.thread_id)
            if group is None:
                groups[rollout.thread_id] = (rollout, [line], [record])
            else:
                group[1].append(line)
                group[2].append(record)
        if len(groups) == 1:
            ((rollout, lines, records),) = groups.values()
            chunk = b"".join(lines)
            try:
                fops.write_all(rollout.fd, chunk)
                fops.fdatasync(rollout.fd)
            except BaseException:
                # Nothing of the batch was acknowledged. Cut it off the file: after a failed
                # fdatasync the kernel may call those pages clean without their being on disk
                # ("fsyncgate"), and a reader must not see them as records.
                with contextlib.suppress(OSError):
                    fops.ftruncate(rollout.fd, rollout.size)
                raise
            rollout.written(records, len(chunk))
            self._dirty.pop(rollout.thread_id, None)
            self._on_durable(rollout, records, rollout.size)
            return
        if self._fd is None:
            self._open_new()
        assert self._fd is not None
        data = b"".join([line for _, line, _ in batch])
        fops.write_all(self._fd, data)
        fops.fdatasync(self._fd)
        self._size += len(data)
        for rollout, lines, records in groups.values():
            chunk = b"".join(lines)
            fops.write_all(rollout.fd, chunk)
            rollout.written(records, len(chunk))
            self._dirty[rollout.thread_id] = rollout
            self._on_durable(rollout, records, rollout.size)
        if self._size >= self._rotate_bytes:
            self._checkpoint(reopen=True)

    def _open_new(self) -> None:
        """Create a journal file: temp name, lock, rename into place, fsync the directory."""
        fops = self._fops
        fops.makedirs(self.directory)
        name = f"{os.getpid()}-{secrets.token_hex(8)}"
        tmp = os.path.join(self.directory, f".{name}.{os.getpid()}.tmp")  # (swept if orphaned)
        final = os.path.join(self.directory, f"{name}.wal")
        fd = fops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # The header is made durable by the first commit's fdatasync, with the first
            # records: a journal cut before that (no header, or part of it) acknowledged
            # nothing, and recovery deletes it.
            fops.write_all(fd, journal_header(self._secret, os.path.basename(final)))
            fops.rename(tmp, final)
            fops.fsync_dir(self.directory)
        except BaseException:
            fops.close(fd)
            raise
        self._fd, self.path, self._size = fd, final, 0

    def _checkpoint(self, *, reopen: bool) -> None:
        """fsync every rollout written since the last checkpoint, then retire the journal."""
        fops = self._fops
        # Closed ones too: a log being released or evicted is marked closed before its own
        # sync, and its file stays open until that sync has returned (and dropped it from
        # ``_dirty``); the journal must not go while it is the only durable copy.
        for rollout in self._dirty.values():
            fops.fsync(rollout.fd)
        self._dirty.clear()
        old_fd, old_path = self._fd, self.path
        self._fd, self.path, self._size = None, None, 0
        if reopen:
            self._open_new()
        if old_path is not None:
            fops.unlink(old_path)
            fops.fsync_dir(self.directory)
        if old_fd is not None:
            fops.close(old_fd)

    def sync_rollout(self, rollout: RolloutLog) -> None:
        """Before a rollout is closed on its own: make its file durable (leader role held)."""
        with self._cond:
            while self._flushing:
                self._cond.wait()
            self.check()
            self._flush_locked()
            try:
                self._fops.fsync(rollout.fd)
            except OSError as exc:
                # the pages may now be marked clean without being on disk; the journal, left
                # in place, is what the next open replays
                self._poison(f"syncing thread {rollout.thread_id} failed", exc)
            self._dirty.pop(rollout.thread_id, None)

    def abandon(self) -> None:
        """In a ``fork()``ed child: close this process's copy of the journal (and its lock)
        without touching the file, which the parent still holds. No lock is taken: another
        thread of the parent may have held one at the fork."""
        self.closed = True
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        """Flush, checkpoint every rollout and delete the journal. Idempotent.

        A poisoned journal is left on disk for the next open to replay.
        """
        with self._cond:
            if self.closed:
                return
            self.closed = True  # from now on nothing is queued (an append racing close fails)
            while self._flushing:
                self._cond.wait()
            try:
                if self._poisoned is None:
                    self._flush_locked()
                    self._checkpoint(reopen=False)
            finally:
                if self._fd is not None:
                    self._fops.close(self._fd)
                    self._fd = None
