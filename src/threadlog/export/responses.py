"""The ``responses`` export: the active branch as Responses API input items.

The output is the JSON array a ``POST /v1/responses`` request takes as ``input``: ``message``
items (``role`` system / user with ``input_text`` content, assistant with ``output_text``),
one ``function_call`` item per tool call (``call_id``, ``name``, JSON-string ``arguments``)
and its ``function_call_output`` (``call_id``, ``output``) after it. Reasoning items are left
out: the API accepts back only the encrypted reasoning of its own responses, by id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from threadlog.export._active import active_conversation, api_name

if TYPE_CHECKING:
    from collections.abc import Sequence

    from threadlog.model.envelope import Record

__all__ = ["responses_input", "to_responses"]


def _message(role: str, kind: str, text: str) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def responses_input(records: Sequence[Record]) -> list[dict[str, Any]]:
    """The Responses API input items of the thread's active branch."""
    instructions, conversation = active_conversation(records)
    out: list[dict[str, Any]] = []
    if instructions:
        out.append(_message("system", "input_text", instructions))
    for message in conversation:
        role = message["role"]
        if role == "assistant":
            if message.get("content"):
                out.append(_message("assistant", "output_text", message["content"]))
            for call in message.get("tool_calls") or []:
                out.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": api_name(call["name"]),
                        "arguments": orjson.dumps(call.get("arguments") or {}).decode(),
                    }
                )
        elif role == "tool":
            out.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": message.get("content") or "",
                }
            )
        elif message.get("content"):
            out.append(_message(role, "input_text", message["content"]))
    return out


def to_responses(records: Sequence[Record]) -> str:
    """`responses_input` as a JSON array indented by two spaces, ending in a newline."""
    return orjson.dumps(responses_input(records), option=orjson.OPT_INDENT_2).decode() + "\n"
