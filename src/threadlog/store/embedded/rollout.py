"""The JSONL rollout: scanning and verifying one thread's log file.

Theory of operation
-------------------
`scan` walks a rollout from the start and checks every line: framing (a line ends with
``\\n``), canonical JSON, hash, ``ord == previous + 1``, ``prev == previous hash``, the thread
id, unique event ids. It stops at the first bad line and classifies it:

* **torn tail** — what an interrupted write or a power cut can leave, and nothing else: an
  *unterminated final fragment* (bytes after the last newline: every record ends with ``\\n``,
  written last), or complete lines that are *zero-filled debris* (a line of NUL bytes only, or
  one holding a run of at least `ZERO_RUN` NULs: pages a power cut lost read back as zeros),
  running to the end of the file with no valid record after them. None of it was acknowledged
  (an append returns only after the fsync that covers its whole line). Opening the thread for
  writing truncates it and fsyncs (logged with the byte count), unless the index or a journal
  knew of more records than survive, which makes it damage. Readers simply stop before it.
* **corruption** — anything else: a complete line that fails its hash, canonical form or
  chain (one flipped bit is enough), a fragment that is a whole valid record whose newline was
  overwritten, garbage lines, or a valid record *after* an invalid one. A crash cannot produce
  these, and truncating would delete acknowledged records, so it is reported as
  `IntegrityError` with the first bad ordinal and byte offset, and the thread refuses writes.
  Nothing is ever dropped silently; only an explicit salvage (a fork of the valid prefix)
  moves on from it.

Appending (and the group commit that makes appends durable) lives in
`threadlog.store.embedded.journal`.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import field
from typing import TYPE_CHECKING, Any, BinaryIO

from threadlog._dataclass import dataclass
from threadlog._gc import paused
from threadlog.errors import (
    IntegrityError,
)
from threadlog.model.envelope import (
    BadRecord,
    Record,
    line_ids,
    parse_line,
    parse_next,
    parse_run,
    verify_lines,
)
from threadlog.model.lineage import Copied, copied_prefix

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = [
    "LinePieces",
    "Scan",
    "TornTail",
    "damaged_terminator",
    "inherited_prefix",
    "prefix_ids",
    "prefix_of",
    "scan",
    "scan_file",
    "zero_debris",
]

log = logging.getLogger("threadlog.store")


@dataclass(slots=True)
class TornTail:
    """An interrupted final write: ``size`` bytes from ``offset`` to the end of the file."""

    offset: int
    size: int
    reason: str
    completes: Record | None = None
    """The record these bytes hold whole but for their newline, chained where it belongs (a
    write cut just before its last byte, or a file cut by one byte): the repair then adds
    the newline instead of cutting the record, which may have been acknowledged."""


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


ZERO_RUN = 16
"""NUL bytes in a row that make a complete line power-cut debris rather than damage: a lost
page reads back as zeros from the first byte it lost to its end, while a flipped bit makes at
most one NUL (canonical JSON escapes them), so no single-bit error reaches this."""


def zero_debris(line: bytes) -> bool:
    """A complete line that a power cut can leave: NULs only, or a long run of them."""
    body = line[:-1]
    return (body != b"" and not body.strip(b"\0")) or b"\0" * ZERO_RUN in body


def damaged_terminator(fragment: bytes) -> bool:
    """A final fragment that is a whole record whose newline was overwritten (not torn: a
    write is cut *before* its last byte, never turned into another one)."""
    try:
        parse_line(fragment[:-1] + b"\n")
    except BadRecord:
        return False
    return True


FILE_CHUNK = 1 << 20
"""Bytes `scan_file` reads at a time (whole lines; more for a longer line)."""

_new_record = tuple.__new__


def scan(
    data: bytes,
    thread_id: str,
    *,
    base_offset: int = 0,
    start_ord: int = 1,
    prev_hash: str | None = None,
    keep_records: bool = True,
    copied: Copied | None = None,
    whole: bool = True,
    seen: set[str] | None = None,
    canonical_until: int = 0,
    trusted: Sequence[tuple[int, int]] = (),
) -> Scan:
    """Validate rollout bytes; see the module docstring for torn tail vs corruption.

    ``base_offset``/``start_ord``/``prev_hash`` continue a scan from the middle of a file
    whose prefix is already known to be valid; ``copied`` is then the prefix the thread
    inherited as a fork, if any (a scan from ord 1 reads it from ``thread.created``; see
    `threadlog.model.lineage`), and ``seen`` the event ids of the prefix (the scan adds this
    part's). A fork's file is written whole, so one that ends (or is torn) inside its
    inherited prefix is damaged — unless ``whole`` is False: ``data`` is then only the first
    lines of the file.

    Records up to ord ``canonical_until`` are taken to be canonical JSON once their hash
    matches (`parse_next`'s ``known_canonical``): only for a caller that checks the chain
    against a hash verified before (`scan_file`'s ``verified``). Of those, the lines wholly
    inside one of the ``trusted`` byte ranges ``(start, end)`` (file offsets, in order) are
    not hashed at all (`parse_run`): only for a caller that also compares those bytes with
    the digests of bytes verified there before (`scan_file`'s ``chunks``).
    """
    with paused():  # one dict and one Record per line, no cycles (`threadlog._gc`)
        return _scan(
            data,
            thread_id,
            base_offset,
            start_ord,
            prev_hash,
            keep_records,
            copied,
            whole,
            set() if seen is None else seen,
            canonical_until,
            trusted,
        )


def _scan(
    data: bytes,
    thread_id: str,
    base_offset: int,
    start_ord: int,
    prev_hash: str | None,
    keep_records: bool,
    copied: Copied | None,
    whole: bool,
    seen: set[str],
    canonical_until: int,
    trusted: Sequence[tuple[int, int]],
) -> Scan:
    result = Scan(end=base_offset)
    # The trusted ranges still ahead, as offsets in ``data``, and the one the scan is in or
    # before: ``lo <= pos and nl < hi`` for a line wholly inside it.
    ahead = [(lo - base_offset, hi - base_offset) for lo, hi in trusted if hi > base_offset]
    ahead.reverse()
    lo, hi = ahead.pop() if ahead else (-1, -1)
    records, offsets = result.records, result.offsets
    expected = start_ord
    prev = prev_hash
    last_id: str | None = None
    pos = 0
    size = len(data)
    find, view = data.find, memoryview(data)
    while pos < size:
        while pos >= hi and ahead:
            lo, hi = ahead.pop()
        if (
            lo <= pos < hi
            and expected <= canonical_until
            and keep_records
            and prev is not None
            and expected > 1
            and (copied is None or expected > copied.until)
        ):  # a verified chunk's lines, in one loop (it stops before any it does not take)
            pos, expected, prev, last_id = parse_run(
                data,
                pos,
                hi,
                thread_id,
                expected,
                prev,
                last_id,
                records,
                offsets,
                seen,
                base_offset,
                canonical_until,
            )
            if pos >= size:
                break
            if pos >= hi:
                continue  # the range is read: on with the next one, if the line is in it
            # (else the line it did not take: the general way below judges it)
        nl = find(b"\n", pos)
        if nl < 0:
            _classify(
                result,
                data,
                pos,
                data[pos:],
                "final line has no newline",
                thread_id,
                expected,
                base_offset,
            )
            if result.torn is not None and result.torn.offset == base_offset + pos:
                result.torn.completes = _whole_but_newline(data[pos:], thread_id, expected, prev)
            break
        # The common line (the thread's own, past its first and any inherited prefix) is
        # parsed and checked in one go by `parse_next`; any other, or one it refuses, takes
        # the general way below, which finds what is wrong and says so.
        record = (
            parse_next(
                data,
                view,
                pos,
                nl + 1,
                thread_id,
                expected,
                prev,
                last_id,
                expected <= canonical_until,
            )
            if prev is not None and expected > 1 and (copied is None or expected > copied.until)
            else None
        )
        if record is None or record.id in seen:
            line = data[pos : nl + 1]
            problem: str | None = None
            record = None
            try:
                record = parse_line(line)
            except BadRecord as exc:
                problem = str(exc)
            if record is not None:
                inherited = copied if copied is not None and 2 <= expected <= copied.until else None
                if (
                    record.thread != thread_id
                    if inherited is None
                    else record.thread == thread_id or record.thread not in inherited.threads
                ):
                    problem = f"record belongs to thread {record.thread}"
                elif record.ord != expected:
                    problem = f"ord {record.ord} where {expected} was expected"
                elif record.prev != (inherited.prev if inherited and expected == 2 else prev):
                    problem = "prev does not match the previous record's hash (chain broken)"
                elif record.id in seen:
                    problem = f"event id {record.id} appears twice"
                elif inherited and expected == inherited.until and record.hash != inherited.last:
                    problem = (
                        "the last inherited record is not the one the fork names (lineage hash)"
                    )
                elif expected == 1 and record.type == "thread.created":
                    try:
                        copied = inherited_prefix(record)
                    except ValueError as exc:
                        problem = str(exc)
            if problem is not None:
                _classify(result, data, pos, line, problem, thread_id, expected, base_offset)
                break
            assert record is not None
            if keep_records and record.prev is not None and record.thread == thread_id:
                # Held records share the strings a log repeats (the thread id, the previous
                # record's hash and id; `parse_line` already shares the type's) instead of a
                # copy each, as `parse_next` builds them: a long read holds a fifth less
                # memory, and allocates that much less.
                v, id_, _, ord_, parent, ts, type_, data_, _, hash_ = record
                record = _new_record(
                    Record,
                    (
                        v,
                        id_,
                        thread_id,
                        ord_,
                        last_id if parent == last_id else parent,
                        ts,
                        type_,
                        data_,
                        prev,
                        hash_,
                    ),
                )
        seen.add(record.id)
        if keep_records:
            records.append(record)
            offsets.append(base_offset + pos)
            last_id = record.id
        prev = record.hash
        expected += 1
        pos = nl + 1
    result.end = base_offset + pos  # just past the last valid record: where the loop stopped
    if copied is not None and whole and expected <= copied.until and result.error is None:
        result.torn = None  # a crash cannot cut a fork's file: it was renamed into place whole
        result.error = IntegrityError(
            thread_id,
            expected,
            f"the fork's file ends inside its inherited records (lineage ord {copied.until})",
            offset=base_offset + pos,
        )
    return result


def inherited_prefix(created: Record) -> Copied | None:
    """The prefix a thread's ``thread.created`` record says it inherited as a fork, if any.

    Raises:
        ValueError: the lineage declares one, malformed.
    """
    data = created.data
    return copied_prefix(data.get("lineage") if isinstance(data, dict) else None)


def _classify(
    result: Scan,
    data: bytes,
    pos: int,
    line: bytes,
    problem: str,
    thread_id: str,
    expected: int,
    base_offset: int,
) -> None:
    """The first bad line is at ``pos``: a torn tail only if everything from it to the end of
    the data is what an interrupted write leaves (see the module docstring); else damage."""
    offset = base_offset + pos
    if line.endswith(b"\n"):
        # complete lines may be torn only as zero-filled debris, with nothing valid after them
        cursor = pos
        while True:
            nl = data.find(b"\n", cursor)
            if nl < 0:
                break
            piece = data[cursor : nl + 1]
            if not zero_debris(piece):
                reason = problem
                if cursor > pos:
                    try:
                        parse_line(piece)
                    except BadRecord:
                        reason = f"{problem}, and more bad lines follow"
                    else:
                        reason = f"{problem}, and valid records follow it"
                result.error = IntegrityError(thread_id, expected, reason, offset=offset)
                return
            cursor = nl + 1
        fragment = data[cursor:]
    else:
        fragment = data[pos:]
    if fragment and damaged_terminator(fragment):
        result.error = IntegrityError(
            thread_id,
            expected,
            f"{problem}: the final line is a whole record whose newline was overwritten",
            offset=offset,
        )
        return
    result.torn = TornTail(offset, len(data) - pos, problem)


def _whole_but_newline(
    fragment: bytes, thread_id: str, expected: int, prev: str | None
) -> Record | None:
    """The record ``fragment`` is once its newline is added, if it is the next one of the
    thread (its own record, at ``expected``, chained on ``prev``)."""
    try:
        record = parse_line(fragment + b"\n")
    except BadRecord:
        return None
    if record.thread != thread_id or record.ord != expected or record.prev != prev:
        return None
    return record


def scan_file(
    path: str,
    thread_id: str,
    *,
    end: int | None = None,
    verified: tuple[int, str] | None = None,
    chunks: Sequence[tuple[int, int, bytes]] = (),
) -> Scan:
    """`scan` a rollout file from disk, up to byte ``end`` if given (the durable end a live
    writer publishes: what lies past it may not be on disk yet).

    The file is read `FILE_CHUNK` bytes of whole lines at a time, each piece scanned on from
    the one before (its offset, ordinal, hash, the fork's prefix and the ids seen), so a long
    log's bytes are never all in memory beside its records. A bad line that a piece's scan
    takes for a torn tail is one only if nothing valid follows it: the rest of the file is
    then scanned from that line in one piece, as a scan of the whole file would.

    ``verified`` is ``(ord, hash)`` of a record this store verified, with every record before
    it, canonical bytes included (a checkpoint, `threadlog.store.embedded.checkpoint`). The
    records up to it then have their hashes and the chain checked but are not re-encoded to
    prove their bytes canonical: if the chain reaches ``hash`` at ``ord``, the bytes are the
    ones verified before.

    ``chunks`` are ``(start, end, digest)``, in order, of byte ranges whose lines this store
    verified before (the sparse index's chunk digests, `threadlog.store.embedded.checkpoint`):
    the lines wholly inside one, up to ``verified``'s record, are parsed without hashing them
    (`parse_run`), and the range's bytes are hashed whole as they are read and must have
    that SHA-256 digest. (A digest proves the bytes are the ones whose hashes and chain were
    checked; the chain reaching ``verified``'s hash proves them canonical, as above.)

    If the chain does not reach ``verified``'s hash, or a chunk's bytes do not match its
    digest (the file was replaced, cut or damaged), the file is scanned again with every
    check, and that scan's records and findings are the answer.
    """
    canonical_until = verified[0] if verified is not None and verified[0] >= 1 else 0
    if not canonical_until:
        chunks = ()
    elif end is not None:
        chunks = [chunk for chunk in chunks if chunk[1] <= end]
    if canonical_until:
        fast, matched = _scan_file(path, thread_id, end, canonical_until, chunks)
        if (
            matched
            and verified is not None
            and len(fast.records) >= canonical_until
            and fast.records[canonical_until - 1].hash == verified[1]
        ):
            return fast
        del fast  # (not held beside the second scan's records)
    return _scan_file(path, thread_id, end, 0, ())[0]


class _ChunkCheck:
    """Hashes a file's ``chunks`` (`scan_file`) as its pieces are read, in order, and
    compares each with its digest."""

    __slots__ = ("_chunks", "_next", "_hash", "failed")

    def __init__(self, chunks: Sequence[tuple[int, int, bytes]]) -> None:
        self._chunks = chunks
        self._next = 0
        """The first chunk not compared yet."""
        self._hash: Any = None
        """The hash of the part of that chunk read so far, once its start is read."""
        self.failed = False

    def feed(self, offset: int, data: bytes) -> None:
        """Hash the chunks' bytes in ``data``, the file's bytes from ``offset`` on (the
        pieces follow each other)."""
        chunks, stop, view = self._chunks, offset + len(data), memoryview(data)
        while self._next < len(chunks) and not self.failed:
            start, end, digest = chunks[self._next]
            if start >= stop:
                return
            if self._hash is None:
                if start < offset:  # its start was not read: it cannot be checked
                    self.failed = True
                    return
                self._hash = hashlib.sha256()
            self._hash.update(view[max(start, offset) - offset : min(end, stop) - offset])
            if end > stop:
                return
            if self._hash.digest() != digest:
                self.failed = True
            self._hash = None
            self._next += 1

    def ranges(self, offset: int, size: int) -> list[tuple[int, int]]:
        """The chunks not compared yet that begin before the end of the piece of ``size``
        bytes at ``offset``, as ``(start, end)`` (asked before that piece is fed)."""
        chunks, i, stop = self._chunks, self._next, offset + size
        out = []
        while i < len(chunks) and chunks[i][0] < stop:
            out.append(chunks[i][:2])
            i += 1
        return out

    def matched(self) -> bool:
        """Whether every chunk was read whole and matched its digest."""
        return not self.failed and self._next == len(self._chunks)


def _scan_file(
    path: str,
    thread_id: str,
    end: int | None,
    canonical_until: int,
    chunks: Sequence[tuple[int, int, bytes]],
) -> tuple[Scan, bool]:
    """`scan_file`'s scan; with whether every chunk matched its digest (True with none)."""
    result = Scan()
    check = _ChunkCheck(chunks) if chunks else None
    seen: set[str] = set()
    copied: Copied | None = None
    expected, prev = 1, None
    # (the collector stays off across the pieces, not only inside each: turned back on
    # between them, it would run full collections over the records held so far)
    with paused(), open(path, "rb") as f:
        pieces = LinePieces(f, FILE_CHUNK, end)
        for offset, data, final in pieces:
            trusted: list[tuple[int, int]] = []
            if check is not None:  # (its lines are parsed as they would be if they match)
                trusted = check.ranges(offset, len(data))
                check.feed(offset, data)
            part = scan(
                data,
                thread_id,
                base_offset=offset,
                start_ord=expected,
                prev_hash=prev,
                copied=copied,
                whole=final,
                seen=seen,
                canonical_until=canonical_until,
                trusted=trusted,
            )
            if (part.torn is not None or part.error is not None) and not final:
                # judged on the rest of the file, as a scan of the whole file judges it
                # (with every line hashed: a chunk not read whole never matches)
                rest = data[part.end - offset :] + pieces.rest()
                tail = scan(
                    rest,
                    thread_id,
                    base_offset=part.end,
                    start_ord=expected + len(part.records),
                    prev_hash=part.records[-1].hash if part.records else prev,
                    copied=copied or prefix_of(part.records),
                    seen=seen,
                    canonical_until=canonical_until,
                )
                part.records += tail.records
                part.offsets += tail.offsets
                part.end, part.torn, part.error = tail.end, tail.torn, tail.error
                final = True
            if part.records:
                if copied is None and expected == 1:
                    copied = prefix_of(part.records)
                result.records += part.records
                result.offsets += part.offsets
                expected, prev = part.records[-1].ord + 1, part.records[-1].hash
            result.end = part.end
            if part.error is not None or part.torn is not None or final:
                result.torn, result.error = part.torn, part.error
                break
    return result, check is None or check.matched()


class LinePieces:
    """A rollout file read in pieces of whole lines, each ``size`` bytes and the rest of the
    line that size ends in, never past byte ``end``: iterating gives ``(offset, data,
    final)``; the ``final`` piece holds what follows the last newline (a fragment, or nothing).
    `rest` returns what is not read yet, for a caller that must judge a line on all that
    follows it (`scan_file`, `threadlog.store.embedded.streamscan`)."""

    def __init__(self, f: BinaryIO, size: int, end: int | None) -> None:
        self._f = f
        self._size = size
        self._end = end
        self._pending = b""

    def __iter__(self) -> Iterator[tuple[int, bytes, bool]]:
        offset = 0
        while True:
            data = self._read(offset)
            if data.endswith(b"\n"):
                yield offset, data, False
                offset += len(data)
                continue
            # the end of the file (or ``end``): nothing more, or a final fragment
            cut = data.rfind(b"\n") + 1
            if cut:
                self._pending = data[cut:]
                yield offset, data[:cut], False
                offset += cut
                data, self._pending = self._pending, b""
            yield offset, data, True
            return

    def _read(self, offset: int) -> bytes:
        """The next piece, from ``offset`` (where the file is), to the end of the line its
        ``size`` bytes end in, unless the file or ``end`` ends first."""
        f, end = self._f, self._end
        want = self._size if end is None else min(self._size, end - offset)
        data = f.read(want) if want > 0 else b""
        if data and not data.endswith(b"\n"):
            # The line the piece cuts is finished by reading on, not kept for the next piece
            # (which costs a copy of every piece: a long read's time went there measurably).
            data += f.readline(-1 if end is None else max(0, end - offset - len(data)))
        return data

    def rest(self) -> bytes:
        """The bytes after the last piece yielded, up to ``end`` (the file read to there)."""
        more = -1 if self._end is None else max(0, self._end - self._f.tell())
        rest, self._pending = self._pending + self._f.read(more), b""
        return rest


def prefix_ids(path: str, thread_id: str, end: int, last_hash: str) -> tuple[list[str], list[int]]:
    """The event ids and line offsets of a rollout's records up to byte ``end``, the end of
    the record whose hash is ``last_hash`` (a checkpoint's or a snapshot's anchor, which this
    store verified with all before it), read on the bytes a piece at a time: each line's hash
    and the chain are checked (`threadlog.model.envelope.verify_lines`) and must end in
    ``last_hash``, the ids found without decoding (`line_ids`). A fraction of a verified
    parse's cost, and a damaged prefix is still an error, never an id read wrong.

    Raises:
        IntegrityError: a line there is damaged, or the chain does not reach ``last_hash``.
    """
    ids: list[str] = []
    offsets: list[int] = []
    prev: str | None = None
    last: str | None = None
    with open(path, "rb") as f:
        for offset, data, _ in LinePieces(f, FILE_CHUNK, end):
            pos = 0
            try:
                if offset == 0:  # ord 1, parsed: a fork's ord 2 follows its lineage's hash
                    pos = data.find(b"\n") + 1
                    first = parse_line(data[:pos])
                    copied = inherited_prefix(first)
                    prev = copied.prev if copied is not None else first.hash
                    last = first.hash
                    ids.append(first.id)
                    offsets.append(0)
                if pos < len(data):
                    prev = last = verify_lines(data, pos, len(data), prev=prev)
                part, starts = line_ids(data, pos, len(data))
            except (BadRecord, ValueError) as exc:
                at = len(ids) + getattr(exc, "index", 0) + 1
                raise IntegrityError(
                    thread_id, at, str(exc), offset=offset + getattr(exc, "offset", 0)
                ) from None
            ids.extend(part)
            offsets.extend([offset + o for o in starts] if offset else starts)
    if last != last_hash:
        raise IntegrityError(
            thread_id, len(ids), "the rollout's records before its anchor do not chain to it"
        )
    return ids, offsets


def prefix_of(records: list[Record]) -> Copied | None:
    """What a fork inherited, from its first record (already checked by the scan)."""
    first = records[0] if records else None
    if first is None or first.ord != 1 or first.type != "thread.created":
        return None
    return inherited_prefix(first)
