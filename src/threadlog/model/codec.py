"""Canonical JSON.

threadlog's canonical form is what ``orjson.dumps(value, option=OPT_SORT_KEYS)`` produces for
plain JSON values: keys sorted by code point, no whitespace, UTF-8 (no ``\\u`` escapes for
non-ASCII), shortest round-trip floats. Hashes are computed over these bytes, so every backend
and every version must produce exactly them; a test pins a set of golden encodings.

Only plain JSON goes in: ``dict`` with ``str`` keys, ``list``/``tuple``, ``str``, ``int``
(64-bit), ``float`` (finite), ``bool`` and ``None``. Anything else raises `InvalidData` with
the path to the offending value, with one exception: values orjson encodes natively and cannot
be told to refuse (``uuid.UUID``, plain ``enum.Enum`` members) are written as their JSON
value. Stores hand back the decoded bytes, never the caller's objects, so a record always
equals what a later read returns.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from threadlog.errors import InvalidData

__all__ = ["MAX_DEPTH", "canonical", "canonical_decoded", "check_plain", "kept", "loads"]

MAX_DEPTH = 64
"""Deepest nesting accepted in event data (orjson's own recursion limit is 254)."""

_OPTIONS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def _refuse(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not plain JSON")


def canonical(value: Any) -> bytes:
    """Encode a plain JSON value canonically, or raise `InvalidData` saying what is wrong."""
    out = canonical_decoded(value)
    # orjson writes NaN and infinities as null: a null is most often a None, and the bytes
    # decode back to a value equal to the one given exactly when no null stands for a NaN or
    # an infinity (a tuple, a UUID or an enum, which decode to something else, are walked
    # too), a tenth of the walk's cost.
    if b"null" in out and orjson.loads(out) != value:
        check_plain(value)
    return out


def kept(encoded: bytes) -> bytes:
    """``encoded`` (what `canonical` returned) as bytes of its own size, for a caller that
    keeps it: orjson's output holds on to its whole write buffer (4 KiB at least, and up to
    ~13 × the text for longer ones) for as long as it lives, so a store that kept each
    record's JSON as returned held ~4 KiB a record. Bytes that are passed on and dropped
    (joined into a line, hashed) need no copy."""
    return bytes(memoryview(encoded))


def canonical_decoded(value: Any) -> bytes:
    """`canonical` for a value made of decoded JSON (what `orjson.loads` returns, and
    strings, integers, booleans and None): such a value holds no NaN or infinity (orjson
    decodes none), so the check for one that `canonical` makes when the bytes hold a null is
    left out. (``threadlog import``'s records: everything in them was read from a source's
    JSON lines.) Raises `InvalidData` as `canonical` does for anything else it finds."""
    try:
        out = orjson.dumps(value, default=_refuse, option=_OPTIONS)
    except (TypeError, orjson.JSONEncodeError) as exc:
        check_plain(value)  # names the path to the bad value when it can
        raise InvalidData(f"data is not canonical JSON: {exc}") from None
    # orjson nests deeper than we allow; only then is the slow walk needed (bracket counts
    # include ones inside strings: extra walks, no misses)
    if out.count(b"[") + out.count(b"{") > MAX_DEPTH:
        check_plain(value)
    return out


def check_plain(value: Any, path: str = "$", depth: int = 0) -> None:
    """Walk a value and raise `InvalidData` at the first thing that is not plain JSON."""
    if depth > MAX_DEPTH:
        raise InvalidData(f"{path}: nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool | str):
        return
    if type(value) is int:
        if not -(2**63) <= value < 2**64:
            raise InvalidData(f"{path}: integer does not fit in 64 bits")
        return
    if type(value) is float:
        if not math.isfinite(value):
            raise InvalidData(
                f"{path}: {value!r} is not valid JSON (NaN and infinities are refused)"
            )
        return
    if type(value) is dict:
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidData(f"{path}: key {key!r} is not a string")
            check_plain(item, f"{path}.{key}", depth + 1)
        return
    if type(value) in (list, tuple):
        for i, item in enumerate(value):
            check_plain(item, f"{path}[{i}]", depth + 1)
        return
    raise InvalidData(f"{path}: {type(value).__name__} is not plain JSON")


def loads(data: bytes | str) -> Any:
    """Parse JSON (orjson: strict RFC 8259; refuses NaN, lone surrogates and invalid UTF-8)."""
    return orjson.loads(data)
