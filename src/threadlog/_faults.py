"""Fault injection for crash tests: ``THREADLOG_CRASH_AT=<event type or point>[:<n>]``.

When set, the process exits abruptly (``os._exit(137)``, no cleanup, like kill -9) right after
the n-th record (default: the first) of that type has become durable, or the n-th time the
code passes a named point. Points: ``fork.copied`` (a fork's file is written and fsynced under
its temporary name, not yet renamed into place). Read once at import.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from threadlog.model.envelope import Record

__all__ = ["after_durable", "crash_point", "point"]


def _parse(spec: str | None) -> tuple[str, int] | None:
    if not spec:
        return None
    name, _, count = spec.partition(":")
    try:
        n = int(count) if count else 1
    except ValueError:
        raise SystemExit(f"THREADLOG_CRASH_AT={spec!r}: expected <event type>[:<n>]") from None
    return name.strip(), max(n, 1)


_SPEC = _parse(os.environ.get("THREADLOG_CRASH_AT"))
_seen = 0
_lock = threading.Lock()


def crash_point() -> tuple[str, int] | None:
    """The configured crash point, if any."""
    return _SPEC


def after_durable(records: Iterable[Record]) -> None:
    """Called by the store once ``records`` are durable; exits if the crash point is hit."""
    global _seen
    if _SPEC is None:
        return
    name, n = _SPEC
    with _lock:
        for record in records:
            if record.type == name:
                _seen += 1
                if _seen == n:
                    sys.stdout.flush()
                    sys.stderr.write(f"THREADLOG_CRASH_AT: exiting after durable {name} #{n}\n")
                    sys.stderr.flush()
                    os._exit(137)


def point(name: str) -> None:
    """A named crash point in the code (see the module docstring)."""
    global _seen
    if _SPEC is None or _SPEC[0] != name:
        return
    with _lock:
        _seen += 1
        if _seen == _SPEC[1]:
            sys.stderr.write(f"THREADLOG_CRASH_AT: exiting at {name} #{_SPEC[1]}\n")
            sys.stderr.flush()
            os._exit(137)
