"""One thread's rollout while this store writes it: ordinals, the hash chain, the id index.

A `RolloutLog` is the in-memory side of a rollout file this store holds the lease of. It
assigns each record its ordinal and chains it under the log's own lock, encodes it and hands
the line to the store's journal (`threadlog.store.embedded.journal`), which makes it durable
and writes it into the file (`written`). It answers what an append must know without reading
the file: the last ordinal and hash, which ids the thread holds (an idempotent retry returns
the stored record), where each record ends (a snapshot's anchor). A log opened from a snapshot
anchor knows only what follows it at first and loads the prefix lazily, the first time an id
or an offset before the anchor is asked for.

Each record is checked against the thread's reduced state (its `Admission`) once its ordinal
is assigned and before it is queued, under the log's lock, so an event the reducer refuses is
never written (`threadlog.store.admission`). A record admitted but then not queued (``check``
refused it, the journal refused it) makes the log forget that state and rebuild it from the
file and its queued records. A write that fails after the record was queued poisons the
journal: nothing is queued on this store after that, and reopening it builds every state
anew from the files, so the state is never ahead of what can still be written.

Closing a log (released, evicted) makes further submissions raise `LogClosed`; the store then
reopens the thread.
"""

from __future__ import annotations

import os
import threading
from bisect import bisect_right
from typing import TYPE_CHECKING, Any, Protocol

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
from threadlog.model.legality import reduce_log
from threadlog.store import iddigest
from threadlog.store.admission import Admission
from threadlog.store.embedded.rollout import scan_file

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import EllipsisType

    from threadlog.model.state import ThreadState
    from threadlog.store.embedded.rollout import Scan
    from threadlog.store.iddigest import Block

__all__ = ["Enqueue", "LogClosed", "RolloutLog"]

_SEARCH_CHUNK = 4 * 1024 * 1024
"""How much of a prefix `RolloutLog._find_in_prefix` reads at a time."""
_FIRST_LINE = 1024 * 1024
"""How much of the file's start it reads for the first record (the root)."""

_INDEX_GAP = 8 * 1024 * 1024
"""Prefix bytes with no id block, at most, whose ids a lookup indexes at once (`_candidates`)."""
_HEAD = 4096
"""How much of a sparse entry's line `RolloutLog._checked_offset` reads first."""
_PREFIX_FOUND = 1024
"""At most this many records of a prefix found by id are kept (then they are dropped)."""

_SCALARS = frozenset({str, int, float, bool, type(None)})


class Enqueue(Protocol):
    """Where a log queues its lines: the store's journal (`Journal.enqueue`)."""

    def enqueue(self, rollout: RolloutLog, line: bytes, record: Record) -> int:
        """Queue ``line`` (the caller holds ``rollout``'s lock); its journal sequence."""
        ...


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
        journal: Enqueue,
        scanned: Scan,
        max_record_bytes: int,
        anchor: Record | None = None,
        load_prefix: Callable[[int, str], tuple[list[str], list[int]]] | None = None,
        load_points: Callable[[int], list[tuple[int, int, object]]] | None = None,
        publish: Callable[[int], None] | None = None,
        first_state: Callable[[], ThreadState | None] | None = None,
    ) -> None:
        """``scanned`` covers the file from its start, or (with ``anchor``, the verified record
        just before it, e.g. a snapshot's) only its tail; the prefix's offsets and ids are
        then loaded with ``load_prefix(end, hash)`` (the ids and offsets of the lines up to byte
        ``end``, whose last record has ``hash``) the first time they are needed, and an id is
        looked for among them with the help of ``load_points(before)``: the sparse index's
        ``(ord, offset, id block)`` entries of the records before ``before``
        (`_find_in_prefix`). ``first_state``
        builds the reduced state of the log as opened, the first time a record is checked
        (default: reduce the file)."""
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
        self.opened_at: tuple[int, str] | None = (anchor.ord, anchor.hash) if anchor else None
        """The (ord, hash) of the verified record the log was opened from, if any."""
        self._first_ord = anchor.ord + 1 if anchor else 1
        """The first ord whose offset and id are loaded (the prefix is loaded lazily)."""
        self._prefix_end = (scanned.offsets[0] if scanned.offsets else scanned.end) if anchor else 0
        """Where the records before ``_first_ord`` end in the file."""
        self._load_prefix = load_prefix
        self._load_points = load_points
        self._points: list[tuple[int, int, Block | None]] | None = None
        """The prefix's sparse entries with their id blocks, once loaded (`_prefix_points`)."""
        self._prefix_found: dict[int, Record] = {}
        """Records of the prefix found by id, by ordinal (a few: `_found`)."""
        self._indexed: set[tuple[int, int]] = set()
        """Ranges of ords of the prefix with no id block whose ids are indexed (`_candidates`)."""
        self._prefix_lines: dict[int, tuple[int, int]] = {}
        """Where the lines of those ranges are, by ord (`_index_range`)."""
        self._checked: dict[int, int | None] = {}
        """Sparse entries' offsets checked against the file, by ord (`_checked_offset`)."""
        self._root_read = False
        """Whether the file's first record was indexed (`_find_in_prefix`)."""
        self._searched = 0
        """Bytes the prefix lookups have read: once as many as the prefix, it is loaded."""
        self.durable_ord = self.last_ord
        """Highest ord that is durable (in the journal) and written to the rollout file."""
        self.size = scanned.end
        """Bytes of the rollout file written so far."""
        self.last_seq = 0
        """Journal sequence of this log's latest queued record."""
        self._offsets: list[int] = list(scanned.offsets)
        self._queued_bytes = 0
        self._ids: dict[str, int] = {r.id: r.ord for r in records}
        self._order: list[str] = [r.id for r in records]
        """The ids of the records from ``_first_ord`` on, in order (beside ``_offsets``)."""
        self._unwritten: dict[int, Record] = {}
        self.closed = False
        self.uses = 0
        """Appends so far (the store evicts the least used idle logs)."""
        self.fresh: Scan | None = scanned
        """The scan the log was opened with (the whole file, or what follows a snapshot's
        anchor), kept for the one read that usually follows (a session replaying the
        thread, or its tail) and dropped at the first append."""
        self._fresh_after = anchor.ord if anchor is not None else 0
        self.admission = Admission(thread_id, self._reduced, first_state)
        """The thread's reduced state, which every record is checked against."""

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
                self._find_in_prefix(id)
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
            self.admission.admit(record, check)  # an illegal event raises: nothing is queued
            try:
                seq = self._journal.enqueue(self, line, record)
            except BaseException:
                self.admission.forget()  # admitted, yet not in the log
                raise
            self._offsets.append(self.size + self._queued_bytes)
            self._queued_bytes += len(line)
            self._unwritten[ord_] = record
            self._ids[id] = ord_
            self._order.append(id)
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
        from a snapshot or checkpoint anchor), adding it to the id index if it is there.
        Lock held.

        A byte search, confirmed by parsing the one line it lands in, instead of the whole
        scan `_complete_prefix` does: a session resumed from a snapshot names its conversation
        leaf, often before the anchor, as the parent of its first record, and an explicit id
        (an idempotent input, a framework's event id) must be looked for among every record.
        The leaf is usually the root (a thread with no entry yet), so the first line is tried
        first. Then only the blocks of records whose id blocks may hold the id
        (`threadlog.store.iddigest`), and those the sparse index has no block for, are
        searched, newest first, a few MiB at a time: for an id that is not there, the search
        reads a block's bytes only in about one block in four million (and what has no block:
        a store of an older threadlog, the records between a block and a runtime snapshot),
        and the memory it holds does not grow with the thread. The root is read once, each
        entry's offset checked once, and once the lookups have read as many bytes as the
        prefix holds (every new id searches what no block covers again) the prefix is loaded
        instead: many explicit ids cost at most about twice what loading it once does.
        """
        if self._searched >= self._prefix_end:
            # Lookups (each new explicit id searches what no block covers) have read as
            # much as loading the prefix once would: load it, and look ids up in memory.
            self._complete_prefix()
            return
        needle = b'"id":"' + id_.encode("utf-8", "replace") + b'"'
        if not self._root_read:  # read once: the root is indexed whichever id is asked for
            self._root_read = True
            root, _ = self._line_record(0, min(self._prefix_end, _FIRST_LINE))
            if root is not None and root.ord == 1 < self._first_ord:
                self._index_found(root)
                if root.id == id_:
                    return
        for lo, hi in self._candidates(iddigest.crc(id_)):
            if self._search(lo, hi, needle, id_):
                return

    def _prefix_points(self) -> list[tuple[int, int, Block | None]] | None:
        """The sparse entries of the prefix, ``(ord, offset, block)`` by ord, each offset
        checked to start the line of that ord the first time it is used; None without any
        (then the whole prefix is searched). Lock held."""
        if self._points is None:
            rows: list[tuple[int, int, object]] = []
            if self._load_points is not None:
                try:
                    rows = self._load_points(self._first_ord)
                except StorageError:
                    rows = []
            self._points = sorted(
                (o, off, iddigest.load(o, ids))
                for o, off, ids in rows
                if 1 < o < self._first_ord and 0 < off < self._prefix_end
            )
        return self._points or None

    def _candidates(self, value: int) -> list[tuple[int, int]]:
        """The byte ranges ``(start, end)`` of the prefix that may hold an id of CRC
        ``value``, newest first, each from a line start to a line start (or the prefix's
        end). Lock held."""
        points = self._prefix_points()
        if points is None:
            return self._whole_prefix()
        wanted: list[tuple[int, int, bool]] = []  # ordinals, oldest first; no block?
        decided = 0  # ords 1..decided are either wanted or known not to hold the id
        for _, _, block in points:
            if block is None or block.last <= decided:
                continue
            if block.first > decided + 1:
                wanted.append((decided + 1, block.first - 1, True))  # no block says: search
            if block.may_hold(value):
                wanted.append((max(block.first, decided + 1), block.last, False))
            decided = block.last
        if decided < self._first_ord - 1:
            wanted.append((decided + 1, self._first_ord - 1, True))
        starts = [o for o, _, _ in points]
        ranges: list[tuple[int, int]] = []
        for first, last, unblocked in reversed(wanted):
            if unblocked and (first, last) in self._indexed:
                continue  # its ids are indexed: asked before the search
            i = bisect_right(starts, first) - 1  # the entry at or before ``first``
            j = bisect_right(starts, last)  # the first entry after ``last``
            lo = self._checked_offset(points[i]) if i >= 0 else 0
            hi = self._checked_offset(points[j]) if j < len(points) else self._prefix_end
            if lo is None or hi is None:  # the sparse index does not match the file
                self._points = []
                return self._whole_prefix()
            if unblocked and hi - lo <= _INDEX_GAP:
                # Records no block covers (those between the last block and the anchor,
                # usually): every new id would search them again, so their ids are indexed
                # once instead (the caller finds the id among them, if it is there).
                self._index_range(lo, hi, points[i][0] if i >= 0 else 1)
                self._indexed.add((first, last))
                continue
            if ranges and hi >= ranges[-1][0]:
                ranges[-1] = (lo, ranges[-1][1])  # adjacent to the newer one: one range
            else:
                ranges.append((lo, hi))
        return ranges

    def _whole_prefix(self) -> list[tuple[int, int]]:
        """The candidates when no sparse entry helps: the whole prefix, or (a prefix of at
        most `_INDEX_GAP` bytes) none, its ids indexed once instead. Lock held."""
        whole = (1, self._first_ord - 1)
        if whole in self._indexed:
            return []
        if self._prefix_end > _INDEX_GAP:
            return [(0, self._prefix_end)]
        self._index_range(0, self._prefix_end, 1)
        self._indexed.add(whole)
        return []

    def _checked_offset(self, point: tuple[int, int, Block | None]) -> int | None:
        """A sparse entry's offset if the line there holds its ordinal, else None (checked
        once an entry)."""
        ord_, offset, _ = point
        if ord_ in self._checked:
            return self._checked[ord_]
        limit = min(self._max_record_bytes + 1, self._prefix_end - offset)
        record, read = self._line_record(offset, limit)
        self._searched += read
        checked: int | None = None
        if record is not None and record.ord == ord_ and (not offset or self._starts_line(offset)):
            checked = offset
        self._checked[ord_] = checked
        return checked

    def _line_record(self, offset: int, most: int) -> tuple[Record | None, int]:
        """The record of the line at byte ``offset`` (read 4 KiB first, then up to ``most``
        bytes for a longer line), None if there is no whole valid line there; and the bytes
        read."""
        head = os.pread(self.fd, min(most, _HEAD), offset)
        if b"\n" not in head and len(head) < most:
            head = os.pread(self.fd, most, offset)
        end = head.find(b"\n")
        if end < 0:
            return None, len(head)
        try:
            return parse_line(head[: end + 1]), len(head)
        except BadRecord:
            return None, len(head)

    def _index_range(self, lo: int, hi: int, ord_: int) -> None:
        """Index the ids (and line offsets) of the prefix's whole lines in bytes ``lo..hi``,
        the first of them record ``ord_``: each line parsed, its hash checked and its ord the
        next (`IntegrityError` if not)."""
        chunk = os.pread(self.fd, hi - lo, lo)  # (once a range: not counted in ``_searched``)
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start) + 1 or len(chunk)
            try:
                record = parse_line(chunk[start:end])
            except BadRecord as exc:
                raise IntegrityError(self.thread_id, ord_, str(exc), offset=lo + start) from None
            if record.ord != ord_:
                raise IntegrityError(
                    self.thread_id, ord_, f"the line holds ord {record.ord}", offset=lo + start
                )
            self._ids[record.id] = ord_
            self._prefix_lines[ord_] = (lo + start, lo + end)
            start, ord_ = end, ord_ + 1

    def _starts_line(self, offset: int) -> bool:
        return os.pread(self.fd, 1, offset - 1) == b"\n"

    def _search(self, lo: int, hi: int, needle: bytes, id_: str) -> bool:
        """Search the whole lines in bytes ``lo..hi`` (``lo`` a line start) for the record
        ``id_``, from the end, a few MiB at a time. Lock held."""
        size = _SEARCH_CHUNK
        while hi > lo:
            start = max(lo, hi - size)
            chunk = os.pread(self.fd, hi - start, start)
            self._searched += len(chunk)
            # (``hi`` starts a line, so the chunk's last byte is the newline before it: the
            # first line start inside the chunk is after a newline before that one)
            cut = 0 if start == lo else chunk.find(b"\n", 0, len(chunk) - 1) + 1
            if cut == 0 and start > lo:
                size *= 2  # one line longer than the window: widen it
                continue
            if self._found(chunk[cut:], needle, id_):
                return True
            hi, size = start + cut, _SEARCH_CHUNK
        return False

    def _found(self, lines: bytes, needle: bytes, id_: str) -> bool:
        """Whether whole ``lines`` hold the record ``id_`` (then indexed). Lock held."""
        pos = lines.rfind(needle)
        while pos >= 0:
            start = lines.rfind(b"\n", 0, pos) + 1
            end = lines.find(b"\n", pos) + 1 or len(lines)
            try:
                record = parse_line(lines[start:end])
            except BadRecord:
                record = None
            if record is not None and record.id == id_ and record.ord < self._first_ord:
                self._index_found(record)
                return True
            pos = lines.rfind(needle, 0, start)
        return False

    def _index_found(self, record: Record) -> None:
        """Index a record of the prefix found by id (and keep it, with a few others)."""
        self._ids[record.id] = record.ord
        if len(self._prefix_found) >= _PREFIX_FOUND:
            self._prefix_found.clear()
        self._prefix_found[record.ord] = record

    def close(self) -> None:
        """Refuse further submissions (they raise `LogClosed`); waits for one under way.
        What was queued stays queued: the journal still writes it into the file."""
        with self._lock:
            self.closed = True

    def take_fresh(self, after: int = 0) -> list[Record] | None:
        """The records after ord ``after`` from the opening scan, once, if nothing was
        appended since and the scan holds them all (it starts after the anchor it was
        opened from); None otherwise."""
        with self._lock:
            scanned, self.fresh = self.fresh, None
            if scanned is None or self.size != scanned.end or self._unwritten:
                return None
            if after < self._fresh_after:
                return None
            return scanned.records[after - self._fresh_after :]

    def _complete_prefix(self) -> None:
        """Load the offsets and ids of the records before ``_first_ord``. Lock held.

        They are read on the bytes up to the anchor's end (`rollout.prefix_ids`: each line's
        hash and the chain, which must end in the anchor's hash, then the ids found in the
        bytes); `threadlog verify` reads them with every check."""
        assert self._load_prefix is not None and self.opened_at is not None
        ids, offsets = self._load_prefix(self._prefix_end, self.opened_at[1])
        if len(ids) != self._first_ord - 1:
            raise IntegrityError(
                self.thread_id,
                min(len(ids), self._first_ord - 1) + 1,
                f"the rollout holds {len(ids)} records before the one it was opened from "
                f"(ord {self._first_ord - 1})",
            )
        self._offsets = offsets + self._offsets
        self._ids.update(zip(ids, range(1, len(ids) + 1), strict=True))
        self._order = ids + self._order
        self._first_ord = 1

    def offset_after(self, ord_: int) -> int | None:
        """The byte offset just after record ``ord_`` if it is written, else None."""
        with self._lock:
            if ord_ > self.durable_ord or ord_ < 0:
                return None
            if ord_ < self._first_ord - 1:  # before a snapshot's or checkpoint's anchor
                self._complete_prefix()
            index = ord_ + 1 - self._first_ord
            return self._offsets[index] if index < len(self._offsets) else self.size

    def checkpoint_view(
        self, dump: Callable[[ThreadState], bytes], *, sparse_after: int, every: int
    ) -> tuple[int, str, int, bytes, list[tuple[int, int, bytes | None, int | None]]] | None:
        """``(ord, hash, end, dump(state), sparse)`` for a checkpoint at the durable end
        (`threadlog.store.embedded.checkpoint`): ``sparse`` the ``(ord, offset, id block,
        start)`` of every ``every``-th record after ``sparse_after`` the log knows the offset
        of, the block (`threadlog.store.iddigest`) of the ``every`` records that end there if
        the log knows all their ids, and the offset of the entry before (0 for the first
        entry), where the entry's chunk starts, if the log knows it. None unless everything
        admitted is in the file and the reduced state is built."""
        with self._lock:
            state = self.admission.peek()
            if (
                state is None
                or self._unwritten
                or self.durable_ord != self.last_ord
                or self.last_hash is None
                or state.last_ord != self.last_ord
            ):
                return None
            first = max(sparse_after + 1, self._first_ord)
            first += -first % every
            base = self._first_ord
            offsets = self._offsets
            sparse = [
                (
                    o,
                    offsets[o - base],
                    iddigest.block(self._order[o - every + 1 - base : o + 1 - base])
                    if o - every + 1 >= base
                    else None,
                    offsets[o - every - base]
                    if o - every >= base
                    else 0  # (record 1's line starts the file)
                    if o == every
                    else None,
                )
                for o in range(first, self.durable_ord + 1, every)
            ]
            return self.last_ord, self.last_hash, self.size, dump(state), sparse

    def written(self, records: list[Record], nbytes: int) -> None:
        """Called by the journal leader once ``records`` are durable and in the file."""
        with self._lock:
            self.size += nbytes
            self._queued_bytes -= nbytes
            self.durable_ord = records[-1].ord
            for record in records:
                del self._unwritten[record.ord]

    def _reduced(self) -> ThreadState | None:
        """The reduced state of the whole log now (lock held): the records written into the
        file, then those queued. Raises `IntegrityError` if it holds an illegal event."""
        full = scan_file(self.path, self.thread_id)
        written = [r for r in full.records if r.ord <= self.durable_ord]
        if len(written) != self.durable_ord:
            raise full.error or IntegrityError(
                self.thread_id, len(written) + 1, "the rollout lacks records it was given"
            )
        queued = [self._unwritten[o] for o in sorted(self._unwritten)]
        return reduce_log(self.thread_id, [*written, *queued])

    def _record_at(self, ord_: int) -> Record:
        """A record of this log by ordinal (queued ones from memory). Lock held."""
        unwritten = self._unwritten.get(ord_)
        if unwritten is not None:
            return unwritten
        if ord_ < self._first_ord:
            found = self._prefix_found.get(ord_)
            if found is not None:
                return found
            span = self._prefix_lines.get(ord_)
            if span is not None:
                line = os.pread(self.fd, span[1] - span[0], span[0])
                try:
                    return parse_line(line)
                except BadRecord as exc:
                    raise IntegrityError(self.thread_id, ord_, str(exc), offset=span[0]) from None
            self._complete_prefix()
        index = ord_ - self._first_ord
        start = self._offsets[index]
        end = self._offsets[index + 1] if index + 1 < len(self._offsets) else self.size
        line = os.pread(self.fd, end - start, start)
        try:
            return parse_line(line)
        except BadRecord as exc:
            raise IntegrityError(self.thread_id, ord_, str(exc), offset=start) from None
