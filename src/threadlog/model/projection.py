"""What each record changes in the index tables (pure).

The SQLite index never looks inside ``data`` itself: it asks `project` for the row changes a
record implies and applies them. Every change is an upsert keyed by id and carries the record's
ordinal, so applying a record twice changes nothing (catch-up and rebuild are idempotent).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from threadlog._dataclass import dataclass
from threadlog.errors import IntegrityError
from threadlog.model.envelope import FORMAT_VERSION
from threadlog.model.upcast import upcast

if TYPE_CHECKING:
    from collections.abc import Sequence

    from threadlog.model.envelope import Record

__all__ = [
    "PROJECTED",
    "Projected",
    "ProjectedLog",
    "RowChange",
    "as_projected",
    "project",
    "project_log",
]

_TOOL_STATUS = {
    "tool_call.approved": "approved",
    "tool_call.denied": "denied",
    "tool_call.started": "running",
    "tool_call.finished": "finished",
    "tool_call.unknown": "unknown",
    "tool_call.cancelled": "cancelled",
}
_RESOLVED_STATUS = {"done": "done", "retry": "approved", "abort": "aborted"}
PROJECTED = frozenset(
    {
        "thread.created",
        "thread.archived",
        "turn.started",
        "turn.ended",
        "tool_call.proposed",
        "tool_call.resolved",
        "memory.written",
        "memory.revoked",
        *_TOOL_STATUS,
    }
)
"""The record types that change index rows (at the current format); `project` returns
nothing for the others."""


@dataclass(frozen=True, slots=True)
class RowChange:
    """An upsert: ``table`` row ``key`` gets ``fields`` (thread, turn, tool_call, memory, or
    meta: the thread's ``metadata`` setting, one row per key)."""

    table: str
    key: str
    """The row's id. For the ``thread`` table it is the record's ``thread`` field, which in a
    fork's inherited prefix names an ancestor: the index applies thread changes to the log it
    is reading, never to ``key``."""
    fields: dict[str, Any]


def _text(value: Any, limit: int = 200) -> str | None:
    if not isinstance(value, str):
        return None
    return value if len(value) <= limit else value[: limit - 1] + "…"


def project(record: Record) -> list[RowChange]:
    """The row changes implied by one record (besides the thread's ord/hash bookkeeping)."""
    if record.type not in PROJECTED and record.v == FORMAT_VERSION:
        return []  # the common case, kept cheap: the index applies every record
    if record.v != FORMAT_VERSION:
        try:
            record = upcast(record)
        except IntegrityError:
            return []
    data = record.data if isinstance(record.data, dict) else {}
    type_ = record.type
    if type_ == "thread.created":
        lineage = data.get("lineage") if isinstance(data.get("lineage"), dict) else None
        config = data.get("config")
        metadata = config.get("metadata") if isinstance(config, dict) else None
        extra = [RowChange("meta", record.thread, metadata)] if isinstance(metadata, dict) else []
        return [
            *extra,
            RowChange(
                "thread",
                record.thread,
                {
                    "principal": data.get("principal"),
                    "created_at": record.ts,
                    "title": _text(data.get("title")),
                    "forked_from": lineage.get("thread") if lineage else None,
                },
            ),
        ]
    if type_ == "thread.archived":
        archived = data.get("archived", True) is True
        return [RowChange("thread", record.thread, {"status": "archived" if archived else "idle"})]
    if type_ == "turn.started":
        turn_id = data.get("turn_id")
        if not isinstance(turn_id, str):
            return []
        return [
            RowChange(
                "turn",
                turn_id,
                {
                    "status": "running",
                    "started_ord": record.ord,
                    "started_at": record.ts,
                    "input": _text(data.get("input")),
                },
            ),
            RowChange(
                "thread",
                record.thread,
                {"status": "running", "title_if_empty": _text(data.get("input"), 80)},
            ),
        ]
    if type_ == "turn.ended":
        turn_id = data.get("turn_id")
        if not isinstance(turn_id, str):
            return []
        return [
            RowChange(
                "turn",
                turn_id,
                {"status": data.get("outcome"), "ended_ord": record.ord, "ended_at": record.ts},
            ),
            # (``interrupted``: a stopped process's turn, ended by a resume; a service looks
            # for these and for running ones, `threadlog.runtime.takeover`)
            RowChange(
                "thread",
                record.thread,
                {"status": "interrupted" if data.get("outcome") == "interrupted" else "idle"},
            ),
        ]
    if type_ == "tool_call.proposed":
        call_id = data.get("call_id")
        if not isinstance(call_id, str):
            return []
        return [
            RowChange(
                "tool_call",
                call_id,
                {
                    "turn_id": data.get("turn_id"),
                    "tool": data.get("tool"),
                    "side_effect": data.get("side_effect"),
                    "status": "proposed",
                    "proposed_ord": record.ord,
                    "last_ord": record.ord,
                },
            )
        ]
    if type_ == "memory.written" and isinstance(data.get("memory_id"), str):
        return [
            RowChange(
                "memory",
                data["memory_id"],
                {
                    "fact": _text(data.get("fact"), 2000),
                    "scope": data.get("scope"),
                    "key": data.get("key"),
                    "source_event": data.get("source_event"),
                    "written_at": data.get("written_at"),
                    "expires_at": data.get("expires_at"),
                    "project": data.get("project"),
                    "revoked": 0,
                },
            )
        ]
    if type_ == "memory.revoked" and isinstance(data.get("memory_id"), str):
        return [RowChange("memory", data["memory_id"], {"revoked": 1})]
    if type_ in _TOOL_STATUS or type_ == "tool_call.resolved":
        call_id = data.get("call_id")
        if not isinstance(call_id, str):
            return []
        status = (
            _TOOL_STATUS.get(type_)
            if type_ != "tool_call.resolved"
            else _RESOLVED_STATUS.get(str(data.get("decision")))
        )
        if status is None:
            return []
        return [RowChange("tool_call", call_id, {"status": status, "last_ord": record.ord})]
    return []


class Projected(NamedTuple):
    """What consecutive records of one log change in the index, each row's changes merged
    (`project_log`): plain values, cheap to send from a worker process."""

    first: int
    """The ordinal of the first record."""
    last: tuple[int, str, str]
    """The last record's ``(ord, hash, ts)``."""
    thread: dict[str, Any]
    """The thread row's fields (``title_if_empty``: set if its title is still empty)."""
    rows: dict[tuple[str, str], dict[str, Any]]
    """``("turns" | "tool_calls", id)`` → the row's fields."""
    meta: dict[str, Any]
    """The thread's ``metadata`` setting, key → value."""
    memories: list[tuple[str, dict[str, Any]]]
    """``(memory id, fields)`` upserts, in order."""
    turns: int
    """Turns started."""
    calls: int
    """Tool calls proposed."""


def project_log(records: Sequence[Record]) -> Projected:
    """The index changes of ``records`` (consecutive records of one log, at least one), as
    applying each record's `project` in turn leaves the rows: the changes of one turn's or
    call's row merged (a call's proposed, approved, started and finished are one insert, not
    four), later fields over earlier ones; the thread's own changes merged likewise."""
    builder = ProjectedLog()
    builder.add(records)
    return builder.result()


class ProjectedLog:
    """`project_log` a page of records at a time: `add` them in order, then `result`."""

    def __init__(self) -> None:
        self._thread: dict[str, Any] = {}
        self._rows: dict[tuple[str, str], dict[str, Any]] = {}
        self._meta: dict[str, Any] = {}
        self._memories: list[tuple[str, dict[str, Any]]] = []
        self._turns = self._calls = 0
        self._first: int | None = None
        self._last: Record | None = None

    def add(self, records: Sequence[Record]) -> None:
        """Fold the next records' changes in."""
        if not records:
            return
        if self._first is None:
            self._first = records[0].ord
        thread, rows, meta, memories = self._thread, self._rows, self._meta, self._memories
        for record in records:
            for change in project(record):
                table = change.table
                if table == "thread":
                    _merge_thread(thread, change.fields)
                    continue
                if table == "meta":
                    meta.update((str(key), value) for key, value in change.fields.items())
                    continue
                if table == "memory":
                    memories.append((change.key, change.fields))
                    continue
                if table == "turn":
                    name = "turns"
                    self._turns += "started_ord" in change.fields
                else:
                    name = "tool_calls"
                    self._calls += change.fields.get("status") == "proposed"
                row = rows.get((name, change.key))
                if row is None:
                    rows[name, change.key] = dict(change.fields)
                else:
                    row.update(change.fields)
        self._last = records[-1]

    def result(self) -> Projected:
        """The changes of every record added (at least one)."""
        last = self._last
        assert last is not None and self._first is not None, "no records were added"
        return Projected(
            self._first,
            (last.ord, last.hash, last.ts),
            self._thread,
            self._rows,
            self._meta,
            self._memories,
            self._turns,
            self._calls,
        )


def as_projected(records: Sequence[Record] | Projected) -> Projected:
    """``records`` as what they change in the index: `project_log` of them, unless they are
    that already (a worker built it where the records were)."""
    return records if isinstance(records, Projected) else project_log(records)


def _merge_thread(merged: dict[str, Any], fields: dict[str, Any]) -> None:
    """Fold one change of the thread's row into ``merged``, so that setting the result
    leaves the row as applying each change in turn would: later fields over earlier ones,
    and a ``title_if_empty`` kept only while no title is known (or settled at once on a
    known empty title)."""
    for name, value in fields.items():
        if name != "title_if_empty":
            merged[name] = value
    if "title" in fields:
        merged.pop("title_if_empty", None)  # a title set after it: the earlier one is moot
    candidate = fields.get("title_if_empty")
    if candidate:
        if "title" in merged:
            if merged["title"] is None:
                merged["title"] = candidate
        else:
            merged.setdefault("title_if_empty", candidate)
