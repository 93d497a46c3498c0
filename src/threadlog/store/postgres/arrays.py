"""Array parameters in PostgreSQL's binary format, built in a few calls per column.

The group commit sends a batch's rows as one array per column (``unnest``). psycopg's generic
list dumper looks up a dumper for, and dumps, every element in Python: ~20 µs per row of a
dozen columns, a good part of the committer's time per append. These functions build the
binary array format (``array_send``: dimensions, element type, then each element as its
length and bytes) directly, and the wrapper types carry it with the array's type oid, so a
lane's connection sends them as they are (`register`). Nothing is interpreted: a text element
is its UTF-8 bytes, a bytea element its bytes, a bigint eight big-endian bytes.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from psycopg.adapt import Dumper
from psycopg.pq import Format

if TYPE_CHECKING:
    from collections.abc import Sequence

    import psycopg

__all__ = ["ByteaArray", "Int4Array", "Int8Array", "TextArray", "register"]

_HEADER = struct.Struct(">iiiii")  # ndim, has nulls, element oid, length, lower bound
_LEN = struct.Struct(">i")
_NULL = b"\xff\xff\xff\xff"
_TEXT, _BYTEA, _INT8, _INT4 = 25, 17, 20, 23


def _varlena(values: Sequence[str | bytes | None], oid: int) -> bytes:
    parts = [b""]
    nulls = 0
    pack = _LEN.pack
    for value in values:
        if value is None:
            parts.append(_NULL)
            nulls = 1
            continue
        data = value.encode() if isinstance(value, str) else value
        parts.append(pack(len(data)))
        parts.append(data)
    parts[0] = _HEADER.pack(1, nulls, oid, len(values), 1)
    return b"".join(parts)


def _fixed(values: Sequence[int | None], oid: int, size: int, code: str) -> bytes:
    if None in values:
        one = struct.Struct(">i" + code)
        parts = [_NULL if v is None else one.pack(size, v) for v in values]
        return _HEADER.pack(1, 1, oid, len(values), 1) + b"".join(parts)
    n = len(values)
    body: list[int] = []
    for value in values:
        body.append(size)
        body.append(value)  # type: ignore[arg-type]  # no None: checked above
    return _HEADER.pack(1, 0, oid, n, 1) + struct.pack(f">{('i' + code) * n}", *body)


class TextArray(bytes):
    """A ``text[]`` parameter, already in binary form."""

    __slots__ = ()

    @classmethod
    def of(cls, values: Sequence[str | None]) -> TextArray:
        return cls(_varlena(values, _TEXT))


class ByteaArray(bytes):
    """A ``bytea[]`` parameter, already in binary form."""

    __slots__ = ()

    @classmethod
    def of(cls, values: Sequence[bytes | None]) -> ByteaArray:
        return cls(_varlena(values, _BYTEA))


class Int8Array(bytes):
    """A ``bigint[]`` parameter, already in binary form."""

    __slots__ = ()

    @classmethod
    def of(cls, values: Sequence[int | None]) -> Int8Array:
        return cls(_fixed(values, _INT8, 8, "q"))


class Int4Array(bytes):
    """An ``integer[]`` parameter, already in binary form."""

    __slots__ = ()

    @classmethod
    def of(cls, values: Sequence[int | None]) -> Int4Array:
        return cls(_fixed(values, _INT4, 4, "i"))


def _dumper(array_oid: int) -> type[Dumper]:
    class _Prebuilt(Dumper):
        format = Format.BINARY
        oid = array_oid

        def dump(self, obj: Any) -> bytes:
            return obj  # type: ignore[no-any-return]  # a bytes subclass

    return _Prebuilt


_DUMPERS: dict[type, type[Dumper]] = {
    TextArray: _dumper(1009),
    ByteaArray: _dumper(1001),
    Int8Array: _dumper(1016),
    Int4Array: _dumper(1007),
}


def register(conn: psycopg.Connection[Any]) -> None:
    """Let ``conn`` send the prebuilt arrays as they are (binary parameters)."""
    for cls, dumper in _DUMPERS.items():
        conn.adapters.register_dumper(cls, dumper)
