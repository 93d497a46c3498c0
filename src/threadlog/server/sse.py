"""Server-Sent Events framing for the live stream (``docs/service.md``, "The live stream").

Pure functions from records to the bytes of the ``text/event-stream`` body, kept apart from
the fan-out (`threadlog.server.hub`) so that they can be read, and tested, on their own:

* a record is ``id: <ord>\\ndata: <the record's envelope as one line of JSON>\\n\\n``;
* a heartbeat is the comment ``: ping\\n\\n``;
* a control event has a name and no id: ``event: end\\ndata: {"reason":…,"after":N}\\n\\n``.

The JSON of a record is `Record.to_dict` dumped by orjson, which never emits a newline, so one
``data:`` line always holds the whole record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from threadlog.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from threadlog.model.envelope import Record

__all__ = ["PING", "end_frame", "parse_last_event_id", "record_frame", "record_frames"]

PING = b": ping\n\n"
"""The heartbeat: a comment line, which every SSE parser ignores."""

_MAX_ID_DIGITS = 20
"""Longer than any ordinal a log can reach; bounds the work of parsing a hostile header."""


def record_frame(record: Record) -> bytes:
    """One record as an SSE event whose id is its ordinal."""
    return b"id: %d\ndata: %b\n\n" % (record.ord, orjson.dumps(record.to_dict()))


def record_frames(records: Iterable[Record]) -> list[tuple[int, bytes]]:
    """``(ord, frame)`` of each record, in order (what the hub's ring holds)."""
    dumps = orjson.dumps
    return [(r.ord, b"id: %d\ndata: %b\n\n" % (r.ord, dumps(r.to_dict()))) for r in records]


def end_frame(reason: str, after: int) -> bytes:
    """The control event that ends a stream: why, and the last ordinal the client was sent
    (where it resumes with ``?after=``)."""
    return b"event: end\ndata: %b\n\n" % orjson.dumps({"reason": reason, "after": after})


MAX_EVENT_ID = 2**62
"""The largest ordinal a ``Last-Event-ID`` may name (as ``?after=``: every backend's
ordinals fit a signed 64-bit integer)."""


def parse_last_event_id(value: str | None) -> int | None:
    """The ordinal a ``Last-Event-ID`` header names: ``"42"`` is 42; ``""`` or no header is
    None (start from ``?after=``, or from the beginning).

    Raises:
        UsageError: for anything but a non-negative decimal integer (the route answers 400).
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if len(text) > _MAX_ID_DIGITS or not (text.isascii() and text.isdigit()):
        raise UsageError(f"bad Last-Event-ID {value[:40]!r}: expected an event ordinal (0, 1, 2…)")
    ordinal = int(text)
    if ordinal > MAX_EVENT_ID:
        raise UsageError(f"bad Last-Event-ID {value[:40]!r}: an event ordinal is at most 2**62")
    return ordinal
