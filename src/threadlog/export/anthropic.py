"""The ``anthropic`` export: the active branch as a Messages API request body.

The output is ``{"system": str, "messages": [...]}``, the two fields a ``POST /v1/messages``
request needs beside ``model`` and ``max_tokens``: the instructions and compaction summaries
joined into ``system`` (left out when there are none); user and assistant messages strictly
alternating (consecutive ones of a role merged), each a list of content blocks: ``text``,
``thinking`` / ``redacted_thinking`` (only those carrying the provider's signature, which the
API requires back verbatim), ``tool_use`` (``id``, ``name``, ``input`` object) and, in the user
message that follows, ``tool_result`` (``tool_use_id``, ``content``, ``is_error``). The
conversation starts with a user message: one whose first kept message is the model's gets a
short placeholder first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from threadlog.export._active import active_conversation, api_name

if TYPE_CHECKING:
    from collections.abc import Sequence

    from threadlog.model.envelope import Record

__all__ = ["CONTINUED", "anthropic_request", "to_anthropic"]

CONTINUED = "(the conversation continues)"
"""The user text put first when a branch's first message is the model's."""


def _signed(block: Any) -> bool:
    """A reasoning block the Messages API accepts back."""
    if not isinstance(block, dict):
        return False
    if block.get("type") == "thinking":
        return isinstance(block.get("thinking"), str) and isinstance(block.get("signature"), str)
    return block.get("type") == "redacted_thinking" and isinstance(block.get("data"), str)


def anthropic_request(records: Sequence[Record]) -> dict[str, Any]:
    """``{"system", "messages"}`` of the thread's active branch (no ``system`` without one)."""
    instructions, conversation = active_conversation(records)
    failed = {
        r.data.get("call_id")
        for r in records
        if r.type == "tool_call.finished" and isinstance(r.data, dict) and r.data.get("ok") is False
    }
    system: list[str] = [instructions] if instructions else []
    out: list[dict[str, Any]] = []
    for message in conversation:
        role = message["role"]
        blocks: list[dict[str, Any]] = []
        if role == "system":
            if message.get("content"):
                system.append(message["content"])
            continue
        if role == "assistant":
            blocks.extend(
                {k: v for k, v in b.items() if k in ("type", "thinking", "signature", "data")}
                for b in message.get("thinking") or []
                if _signed(b)
            )
            if message.get("content"):
                blocks.append({"type": "text", "text": message["content"]})
            blocks.extend(
                {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": api_name(call["name"]),
                    "input": call.get("arguments") or {},
                }
                for call in message.get("tool_calls") or []
            )
        elif role == "tool":
            role = "user"
            content = message.get("content") or ""
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message["tool_call_id"]}
            if message["tool_call_id"] in failed and content.startswith("error: "):
                block["content"], block["is_error"] = content[len("error: ") :], True
            else:
                block["content"] = content
            blocks.append(block)
        elif message.get("content"):
            blocks.append({"type": "text", "text": message["content"]})
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    if out and out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": [{"type": "text", "text": CONTINUED}]})
    body: dict[str, Any] = {"messages": out}
    if system:  # no empty system prompt: the API wants none rather than ""
        body = {"system": "\n\n".join(system), **body}
    return body


def to_anthropic(records: Sequence[Record]) -> str:
    """`anthropic_request` as JSON indented by two spaces, ending in a newline."""
    return orjson.dumps(anthropic_request(records), option=orjson.OPT_INDENT_2).decode() + "\n"
