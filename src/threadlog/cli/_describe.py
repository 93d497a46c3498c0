"""What ``ls``, ``show`` and ``tail`` say about threads and records, in words.

`describe` puts a record in the words ``threadlog demo`` uses ("user: …", "model call with 4
messages", "attempt 1 (durable before the tool runs)"), as a plain `rich.text.Text`: the user's
and the model's text is never read as markup. `thread_row` is a thread's row of ``ls`` (and
the ``thread`` of ``show --json``) with an honest `status`: a thread whose turn is open is
*running* only while a process holds its lease (`Maintenance.durable_end` is published), else
*interrupted* (``threadlog resume`` recovers it); a damaged log is *damaged*; and the calls
waiting for a human are named with the command that settles each (`waiting`).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

import orjson
from rich.text import Text

from threadlog.cli._out import short
from threadlog.model.stepcontext import message_count
from threadlog.store.protocol import LocalHome

if TYPE_CHECKING:
    from threadlog.cli._store import DiskStore
    from threadlog.model.envelope import Record

__all__ = ["activity", "describe", "lineage_text", "status_of", "thread_row", "waiting"]


def lineage_text(lineage: dict[str, Any], width: int | None = None) -> str:
    """Where a thread comes from, in words: "forked from T at ord N", "sub-agent of T",
    "replay of T at ord N" (an imported sub-agent or fork has no ord; one imported before its
    parent names the parent's import key instead of a thread)."""
    kind = lineage.get("kind")
    verb = {"subagent": "sub-agent of", "replay": "replay of"}.get(str(kind), "forked from")
    source = lineage.get("thread") or lineage.get("source_key") or "an unknown thread"
    text = f"{verb} {short(source, width)}"
    if lineage.get("ord") is not None:
        text += f" at ord {lineage['ord']}"
    return text


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    try:
        return len(orjson.dumps(value))
    except TypeError:
        return 0


def describe(record: Record, width: int | None = 90) -> Text:
    """``record`` in words, one line (at most ``width`` characters of user text)."""
    data: dict[str, Any] = record.data if isinstance(record.data, dict) else {}

    def cut(value: Any, w: int | None = width) -> str:
        return short(value, w)

    match record.type:
        case "thread.created":
            lineage = data.get("lineage")
            if isinstance(lineage, dict) and lineage.get("thread"):
                return Text(lineage_text(lineage))
            return Text(f"created for {cut(data.get('principal'), 40)}")
        case "turn.started":
            out = Text("user", style="bold")
            out.append(": " + cut(data.get("input")))
            return out
        case "input.queued":
            out = Text("user (steering, queued)", style="bold")
            out.append(": " + cut(data.get("text")))
            return out
        case "input.consumed":
            return Text("steering taken in at a safe point")
        case "step.started":
            count = message_count(data)
            if count is None:
                return Text("model call")
            return Text(f"model call with {count} messages")
        case "model.responded":
            found = data.get("message")
            message: dict[str, Any] = found if isinstance(found, dict) else {}
            calls = ", ".join(str(c.get("name", "?")) for c in message.get("tool_calls") or [] if c)
            out = Text("model", style="magenta")
            out.append(": " + cut(message.get("content")))
            if calls:
                out.append(" → " + cut(calls, 40))
            return out
        case "tool_call.proposed":
            try:
                args = orjson.dumps(data.get("args")).decode()
            except TypeError:
                args = "…"
            out = Text(f"{cut(data.get('tool'), 40)}({cut(args, 50)}) ")
            out.append(cut(data.get("side_effect"), 20), style="dim")
            return out
        case "tool_call.approved" | "tool_call.denied":
            return Text(f"by {cut(data.get('by'), 40)}")
        case "tool_call.started":
            return Text(f"attempt {data.get('attempt')} (durable before the tool runs)")
        case "tool_call.finished":
            size = _size(data.get("result"))
            if data.get("ok"):
                return Text(f"ok, {size} bytes")
            out = Text("error", style="red")
            out.append(f": {cut(data.get('error'))}, {size} bytes")
            return out
        case "tool_call.unknown":
            return Text(f"outcome unknown: {cut(data.get('call_id'), 40)}", style="bold red")
        case "tool_call.resolved":
            return Text(f"{cut(data.get('call_id'), 40)} resolved as {cut(data.get('decision'))}")
        case "turn.ended":
            outcome = str(data.get("outcome"))
            return Text(cut(outcome), style="green" if outcome == "completed" else "red")
        case "session.opened" | "session.closed":
            return Text(f"session {cut(data.get('session_id'), 40)}")
    if not data:
        return Text("")
    pairs = ", ".join(
        f"{k}={v if isinstance(v, str | int | float | bool) else '…'}" for k, v in data.items()
    )
    return Text(cut(pairs), style="dim")


def activity(row: Any) -> str:
    """When a thread was last active: its last record's time, or its creation's if later (a
    fresh fork's inherited records keep their old times)."""
    return max(row.last_ts or "", row.created_at or "")


def status_of(store: DiskStore, row: Any) -> str:
    """``damaged``, ``running`` (a turn open, a live lease holder), ``interrupted`` (a turn
    open, nobody holds it), else the index's status (``idle``, ``archived``). Only a store on
    disk publishes its live holders (`Maintenance.durable_end`); elsewhere (PostgreSQL) an
    open turn is reported ``running``."""
    if row.damage:
        return "damaged"
    if row.status == "running":
        if not isinstance(store, LocalHome):
            return "running"  # a database's leases are not visible here: say what the index says
        try:
            live = store.durable_end(row.thread_id) is not None
        except Exception:  # a status must never fail the listing
            live = False
        return "running" if live else "interrupted"
    return str(row.status)


def waiting(
    store: DiskStore, thread_id: str, calls: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The thread's tool calls waiting for a human, each with the command that settles it."""
    if calls is None:
        calls = store.tool_calls(thread_id)
    out = []
    for call in calls:
        call_id = str(call.get("call_id"))
        arg = shlex.quote(call_id)
        if call.get("status") == "unknown":
            out.append(
                {
                    "call_id": call_id,
                    "tool": call.get("tool"),
                    "needs": "resolve",
                    "command": f"threadlog resolve {thread_id} {arg} --as done|retry|abort",
                }
            )
        elif call.get("status") == "proposed":
            out.append(
                {
                    "call_id": call_id,
                    "tool": call.get("tool"),
                    "needs": "approval",
                    "command": f"threadlog approve {thread_id} {arg}  (or: threadlog deny)",
                }
            )
    return out


def thread_row(
    store: DiskStore, row: Any, calls: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A thread as ``ls --json`` prints it."""
    doc: dict[str, Any] = dict(row.to_dict())
    doc.pop("path", None)
    doc.pop("bytes", None)
    doc["status"] = status_of(store, row)
    doc["last_activity"] = activity(row) or None
    doc["waiting"] = waiting(store, row.thread_id, calls) if row.tool_calls or calls else []
    return doc
