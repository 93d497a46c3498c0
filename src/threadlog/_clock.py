"""Wall-clock time for records and ids (the only clock the store reads)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

__all__ = ["rfc3339", "wall_ns"]


def wall_ns() -> int:
    return time.time_ns()


def rfc3339(ns: int) -> str:
    """``2026-11-30T02:00:00.123456Z``: UTC, microseconds, fixed width (sorts as text)."""
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
