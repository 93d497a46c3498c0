"""The JSONL rollout: one thread's log file, scanned, repaired and appended with group commit.

Theory of operation
-------------------
*Scanning.* `scan` walks a rollout from the start and checks every line: framing (a line ends
with ``\\n``), canonical JSON, hash, ``ord == previous + 1``, ``prev == previous hash``, the
thread id, unique event ids. It stops at the first bad line and classifies it:

* **torn tail** — the bad bytes run to the end of the file and look like an interrupted write
  (a line without its newline, zeros, garbage), with no valid record after them. A crash can
  leave this; the part was never acknowledged. Opening the thread for writing truncates it and
  fsyncs (logged with the byte count). Readers simply stop before it.
* **corruption** — anything else: a complete record whose hash or chain is wrong, or a valid
  record *after* an invalid one. A crash cannot produce this, and truncating would delete
  acknowledged records, so it is reported as `IntegrityError` with the first bad ordinal and
  byte offset, and the thread refuses writes. Nothing is ever dropped silently.

*Appending.* `RolloutLog` owns the file of one thread while its process holds the lease.
`submit` assigns the next ordinal, chains the hash and queues the encoded line, all under the
log's lock (this is cheap: no I/O). `wait_durable(ord)` then makes the line durable with
*leader/follower group commit*: the first waiter that finds no flush running takes every queued
line, writes them with one ``write`` and one ``fdatasync`` (without the lock), and wakes the
rest; a waiter whose line came in during that flush leads the next one. So concurrent critical
appends share fsyncs, and each caller returns only once its own line is durable.

*Fail-stop.* Any write or fsync error poisons the log: the waiters of that batch and every
later call get `StorageError`, nothing more is acknowledged, and the thread must be reopened
(which re-reads and repairs the file from disk). fsync is never retried on the same file
(after a failed fsync the kernel may have marked the lost pages clean).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import EllipsisType
from typing import Any

from threadlog.errors import (
    DuplicateEventConflict,
    IntegrityError,
    OrdinalConflict,
    RecordTooLarge,
    StorageError,
)
from threadlog.model.envelope import BadRecord, Record, encode_record, parse_line
from threadlog.store._fileops import FileOps

__all__ = ["RolloutLog", "Scan", "TornTail", "scan", "scan_file"]

log = logging.getLogger("threadlog.store")


@dataclass(slots=True)
class TornTail:
    """An interrupted final write: ``size`` bytes from ``offset`` to the end of the file."""

    offset: int
    size: int
    reason: str


@dataclass(slots=True)
class Scan:
    """What a scan of a rollout found."""

    records: list[Record] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    """Byte offset of each record's line, parallel to ``records``."""
    end: int = 0
    """Offset just past the last valid record."""
    torn: TornTail | None = None
    error: IntegrityError | None = None
    """Set when the log is damaged; ``records`` then holds the valid prefix."""


def _looks_like_record(line: bytes) -> bool:
    """A complete line that parses as an envelope-shaped object (so not crash debris)."""
    try:
        import orjson

        obj = orjson.loads(line)
    except Exception:
        return False
    return isinstance(obj, dict) and "ord" in obj and "hash" in obj and "thread" in obj


def scan(
    data: bytes,
    thread_id: str,
    *,
    base_offset: int = 0,
    start_ord: int = 1,
    prev_hash: str | None = None,
    keep_records: bool = True,
) -> Scan:
    """Validate rollout bytes; see the module docstring for torn tail vs corruption.

    ``base_offset``/``start_ord``/``prev_hash`` continue a scan from the middle of a file
    whose prefix is already known to be valid.
    """
    result = Scan(end=base_offset)
    expected = start_ord
    prev = prev_hash
    seen: set[str] = set()
    pos = 0
    size = len(data)
    while pos < size:
        nl = data.find(b"\n", pos)
        if nl < 0:
            result.torn = TornTail(base_offset + pos, size - pos, "final line has no newline")
            return result
        line = data[pos : nl + 1]
        problem: str | None = None
        record: Record | None = None
        try:
            record = parse_line(line)
        except BadRecord as exc:
            problem = str(exc)
        if record is not None:
            if record.thread != thread_id:
                problem = f"record belongs to thread {record.thread}"
            elif record.ord != expected:
                problem = f"ord {record.ord} where {expected} was expected"
            elif record.prev != prev:
                problem = "prev does not match the previous record's hash (chain broken)"
            elif record.id in seen:
                problem = f"event id {record.id} appears twice"
        if problem is not None:
            _classify(result, data, pos, line, problem, thread_id, expected, base_offset)
            return result
        assert record is not None
        seen.add(record.id)
        if keep_records:
            result.records.append(record)
            result.offsets.append(base_offset + pos)
        prev = record.hash
        expected += 1
        pos = nl + 1
        result.end = base_offset + pos
    return result


def _classify(
    result: Scan, data: bytes, pos: int, line: bytes, problem: str, thread_id: str,
    expected: int, base_offset: int,
) -> None:
    offset = base_offset + pos
    if _looks_like_record(line):
        result.error = IntegrityError(thread_id, expected, problem, offset=offset)
        return
    # Debris. It is a torn tail only if no valid record follows it.
    rest = data[pos + len(line) :]
    start = 0
    while start < len(rest):
        nl = rest.find(b"\n", start)
        if nl < 0:
            break
        try:
            parse_line(rest[start : nl + 1])
        except BadRecord:
            start = nl + 1
            continue
        result.error = IntegrityError(
            thread_id, expected, f"{problem}, and valid records follow it", offset=offset
        )
        return
    result.torn = TornTail(offset, len(data) - pos, problem)


def scan_file(path: str, thread_id: str, **kwargs: Any) -> Scan:
    """`scan` a rollout file from disk (read in one go)."""
    with open(path, "rb") as f:
        offset = kwargs.get("base_offset", 0)
        if offset:
            f.seek(offset)
        data = f.read()
    return scan(data, thread_id, **kwargs)


DurableCallback = Callable[["RolloutLog", list[Record], int], None]


class RolloutLog:
    """One thread's rollout, open for appending. Thread-safe; see the module docstring."""

    def __init__(
        self,
        *,
        thread_id: str,
        path: str,
        fd: int,
        fops: FileOps,
        scanned: Scan,
        on_durable: DurableCallback,
        max_record_bytes: int,
    ) -> None:
        self.thread_id = thread_id
        self.path = path
        self._fd = fd
        self._fops = fops
        self._on_durable = on_durable
        self._max_record_bytes = max_record_bytes
        self._cond = threading.Condition(threading.Lock())
        records = scanned.records
        self.last_ord = records[-1].ord if records else 0
        self.last_hash: str | None = records[-1].hash if records else None
        self.last_id: str | None = records[-1].id if records else None
        self.durable_ord = self.last_ord
        self.size = scanned.end
        self._offsets: list[int] = list(scanned.offsets)
        self._ids: dict[str, int] = {r.id: r.ord for r in records}
        self._pending: list[bytes] = []
        self._pending_records: list[Record] = []
        self._pending_bytes = 0
        self._unflushed: dict[int, Record] = {}
        self._flushing = False
        self._poisoned: StorageError | None = None
        self._closed = False

    # -- appending -------------------------------------------------------------------------

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
    ) -> tuple[Record, bool]:
        """Queue one record; returns ``(record, is_new)``. No I/O.

        ``parent=...`` (Ellipsis) means "the previous record". An id that is already in the
        log returns the stored record (``is_new`` false) if the content is the same, and
        raises `DuplicateEventConflict` if not.
        """
        with self._cond:
            self._check_usable()
            existing = self._ids.get(id)
            if existing is not None:
                stored = self._record_at(existing)
                want_parent = stored.parent if parent is ... else parent
                if not stored.same_content(type, data, want_parent):
                    raise DuplicateEventConflict(self.thread_id, id, existing)
                return stored, False
            ord_ = self.last_ord + 1
            if expect_ord is not None and expect_ord != ord_:
                raise OrdinalConflict(self.thread_id, expect_ord, ord_)
            parent_id = self.last_id if parent is ... else parent
            line, digest = encode_record(
                id=id, thread=self.thread_id, ord=ord_, parent=parent_id, ts=ts, type=type,
                data_json=data_json, prev=self.last_hash,
            )
            if len(line) > self._max_record_bytes:
                raise RecordTooLarge(
                    f"record of {len(line)} bytes is over the limit of {self._max_record_bytes}"
                )
            record = Record(
                v=1, id=id, thread=self.thread_id, ord=ord_, parent=parent_id, ts=ts, type=type,
                data=data, prev=self.last_hash, hash=digest,
            )
            self._offsets.append(self.size + self._pending_bytes)
            self._pending.append(line)
            self._pending_records.append(record)
            self._pending_bytes += len(line)
            self._unflushed[ord_] = record
            self._ids[id] = ord_
            self.last_ord, self.last_hash, self.last_id = ord_, digest, id
            return record, True

    def wait_durable(self, ord_: int) -> None:
        """Block until record ``ord_`` is durable, leading a group commit if none is running."""
        with self._cond:
            while self.durable_ord < ord_:
                self._check_usable(allow_closed=True)
                if self._flushing:
                    self._cond.wait()
                else:
                    self._flush_locked()

    def flush(self) -> None:
        """Make everything submitted so far durable."""
        self.wait_durable(self.last_ord)

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def _flush_locked(self) -> None:
        lines, records = self._pending, self._pending_records
        if not lines:
            return
        self._pending, self._pending_records, self._pending_bytes = [], [], 0
        self._flushing = True
        failure: BaseException | None = None
        buf = b"".join(lines)
        self._cond.release()
        try:
            self._fops.write_all(self._fd, buf)
            self._fops.fdatasync(self._fd)
        except BaseException as exc:  # noqa: BLE001 - any failure must poison the log
            failure = exc
        finally:
            self._cond.acquire()
            self._flushing = False
        if failure is not None:
            self._poisoned = StorageError(
                f"thread {self.thread_id}: append failed and the log is stopped "
                f"({failure}); reopen the thread to continue"
            )
            log.error("thread %s: %s", self.thread_id, failure)
            self._cond.notify_all()
            raise self._poisoned from failure
        self.size += len(buf)
        self.durable_ord = records[-1].ord
        for record in records:
            del self._unflushed[record.ord]
        try:
            self._on_durable(self, records, self.size)
        finally:
            self._cond.notify_all()

    def _check_usable(self, allow_closed: bool = False) -> None:
        if self._poisoned is not None:
            raise self._poisoned
        if self._closed and not allow_closed:
            raise StorageError(f"thread {self.thread_id}: the log is closed")

    # -- reading back ----------------------------------------------------------------------

    def _record_at(self, ord_: int) -> Record:
        """A record of this log by ordinal (pending ones from memory). Lock held."""
        unflushed = self._unflushed.get(ord_)
        if unflushed is not None:
            return unflushed
        start = self._offsets[ord_ - 1]
        end = self._offsets[ord_] if ord_ < len(self._offsets) else self.size
        line = os.pread(self._fd, end - start, start)
        try:
            return parse_line(line)
        except BadRecord as exc:
            raise IntegrityError(self.thread_id, ord_, str(exc), offset=start) from None

    # -- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        """Flush what is pending (unless poisoned) and close the file. Idempotent."""
        with self._cond:
            if self._closed:
                return
            try:
                if self._poisoned is None:
                    while self._flushing:
                        self._cond.wait()
                    self._flush_locked()
            finally:
                self._closed = True
                self._fops.close(self._fd)
