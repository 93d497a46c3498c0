"""Wall-clock time and randomness for records and ids (the store's only sources of either),
and the monotonic clock the runtime's cadences read (tests replace ``monotonic``)."""

from __future__ import annotations

import os
import random
import time
from datetime import UTC, datetime

from threadlog.model.ids import uuid7_from_bits

__all__ = [
    "monotonic",
    "new_id",
    "new_id_after",
    "random_bits",
    "random_bytes",
    "rfc3339",
    "wall_ns",
]


def wall_ns() -> int:
    return time.time_ns()


def monotonic() -> float:
    """Seconds of a clock that never goes back (read as ``_clock.monotonic()``, so that a
    test can replace it)."""
    return time.monotonic()


_second: tuple[int, str] = (-1, "")
"""The last second `rfc3339` formatted and its text up to the fraction: one tuple, replaced
whole, so that a thread never pairs one second with another's text."""


def rfc3339(ns: int) -> str:
    """``2026-11-30T02:00:00.123456Z``: UTC, microseconds, fixed width (sorts as text)."""
    global _second
    second, rest = divmod(ns, 1_000_000_000)
    cached = _second
    if cached[0] != second:
        cached = _second = (
            second,
            datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S."),
        )
    return f"{cached[1]}{_DIGITS[rest // 1_000_000]}{_DIGITS[rest // 1000 % 1000]}Z"


_DIGITS = [f"{n:03d}" for n in range(1000)]
"""``000`` … ``999``: the milliseconds and the microseconds of `rfc3339`, looked up (a
format with a width costs twice the rest of the call)."""


# Event ids need uniqueness, not secrecy: a PRNG seeded from the OS is ~50x cheaper per id
# than os.urandom on some VMs. It is reseeded in forked children so they never share ids.
_rng = random.Random(os.urandom(32))


def _reseed() -> None:
    _rng.seed(os.urandom(32))


os.register_at_fork(after_in_child=_reseed)


def random_bytes(n: int) -> bytes:
    return _rng.getrandbits(n * 8).to_bytes(n, "big")


random_bits = _rng.getrandbits
"""``random_bits(k)``: a non-negative int of k random bits (reseeded after fork)."""


def new_id(ns: int | None = None) -> str:
    """A fresh UUIDv7 for the time ``ns`` (default: now), with PRNG randomness."""
    return uuid7_from_bits((time.time_ns() if ns is None else ns) // 1_000_000, random_bits(74))


def new_id_after(previous: str | None) -> str:
    """A fresh UUIDv7 that sorts after ``previous`` (two ids of one millisecond are ordered
    at random otherwise): for names whose sort order must be their creation order. An id
    from the future (a clock set back) is not waited for: after a few milliseconds the fresh
    id is returned as it is."""
    deadline = time.monotonic() + 0.005
    while True:
        candidate = new_id()
        if previous is None or candidate > previous or time.monotonic() > deadline:
            return candidate
