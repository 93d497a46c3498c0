"""The active branch as a provider request sees it: the shared start of the API exports.

`active_conversation` is the model's context (`threadlog.model.context.Context`: the path
from the active leaf to the root, compactions applied, every tool call answered) and the
thread's instructions, tidied the way every provider wants it: consecutive assistant messages
(one response imported block by block, parallel tool calls included) joined into one before
the results are placed after their calls, empty user messages (a turn that
started without input, e.g. an import that began mid-turn) left out, and the calls the branch
ends on answered with the placeholder of a call that never ran (a request may not leave a call
unanswered).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from threadlog.model.context import NO_RESULT, Context, place_results

if TYPE_CHECKING:
    from collections.abc import Sequence

    from threadlog.model.envelope import Record

__all__ = ["active_conversation", "api_name", "instructions_of"]

_INVALID = re.compile(r"[^a-zA-Z0-9_-]")


def api_name(name: Any) -> str:
    """A tool name as the providers accept it (``^[a-zA-Z0-9_-]{1,64}$``): other characters
    become ``_`` (an old Codex ``container.exec`` is sent as ``container_exec``)."""
    text = _INVALID.sub("_", str(name or ""))[:64]
    return text or "tool"


def instructions_of(records: Sequence[Record]) -> str | None:
    """The thread's ``instructions`` setting as its records leave it (None if unset)."""
    value: Any = None
    for record in records:
        data = record.data if isinstance(record.data, dict) else {}
        if record.type == "thread.created":
            value = (data.get("config") or {}).get("instructions")
        elif record.type == "config.changed" and "instructions" in (data.get("changes") or {}):
            value = data["changes"]["instructions"]
    return value if isinstance(value, str) and value else None


def active_conversation(records: Sequence[Record]) -> tuple[str | None, list[dict[str, Any]]]:
    """``(instructions, messages)`` of the active branch (see the module docstring)."""
    context = Context.from_records(list(records))
    merged: list[dict[str, Any]] = []
    # Consecutive assistant messages of the branch, with nothing between them (no result, no
    # user text), are one response written in parts: Claude Code writes each content block of
    # a response as its own line, so parallel tool calls arrive as one line each, and their
    # results after the last of them. They are joined before the results are placed, so the
    # calls stay in one message and the results follow it (as the provider returned them).
    for _, message in context.entries_at(context.leaf):
        role = message["role"]
        if role == "user" and not message.get("content"):
            continue
        if role == "assistant" and merged and merged[-1]["role"] == "assistant":
            last = merged[-1]
            texts = [t for t in (last.get("content"), message.get("content")) if t]
            last["content"] = "\n\n".join(texts) if texts else None
            last["tool_calls"] = list(last.get("tool_calls") or []) + list(
                message.get("tool_calls") or []
            )
            thinking = list(last.get("thinking") or []) + list(message.get("thinking") or [])
            if thinking:
                last["thinking"] = thinking
            continue
        merged.append(dict(message))
    out, pending = place_results(merged)
    # calls the branch ends on were never answered (still running, or cut off): a request
    # must answer every call, so each gets the placeholder an unanswered call gets mid-branch
    out.extend(
        {
            "role": "tool",
            "tool_call_id": call.get("id"),
            "name": call.get("name", ""),
            "content": NO_RESULT,
        }
        for call in pending
    )
    return instructions_of(records), out
