"""Format versions and upcasters: old records are read, never refused for being old.

Every record carries the envelope format version ``v`` it was written with. Its bytes are
verified as written (the hash covers ``v``); then, before the reducer or the context sees it,
`upcast` turns it into the current format with one small function per version step. A record
from a *newer* version than this code knows is refused with a clear error instead of being
misread.

Format history:

* **0** (pre-release): ``tool_call.result`` with ``output`` instead of ``tool_call.finished``
  with ``result``, and no ``ok`` flag (a result with ``error`` set failed).
* **1**: the current catalogue (``docs/events.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from threadlog.errors import IntegrityError
from threadlog.model.envelope import FORMAT_VERSION, Record

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["UPCASTERS", "upcast"]


def _v0_to_v1(record: Record) -> Record:
    if record.type == "tool_call.result" and isinstance(record.data, dict):
        data = dict(record.data)
        error = data.get("error")
        new = {
            "call_id": data.get("call_id"),
            "ok": error is None,
            "result": data.get("output"),
            "error": error,
        }
        return record._replace(v=1, type="tool_call.finished", data=new)
    return record._replace(v=1)


UPCASTERS: Final[dict[int, Callable[[Record], Record]]] = {0: _v0_to_v1}
"""``{v: upcaster from v to v + 1}``."""


def upcast(record: Record) -> Record:
    """The record in the current format (the same object when it already is)."""
    if record.v == FORMAT_VERSION:
        return record
    if record.v > FORMAT_VERSION:
        raise IntegrityError(
            record.thread,
            record.ord,
            f"written in format {record.v} by a newer threadlog (this one reads up to {FORMAT_VERSION})",
        )
    while record.v < FORMAT_VERSION:
        step = UPCASTERS.get(record.v)
        if step is None:
            raise IntegrityError(record.thread, record.ord, f"no upcaster from format {record.v}")
        record = step(record)
    return record
