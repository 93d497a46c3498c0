"""Scanning a whole rollout in bounded memory: `scan`, a chunk at a time.

Theory of operation
-------------------
`StreamScan` reads a rollout in chunks of whole lines (`CHUNK` bytes, more for a longer
line) and runs `threadlog.store.embedded.rollout.scan` on each, continued from the one before
(its offset, next ordinal, previous hash, and the prefix a fork's ``thread.created``
declares), yielding each chunk's records and keeping none: the same checks and the same
verdict as a scan of the whole file, for a verification (`Reader.verify`) that holds one
chunk at a time.

Two checks reach across chunks. A bad line that a chunk's scan takes for a torn tail may
have valid records after it in a later chunk (then it is damage): the rest of the file is
scanned from that line in one piece (rare: a torn tail is at most a few pages of the end).
And event ids must be unique in the whole log: each id goes into a Bloom filter of fixed size
(`_IdFilter`, 16 MiB); an id it may have seen before is a suspect, and suspects are settled by
a second pass that reads ids only. The first true duplicate is reported as the whole scan
reports it (at the later record's ordinal, the log valid before it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from threadlog.errors import IntegrityError
from threadlog.store.embedded.rollout import LinePieces, TornTail, prefix_of, scan

if TYPE_CHECKING:
    from collections.abc import Iterator

    from threadlog.model.envelope import Record
    from threadlog.model.lineage import Copied

__all__ = ["CHUNK", "StreamScan"]

CHUNK = 4 * 1024 * 1024
"""Bytes read (and records held) at a time."""


class _IdFilter:
    """A Bloom filter of event ids: `add` says whether an id may have been added before."""

    BITS = 1 << 27
    PROBES = 4

    def __init__(self) -> None:
        self._bits = bytearray(self.BITS // 8)

    def add(self, id_: str) -> bool:
        h = hash(id_)
        h1, h2 = h & 0xFFFFFFFF, ((h >> 32) & 0xFFFFFFFF) | 1
        bits = self._bits
        seen = True
        for i in range(self.PROBES):
            bit = (h1 + i * h2) % self.BITS
            byte, mask = bit >> 3, 1 << (bit & 7)
            if not bits[byte] & mask:
                seen = False
                bits[byte] |= mask
        return seen


class StreamScan:
    """The scan of one rollout up to byte ``end``, a chunk of records at a time.

    Iterate it for the records (lists, in order); afterwards ``count``, ``last``, ``end``,
    ``torn`` and ``error`` hold what `rollout.Scan` would (``records`` aside). Records
    yielded at or after ``error.ord`` are not part of the valid log (a duplicate id found by
    the second pass): callers keep what they learn per ordinal and drop those.
    """

    def __init__(self, path: str, thread_id: str, *, end: int | None = None) -> None:
        self.path = path
        self.thread_id = thread_id
        self._limit = end
        self._file = open(path, "rb")
        self.count = 0
        self.last: Record | None = None
        self.end = 0
        self.torn: TornTail | None = None
        self.error: IntegrityError | None = None
        self._suspects: dict[str, int] = {}
        self.offsets: list[int] = []
        """The line offsets of the records last yielded."""

    def close(self) -> None:
        """Close the file (iterating to the end closes it too)."""
        self._file.close()

    def __iter__(self) -> Iterator[list[Record]]:
        try:
            yield from self._chunks()
        finally:
            self._file.close()
        if self._suspects:
            self._settle_suspects()

    def _chunks(self) -> Iterator[list[Record]]:
        expected, prev = 1, None
        copied: Copied | None = None
        ids = _IdFilter()
        pieces = LinePieces(self._file, CHUNK, self._limit)
        for offset, data, final in pieces:
            if not data and final:  # (a fork's file may not end inside its inherited records)
                self.error = scan(
                    b"", self.thread_id, base_offset=offset, start_ord=expected, copied=copied
                ).error
                return
            part = scan(
                data,
                self.thread_id,
                base_offset=offset,
                start_ord=expected,
                prev_hash=prev,
                copied=copied,
                whole=final,
            )
            if part.torn is not None and not final:  # torn only if nothing valid follows it
                rest = data[part.end - offset :] + pieces.rest()
                tail = scan(
                    rest,
                    self.thread_id,
                    base_offset=part.end,
                    start_ord=expected + len(part.records),
                    prev_hash=part.records[-1].hash if part.records else prev,
                    copied=copied or prefix_of(part.records),
                )
                part.torn, part.error = tail.torn, tail.error
                final = True
            records = part.records
            if records:
                if copied is None and expected == 1:
                    copied = prefix_of(records)
                for record in records:
                    if ids.add(record.id) and record.id not in self._suspects:
                        self._suspects[record.id] = record.ord
                self.count += len(records)
                self.last = records[-1]
                expected, prev = records[-1].ord + 1, records[-1].hash
                self.offsets = part.offsets
                yield records
            self.end = part.end
            if part.error is not None or part.torn is not None or final:
                self.torn, self.error = part.torn, part.error
                return

    def _settle_suspects(self) -> None:
        """Find the first id that truly appears twice (a second pass reading ids only)."""
        first_at: dict[str, int] = {}
        duplicate: tuple[int, str, int] | None = None  # (ord, id, offset)
        offset = 0
        upto = self.last.ord if self.last is not None else 0
        with open(self.path, "rb") as f:
            for line in f:
                if self.error is not None and offset >= (self.error.offset or 0):
                    break
                doc = orjson.loads(line)
                ord_, id_ = doc["ord"], doc["id"]
                if ord_ > upto:
                    break
                if id_ in self._suspects:
                    if id_ in first_at:
                        duplicate = (ord_, id_, offset)
                        break
                    first_at[id_] = ord_
                offset += len(line)
        if duplicate is None:
            return
        ord_, id_, at = duplicate
        self.error = IntegrityError(
            self.thread_id, ord_, f"event id {id_} appears twice", offset=at
        )
        self.torn = None
        self.count = ord_ - 1
        self.end = at
        self.last = None  # (the caller counts ords below ``error.ord`` only)
