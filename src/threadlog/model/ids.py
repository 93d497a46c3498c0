"""Identifiers: UUIDv7 for threads and events, deterministic ids where events must de-duplicate.

Pure: the caller passes the time and the random bytes, so this module never reads a clock or
the OS entropy pool itself (the store and the runtime do, at the edge).
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["derived_id", "is_uuid", "named_thread_id", "uuid7", "uuid7_from_bits", "uuid7_millis"]

_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def uuid7(unix_ms: int, rand: bytes) -> str:
    """Build a UUIDv7 (RFC 9562) string from a millisecond timestamp and 10 random bytes.

    UUIDv7 ids sort by creation time, which keeps rollout directories and index pages in
    time order.
    """
    if len(rand) < 10:
        raise ValueError("uuid7 needs 10 random bytes")
    value = (unix_ms & 0xFFFF_FFFF_FFFF) << 80
    value |= 0x7 << 76  # version
    value |= (int.from_bytes(rand[0:2], "big") & 0x0FFF) << 64  # rand_a
    value |= 0b10 << 62  # variant
    value |= int.from_bytes(rand[2:10], "big") & 0x3FFF_FFFF_FFFF_FFFF  # rand_b
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_millisecond: tuple[int, str] = (-1, "")
"""The last millisecond `uuid7_from_bits` wrote and its ids' first 15 characters (the
timestamp and the version): one tuple, replaced whole, so that threads never mix two."""


def uuid7_from_bits(unix_ms: int, bits: int) -> str:
    """`uuid7` from 74 random bits given as an int (the store's fast path).

    The part before ``rand_a`` is the same for every id of a millisecond and is reused: a
    quarter of the cost of an id.
    """
    global _millisecond
    cached = _millisecond
    if cached[0] != unix_ms:
        stamp = unix_ms & 0xFFFF_FFFF_FFFF
        cached = _millisecond = (unix_ms, f"{stamp >> 16:08x}-{stamp & 0xFFFF:04x}-7")
    # rand_a (12 bits), the variant and rand_b (62 bits): the last 19 hex digits, under a
    # marker bit that keeps their leading zeros (hex() has no width; a format with one costs
    # a fifth of the id)
    h = hex(
        (1 << 76) | ((bits >> 62) & 0x0FFF) << 64 | (0b10 << 62) | (bits & 0x3FFF_FFFF_FFFF_FFFF)
    )
    return f"{cached[1]}{h[3:6]}-{h[6:10]}-{h[10:]}"


def uuid7_millis(uuid: str) -> int:
    """The millisecond timestamp inside a UUIDv7 string."""
    return int(uuid[:8] + uuid[9:13], 16)


def is_uuid(value: object) -> bool:
    """True for a lower-case, hyphenated UUID string (the only form threadlog writes)."""
    return isinstance(value, str) and _UUID_RE.fullmatch(value) is not None


def named_thread_id(namespace: str, name: str) -> str:
    """A deterministic thread id for a name in a namespace (``named_thread_id("langgraph",
    "user-42")``): a UUIDv7 with a zero timestamp and 74 bits of SHA-256 of the name, so that
    an adapter finds a framework's thread again without a lookup table. Such threads sort
    before every generated one (the embedded store files them under 1970/01)."""
    raw = [p.encode("utf-8", "surrogatepass") for p in ("thread", namespace, name)]
    encoded = b"".join(len(b).to_bytes(4, "big") + b for b in raw)
    return uuid7(0, hashlib.sha256(encoded).digest()[:10])


def derived_id(namespace: str, *parts: str) -> str:
    """A deterministic UUID-shaped id from a namespace and parts (version 8, RFC 9562).

    Used for events that must de-duplicate: appending the same derived id twice is a no-op,
    e.g. ``derived_id("tool_call.started", thread_id, call_id, "1")``.
    """
    # Length-prefixed, so that no two different part lists encode alike.
    raw = [p.encode("utf-8", "surrogatepass") for p in (namespace, *parts)]
    encoded = b"".join(len(b).to_bytes(4, "big") + b for b in raw)
    digest = hashlib.sha256(encoded).digest()
    value = int.from_bytes(digest[:16], "big")
    value = (value & ~(0xF << 76)) | (0x8 << 76)
    value = (value & ~(0b11 << 62)) | (0b10 << 62)
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
