"""The ``openai`` export: the active branch as a Chat Completions ``messages`` list.

The output is the JSON array a ``POST /v1/chat/completions`` request takes as ``messages``,
ready to post as is: the thread's instructions and compaction summaries as ``system``
messages, user text, assistant messages with ``tool_calls`` (``type: function``, the
arguments a JSON *string*), and one ``tool`` message per call with its ``tool_call_id``,
right after the assistant message that made the call. Reasoning (thinking blocks) is left out:
Chat Completions has no field for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from threadlog.export._active import active_conversation, api_name

if TYPE_CHECKING:
    from collections.abc import Sequence

    from threadlog.model.envelope import Record

__all__ = ["openai_messages", "to_openai"]


def openai_messages(records: Sequence[Record]) -> list[dict[str, Any]]:
    """The Chat Completions messages of the thread's active branch."""
    instructions, conversation = active_conversation(records)
    out: list[dict[str, Any]] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    for message in conversation:
        role = message["role"]
        if role == "assistant":
            calls = message.get("tool_calls") or []
            converted: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
            if calls:
                converted["tool_calls"] = [
                    {
                        "id": call["id"],
                        "type": "function",
                        "function": {
                            "name": api_name(call["name"]),
                            "arguments": orjson.dumps(call.get("arguments") or {}).decode(),
                        },
                    }
                    for call in calls
                ]
            elif converted["content"] is None:
                converted["content"] = ""
            out.append(converted)
        elif role == "tool":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": message["tool_call_id"],
                    "content": message.get("content") or "",
                }
            )
        else:
            out.append({"role": role, "content": message.get("content") or ""})
    return out


def to_openai(records: Sequence[Record]) -> str:
    """`openai_messages` as a JSON array indented by two spaces, ending in a newline."""
    return orjson.dumps(openai_messages(records), option=orjson.OPT_INDENT_2).decode() + "\n"
