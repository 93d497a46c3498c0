"""Typed reads of untrusted JSON values (source lines are whatever their writer wrote)."""

from __future__ import annotations

from typing import Any

__all__ = ["as_dict", "as_int", "as_str"]


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is an object, else an empty one."""
    return value if isinstance(value, dict) else {}


def as_str(value: Any) -> str | None:
    """``value`` if it is a string, else None."""
    return value if isinstance(value, str) else None


def as_int(value: Any, default: int = 0) -> int:
    """``value`` if it is an integer (not a bool), else ``default``."""
    return value if type(value) is int else default
