"""Digests of event ids, a block of records at a time: "is this id among these records?"

Theory of operation
-------------------
A thread opened from a checkpoint or snapshot holds the ids of the records after it only;
an explicit id (or a parent) it does not hold could be among the records before, the
*prefix*. Reading the whole prefix to find out makes the first such append as slow as the
thread is long. Each entry of the embedded store's sparse index (every ``SPARSE_EVERY``-th
record) therefore keeps a `block` of the block of records that ends at it: the CRC-32 of
each id, sorted, 4 bytes each (a thousand records: 4 KB). An id whose CRC a block lacks is
certainly not in it; one whose CRC it holds *may* be (one chance in about four million per
block for an id that is not), and only that block's bytes are then searched. A block covers
as many records as it holds CRCs, ending at its entry's ordinal, so it describes itself.

A block is a hint like the rest of the sparse index: the caller confirms what the bytes
hold by parsing the line it finds, and a block that is not what this module writes (another
length, another threadlog) is treated as absent, which costs a search, never a wrong answer.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["Block", "block", "crc", "load"]


def crc(id_: str) -> int:
    """The CRC-32 of an event id (its UTF-8 bytes)."""
    return zlib.crc32(id_.encode("utf-8", "surrogatepass"))


def block(ids: Iterable[str]) -> bytes:
    """The block of a run of records' ids: their CRCs, sorted, 4 bytes each, big-endian."""
    return b"".join(c.to_bytes(4, "big") for c in sorted(crc(i) for i in ids))


class Block:
    """A loaded block: the records ``first..last`` and their ids' CRCs."""

    __slots__ = ("_crcs", "first", "last")

    def __init__(self, last: int, crcs: bytes) -> None:
        self.last = last
        self.first = last - len(crcs) // 4 + 1
        self._crcs = crcs

    def may_hold(self, value: int) -> bool:
        """Whether an id of CRC ``value`` may be among the block's records (a search of the
        block's bytes for the CRC's, at a multiple of 4: no decoding, no order assumed)."""
        needle = value.to_bytes(4, "big")
        crcs = self._crcs
        at = crcs.find(needle)
        while at >= 0:
            if at % 4 == 0:
                return True
            at = crcs.find(needle, at + 1)
        return False


def load(last: int, data: object) -> Block | None:
    """The block stored for the record ``last`` ends, or None if ``data`` is not one."""
    if not isinstance(data, bytes) or not data or len(data) % 4 or len(data) // 4 > last:
        return None
    return Block(last, data)
