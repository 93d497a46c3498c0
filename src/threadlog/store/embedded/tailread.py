"""Reading a window of a long thread without reading it from the start.

Theory of operation
-------------------
`read_window` serves ``read(after=, before=, limit=)`` from a few pieces of the rollout: its
first line (ord 1 must be this thread's ``thread.created``, which also says what a fork
inherited), its last line (the log's last ordinal, never past the durable end the caller
passes), and the lines of the window itself, found either by reading backwards from the end
(a window near the end: the last N records) or forwards from the nearest sparse-index entry
or checkpoint before it (`threadlog.store.embedded.checkpoint`). Each line read is parsed and
verified (framing, canonical JSON, its own hash), and the lines are checked as a chain: ords
consecutive, each ``prev`` the hash of the line before, ids unique, each record this thread's
(or, inside a fork's inherited prefix, of a thread it inherited from). Where the store's
checkpoint or the index's acknowledged mark falls among the lines read, the hash there must
be the one they know, and the log must reach the acknowledged ordinal.

Anything unexpected (a line that does not parse, an ordinal out of place, a final fragment,
a sparse entry that points elsewhere, a mark not met) returns None, and the caller reads the
whole file, which reports damage with its ordinal as always (`threadlog.store.embedded.reader`).
The window read never looks past the end it is given, so it returns only durable records.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, BinaryIO

from threadlog.model.envelope import BadRecord, Record, parse_line
from threadlog.store.embedded.checkpoint import SPARSE_EVERY
from threadlog.store.embedded.rollout import damaged_terminator, inherited_prefix

if TYPE_CHECKING:
    from collections.abc import Iterator

    from threadlog.model.lineage import Copied
    from threadlog.store.embedded.checkpoint import Checkpoints
    from threadlog.store.embedded.schema import AckMark

__all__ = ["read_forward", "read_window", "select"]

CHUNK = 64 * 1024
"""Bytes read at a time."""

NEAR_END = 2 * SPARSE_EVERY
"""A window starting within this many records of the end is read backwards from the end."""


def select(
    records: list[Record], after: int, before: int | None, limit: int | None
) -> list[Record]:
    """The records of an ascending list with ``after < ord < before``; ``limit`` keeps the
    first ones, or with ``before`` the ones nearest it (the `Store.read` window)."""
    chosen = [r for r in records if r.ord > after and (before is None or r.ord < before)]
    if limit is None:
        return chosen
    if limit <= 0:
        return []
    return chosen[-limit:] if before is not None else chosen[:limit]


def read_window(
    path: str,
    thread_id: str,
    after: int,
    before: int | None,
    limit: int | None,
    *,
    end: int | None,
    known: AckMark | None,
    checkpoints: Checkpoints | None,
    max_record_bytes: int,
) -> tuple[list[Record], int] | None:
    """The verified records with ``after < ord < before`` (``limit`` as `select`), read
    without scanning the file from its start, and the byte offset where the line after the
    last of them starts (-1 for none: where `read_forward` goes on); None when that cannot
    be done with certainty (the caller then reads the whole file). See the module
    docstring."""
    try:
        with open(path, "rb") as f:
            return _window(
                f, thread_id, after, before, limit, end, known, checkpoints, max_record_bytes
            )
    except (BadRecord, ValueError, OSError):
        return None


def _window(
    f: BinaryIO,
    thread_id: str,
    after: int,
    before: int | None,
    limit: int | None,
    end: int | None,
    known: AckMark | None,
    checkpoints: Checkpoints | None,
    max_line: int,
) -> tuple[list[Record], int] | None:
    opened = _opened(f, thread_id, end, max_line)
    if opened is None:
        return None
    size, copied = opened
    backwards = _lines_backward(f, size, max_line)
    last_off, last_line = next(backwards, (0, b""))
    last = parse_line(last_line)  # (BadRecord also for a final fragment: no newline)
    if known is not None and known[0] > last.ord:
        return None  # records acknowledged and gone: the full read reports them
    hi = last.ord if before is None else min(before - 1, last.ord)
    lo = after + 1
    if limit is not None:
        if limit <= 0:
            return [], -1
        if before is not None:
            lo = max(lo, hi - limit + 1)
        else:
            hi = min(hi, lo + limit - 1)
    marks = _marks(thread_id, known, checkpoints)
    if any(ord_ == last.ord and digest != last.hash for ord_, digest in marks):
        return None
    if lo > hi:
        return [], -1
    lines: list[Record]
    ends: list[int]  # where each of ``lines`` ends in the file
    anchor: str | None = None  # the hash the first line read must be chained on
    if last.ord - lo < NEAR_END:
        lines, ends = [last], [last_off + len(last_line)]
        for at, line in backwards:
            if lines[-1].ord < lo:  # (one line before the window: it may be a mark)
                break
            lines.append(parse_line(line))
            ends.append(at + len(line))
        lines.reverse()
        ends.reverse()
    else:
        start = checkpoints.seek(thread_id, lo) if checkpoints is not None else None
        if start is None and lo <= 2 * SPARSE_EVERY:
            start = (1, 0, None)  # near the start of the file
        if start is None or lo - start[0] > 2 * SPARSE_EVERY:
            return None
        anchor = start[2]
        lines, ends = [], []
        for at, line in _lines_forward(f, start[1], size):
            record = parse_line(line)
            lines.append(record)
            ends.append(at + len(line))
            if record.ord >= hi:
                break
        if not lines or lines[0].ord != start[0]:
            return None
    if not _chained(lines, thread_id, copied) or (anchor is not None and lines[0].prev != anchor):
        return None
    first = lines[0].ord
    for ord_, digest in marks:
        if first <= ord_ <= lines[-1].ord and lines[ord_ - first].hash != digest:
            return None
    if lines[0].ord > lo or lines[-1].ord < hi:
        return None
    return lines[lo - first : hi - first + 1], ends[hi - first]


def read_forward(
    path: str,
    thread_id: str,
    cursor: tuple[int, int, str],
    limit: int,
    *,
    end: int | None,
    known: AckMark | None,
    checkpoints: Checkpoints | None,
    max_record_bytes: int,
) -> tuple[list[Record], int] | None:
    """At most ``limit`` verified records from ord ``cursor[0]`` on, read forward from byte
    ``cursor[1]`` (where that record's line starts: the end of the last one a caller read),
    the first chained on hash ``cursor[2]``; with the offset after the last one. A final
    fragment (a line still being written, or torn) ends them. None when that cannot be done
    with certainty (the caller reads the whole file): the bytes there are not that record, a
    line does not verify, or a mark the index or checkpoint knows is not met.

    What `Reader.follow` continues with after its first window: reading on from where it
    stopped, whatever the sparse index holds, never the whole file."""
    ord_, offset, prev = cursor
    try:
        with open(path, "rb") as f:
            opened = _opened(f, thread_id, end, max_record_bytes)
            if opened is None:
                return None
            size, copied = opened
            if offset > size or offset < 1:
                return None
            f.seek(offset - 1)
            if f.read(1) != b"\n":
                return None  # the cursor no longer ends a line (the last one read was damaged)
            records: list[Record] = []
            pos = offset
            for at, line in _lines_forward(f, offset, size):
                if len(records) >= limit:
                    break
                if not line.endswith(b"\n"):
                    if damaged_terminator(line):
                        return None  # damage, not a line still being written: the full read
                    break  # (a fragment: not a record, or not yet)
                record = parse_line(line)
                records.append(record)
                pos = at + len(line)
    except (BadRecord, ValueError, OSError):
        return None
    if not records:
        return ([], pos) if known is None or known[0] < ord_ else None
    chained_on = copied.prev if copied is not None and ord_ == 2 else prev
    if records[0].ord != ord_ or records[0].prev != chained_on:
        return None
    if not _chained(records, thread_id, copied):
        return None
    marks = _marks(thread_id, known, checkpoints)
    last = records[-1].ord
    for mark, digest in marks:
        if ord_ <= mark <= last and records[mark - ord_].hash != digest:
            return None
    if known is not None and known[0] > last and len(records) < limit:
        return None  # the file ends before what was acknowledged: the full read reports it
    return records, pos


def _opened(
    f: BinaryIO, thread_id: str, end: int | None, max_line: int
) -> tuple[int, Copied | None] | None:
    """``(how far the file may be read, the prefix a fork inherited)``, once its first line
    is this thread's ``thread.created``; None if it is not. Raises `BadRecord` if that line
    does not verify."""
    size = os.fstat(f.fileno()).st_size
    if end is not None:
        size = min(size, end)
    created = parse_line(f.readline(max_line + 1))
    if created.ord != 1 or created.thread != thread_id or created.type != "thread.created":
        return None
    return size, inherited_prefix(created)


def _marks(
    thread_id: str, known: AckMark | None, checkpoints: Checkpoints | None
) -> list[tuple[int, str | None]]:
    """The ``(ord, hash)`` a read must meet where it reads that ord: the index's
    acknowledged mark and the store's checkpoint."""
    marks: list[tuple[int, str | None]] = [known[:2]] if known is not None else []
    if checkpoints is not None:
        row = checkpoints.get(thread_id, state=False)
        if row is not None:
            marks.append((row.ord, row.hash))
    return marks


def _chained(lines: list[Record], thread_id: str, copied: Copied | None) -> bool:
    """Whether ``lines`` are consecutive records of the thread, each chained on the one
    before, with unique ids; inside a fork's inherited prefix (``copied``), records of the
    threads it inherited from, ord 2 chained on the hash the lineage names and ord
    ``copied.until`` the record it names (as `threadlog.store.embedded.rollout.scan`)."""
    ids: set[str] = set()
    prev: Record | None = None
    for record in lines:
        if copied is not None and 2 <= record.ord <= copied.until:
            if record.thread == thread_id or record.thread not in copied.threads:
                return False
            if record.ord == copied.until and record.hash != copied.last:
                return False
        elif record.thread != thread_id:
            return False
        if prev is not None:
            chained_on = copied.prev if copied is not None and record.ord == 2 else prev.hash
            if record.ord != prev.ord + 1 or record.prev != chained_on:
                return False
        if record.id in ids:
            return False
        ids.add(record.id)
        prev = record
    return True


def _lines_backward(f: BinaryIO, size: int, max_line: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, line)`` of the file's lines up to byte ``size``, last first. The first one
    yielded is the final fragment if ``size`` does not end a line (it then fails to parse)."""
    pos = size
    buf = b""
    while pos > 0:
        step = min(CHUNK, pos)
        pos -= step
        f.seek(pos)
        buf = f.read(step) + buf
        stop = len(buf)  # buf[:stop] is what is not yielded yet
        while True:
            cut = buf.rfind(b"\n", 0, stop - 1)
            if cut < 0:
                break
            yield pos + cut + 1, buf[cut + 1 : stop]
            stop = cut + 1
        buf = buf[:stop]
        if len(buf) > max_line + 1:
            return  # no line is that long: not a rollout we can read backwards
    if buf:
        yield 0, buf


def _lines_forward(f: BinaryIO, offset: int, size: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, line)`` of the lines from byte ``offset`` up to byte ``size``; a final
    fragment is yielded as it is (it fails to parse)."""
    pos = offset  # the file offset of buf[0]
    buf = b""
    f.seek(offset)
    while True:
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            yield pos + start, buf[start : nl + 1]
            start = nl + 1
        buf = buf[start:]
        pos += start
        want = min(CHUNK, size - pos - len(buf))
        chunk = f.read(want) if want > 0 else b""
        if not chunk:
            if buf:
                yield pos, buf
            return
        buf += chunk
