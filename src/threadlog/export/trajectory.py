"""The ``trajectory`` export: the active branch as steps, for evaluating an agent's run.

One JSON object::

    {"format": "threadlog.trajectory", "version": 1, "thread", "title", "source", "model",
     "turns": [{"turn_id", "input", "outcome", "reason", "started_at", "ended_at"}],
     "steps": [{"index", "turn_id", "step_id", "at", "input", "content", "thinking",
                "tool_calls": [{"call_id", "tool", "args", "ok", "result", "error",
                                "started_at", "finished_at", "duration_ms"}],
                "usage", "stop_reason"}],
     "outcome": {"status", "final_message", "steps", "tool_calls", "failed_tool_calls"},
     "usage": {...totals of the steps...}}

A *step* is one model response on the active branch (the path from the active leaf to the
root, compactions not applied: an evaluation wants every step), with the user input that came
before it (``input``, the messages since the previous step) and its tool calls joined to
their results. Times are the records' ``ts``; for an imported thread, the source's own
timestamps where its progress records kept them (``custom.import.progress`` ``times``), so a
Claude Code session's timings are its own, not the import's. ``source`` is the thread's
``config.import`` (None for a thread threadlog ran itself).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from threadlog.model.context import Context, tool_result_text
from threadlog.model.tree import Tree

if TYPE_CHECKING:
    from collections.abc import Sequence

    from threadlog.model.envelope import Record

__all__ = ["to_trajectory", "trajectory"]


def _times(records: Sequence[Record]) -> dict[str, str]:
    """Record id → when it happened (the source's time for an imported record)."""
    source: dict[str, str] = {}
    for record in records:
        if record.type == "custom.import.progress" and isinstance(record.data, dict):
            times = record.data.get("times")
            if isinstance(times, dict):
                source.update({k: v for k, v in times.items() if isinstance(v, str)})
    out: dict[str, str] = {}
    carried: str | None = None
    for record in reversed(records):  # an item's records take the time of its last one
        if record.id in source:
            carried = source[record.id]
        out[record.id] = carried if source and carried else record.ts
    return out


def _ms(start: str | None, end: str | None) -> int | None:
    if not start or not end:
        return None
    try:
        a = datetime.fromisoformat(start.replace("Z", "+00:00"))
        b = datetime.fromisoformat(end.replace("Z", "+00:00"))
    except ValueError:
        return None
    return round((b - a).total_seconds() * 1000)


def trajectory(records: Sequence[Record]) -> dict[str, Any]:
    """The trajectory of the thread's active branch (see the module docstring)."""
    first = records[0].data if records and isinstance(records[0].data, dict) else {}
    config = first.get("config") or {}
    context = Context.from_records(list(records))
    on_path = set(Tree.of(records).path(context.leaf)) if context.leaf else set()
    at = _times(records)
    started: dict[str, str] = {}
    finished: dict[str, Record] = {}
    ended: dict[str, Record] = {}
    for record in records:
        data = record.data if isinstance(record.data, dict) else {}
        if record.type == "tool_call.started":
            started.setdefault(data.get("call_id", ""), at[record.id])
        elif record.type == "tool_call.finished":
            call = data.get("call_id", "")
            if call not in finished or record.id in on_path:
                finished[call] = record
        elif record.type == "turn.ended":
            ended[data.get("turn_id", "")] = record
    turns: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    usage: dict[str, Any] = {}
    pending_input: list[str] = []
    calls_total = calls_failed = 0
    final: str | None = None
    for record in records:
        if record.id not in on_path:
            continue
        data = record.data if isinstance(record.data, dict) else {}
        if record.type == "turn.started":
            end = ended.get(data.get("turn_id", ""))
            end_data = end.data if end is not None and isinstance(end.data, dict) else {}
            turns.append(
                {
                    "turn_id": data.get("turn_id"),
                    "input": data.get("input"),
                    "outcome": end_data.get("outcome", "running"),
                    "reason": end_data.get("reason"),
                    "started_at": at[record.id],
                    "ended_at": at[end.id] if end is not None else None,
                }
            )
            if data.get("input"):
                pending_input.append(data["input"])
        elif record.type == "input.consumed":
            message = context.nodes[record.id][1]
            if message and message.get("content"):
                pending_input.append(message["content"])
        elif record.type == "model.responded":
            message = data.get("message") or {}
            tool_calls = []
            for call in message.get("tool_calls") or []:
                result = finished.get(call.get("id", ""))
                rdata = result.data if result is not None and isinstance(result.data, dict) else {}
                begin = started.get(call.get("id", ""))
                done = at[result.id] if result is not None else None
                calls_total += 1
                if rdata.get("ok") is False:
                    calls_failed += 1
                tool_calls.append(
                    {
                        "call_id": call.get("id"),
                        "tool": call.get("name"),
                        "args": call.get("arguments"),
                        "ok": rdata.get("ok"),
                        "result": tool_result_text(rdata["result"]) if "result" in rdata else None,
                        "error": rdata.get("error"),
                        "started_at": begin,
                        "finished_at": done,
                        "duration_ms": _ms(begin, done),
                    }
                )
            raw_usage = data.get("usage")
            step_usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
            for key, value in step_usage.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    usage[key] = usage.get(key, 0) + value
            if message.get("content"):
                final = message["content"]
            steps.append(
                {
                    "index": len(steps),
                    "turn_id": data.get("turn_id"),
                    "step_id": data.get("step_id"),
                    "at": at[record.id],
                    "input": pending_input,
                    "content": message.get("content"),
                    "thinking": message.get("thinking"),
                    "model": message.get("model"),
                    "tool_calls": tool_calls,
                    "usage": step_usage,
                    "stop_reason": data.get("stop_reason"),
                }
            )
            pending_input = []
    return {
        "format": "threadlog.trajectory",
        "version": 1,
        "thread": records[0].thread if records else None,
        "title": first.get("title"),
        "source": config.get("import"),
        "model": config.get("model"),
        "turns": turns,
        "steps": steps,
        "outcome": {
            "status": turns[-1]["outcome"] if turns else "empty",
            "final_message": final,
            "steps": len(steps),
            "tool_calls": calls_total,
            "failed_tool_calls": calls_failed,
        },
        "usage": usage,
    }


def to_trajectory(records: Sequence[Record]) -> str:
    """`trajectory` as JSON indented by two spaces, ending in a newline."""
    return orjson.dumps(trajectory(records), option=orjson.OPT_INDENT_2).decode() + "\n"
