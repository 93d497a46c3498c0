"""What the model sees: provider-neutral chat messages projected from the log (pure).

Messages are plain dicts::

    {"role": "system", "content": str}
    {"role": "user", "content": str}
    {"role": "assistant", "content": str | None, "tool_calls": [{"id", "name", "arguments"}],
     "thinking": [...]}   (optional: provider reasoning blocks, passed back as received)
    {"role": "tool", "tool_call_id": str, "name": str, "content": str}

`Context` folds records into that list as they are appended, so the runtime never re-reads
the log to build a request. Only conversation facts enter it: user input (turn input and
consumed steering), model responses and tool outcomes (results, errors, denials, unknowns).
Bookkeeping (step and provider records, approvals, labels, memory) does not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from threadlog.model.envelope import FORMAT_VERSION
from threadlog.model.refs import is_artifact_ref
from threadlog.model.upcast import upcast

if TYPE_CHECKING:
    from threadlog.model.envelope import Record

__all__ = ["RESUME_NOTE", "Context", "tool_result_text"]

RESUME_NOTE = (
    "The previous turn was interrupted because the process running it stopped. Everything "
    "recorded before that is above, including tool results. Continue the same task; do not "
    "repeat actions whose results are shown."
)


def tool_result_text(result: Any) -> str:
    """A tool result as the text a model receives."""
    if isinstance(result, str):
        return result
    if is_artifact_ref(result):
        ref = result["$artifact"]
        return f"[{ref['size']} bytes stored as artifact {ref['sha256'][:12]}; summary: {ref.get('summary') or ''}]"
    return orjson.dumps(result).decode()


@dataclass(slots=True)
class Context:
    """The conversation as the model sees it, kept up to date record by record."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    _queued: dict[str, str] = field(default_factory=dict)
    _calls: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_records(cls, records: list[Record]) -> Context:
        context = cls()
        for record in records:
            context.apply(record)
        return context

    def apply(self, record: Record) -> None:
        """Fold one record in (records must come in log order)."""
        if record.v != FORMAT_VERSION:
            record = upcast(record)
        data = record.data if isinstance(record.data, dict) else {}
        type_ = record.type
        if type_ == "turn.started":
            if data.get("input_id"):
                self._queued.pop(data["input_id"], None)
            if data.get("resumes"):
                # Not user input: the user said nothing new. The model is told what happened.
                self.messages.append({"role": "system", "content": RESUME_NOTE})
            else:
                self.messages.append({"role": "user", "content": data.get("input", "")})
        elif type_ == "input.queued":
            self._queued[data["input_id"]] = data.get("text", "")
        elif type_ == "input.consumed":
            text = self._queued.pop(data["input_id"], "")
            self.messages.append({"role": "user", "content": text})
        elif type_ == "model.responded":
            message = data.get("message") or {}
            assistant = {
                "role": "assistant",
                "content": message.get("content"),
                "tool_calls": list(message.get("tool_calls") or []),
            }
            if message.get("thinking"):
                # Providers that sign their reasoning (Anthropic) need it sent back verbatim.
                assistant["thinking"] = message["thinking"]
            self.messages.append(assistant)
        elif type_ == "tool_call.proposed":
            self._calls[data["call_id"]] = data.get("tool", "")
        elif type_ == "tool_call.finished":
            content = (
                tool_result_text(data.get("result"))
                if data.get("ok")
                else f"error: {data.get('error') or tool_result_text(data.get('result'))}"
            )
            self._tool(data["call_id"], content)
        elif type_ == "tool_call.denied":
            self._tool(
                data["call_id"],
                f"denied by {data.get('by')}: {data.get('reason') or 'no reason given'}",
            )
        elif type_ == "tool_call.resolved" and data.get("decision") in ("done", "abort"):
            verb = "was completed" if data["decision"] == "done" else "was abandoned"
            self._tool(
                data["call_id"],
                f"the outcome of this call was unknown after a crash; a human confirmed it {verb}"
                + (f": {data['note']}" if data.get("note") else ""),
            )

    def _tool(self, call_id: str, content: str) -> None:
        self.messages.append(
            {
                "role": "tool",
                "tool_call_id": call_id,
                "name": self._calls.get(call_id, ""),
                "content": content,
            }
        )
