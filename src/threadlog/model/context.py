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

from dataclasses import field
from typing import TYPE_CHECKING, Any

import orjson

from threadlog._dataclass import dataclass
from threadlog.model.envelope import FORMAT_VERSION
from threadlog.model.refs import is_artifact_ref, is_escaped, unescape
from threadlog.model.stepcontext import ContextMismatch, resolve
from threadlog.model.tree import ENTRY_TYPES
from threadlog.model.upcast import upcast

if TYPE_CHECKING:
    from threadlog.model.envelope import Record

__all__ = ["BRANCH_PREFIX", "RESUME_NOTE", "SUMMARY_PREFIX", "Context", "tool_result_text"]

SUMMARY_PREFIX = "Summary of the earlier conversation (compacted; the full log is kept):\n"
BRANCH_PREFIX = "An abandoned branch of this conversation, summarized:\n"

RESUME_NOTE = (
    "The previous turn was interrupted because the process running it stopped. Everything "
    "recorded before that is above, including tool results. Continue the same task; do not "
    "repeat actions whose results are shown."
)


def tool_result_text(result: Any) -> str:
    """A tool result as the text a model receives.

    A real reference becomes a placeholder naming the blob; a result that merely looked like
    one was stored escaped (`threadlog.model.refs`) and is shown as the data it is.
    """
    if isinstance(result, str):
        return result
    if is_escaped(result):
        return orjson.dumps(unescape(result)).decode()
    if is_artifact_ref(result):
        ref = result["$artifact"]
        return f"[{ref['size']} bytes stored as artifact {ref['sha256'][:12]}; summary: {ref.get('summary') or ''}]"
    return orjson.dumps(result).decode()


@dataclass(slots=True)
class Context:
    """The conversation as the model sees it: the path from the active leaf to the root.

    Every record is kept as a node ``id → (parent, message or None, compaction or None)``;
    `messages` walks from the leaf to the root, and is kept up to date incrementally while the
    conversation grows along one branch (a move of the leaf or a compaction recomputes it).
    A ``compaction`` on the path replaces its ``last_entry`` and everything before it by its
    summary; the log itself keeps every original record.
    """

    nodes: dict[str, tuple[str | None, dict[str, Any] | None, dict[str, Any] | None]] = field(
        default_factory=dict
    )
    leaf: str | None = None
    _queued: dict[str, str] = field(default_factory=dict)
    _calls: dict[str, str] = field(default_factory=dict)
    _path: list[dict[str, Any]] | None = None
    _pending: list[dict[str, Any]] = field(default_factory=list)
    """Tool calls of the cached path's last assistant message not answered yet."""
    step: tuple[str, dict[str, Any]] | None = None
    """The last step's ``step.started`` id and the exact context it sent: the base the next
    step records its context against (`threadlog.model.stepcontext`); None before the first
    step, or after one whose context is unknown (the next step then records it whole)."""
    compacted: str | None = None
    """The last ``compaction`` applied since that step (the next step names it)."""

    @classmethod
    def from_records(cls, records: list[Record]) -> Context:
        context = cls()
        for record in records:
            context.apply(record)
        return context

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The model-visible messages, root first."""
        if self._path is None:
            self._path = self.messages_at(self.leaf)
        return self._path

    def messages_at(self, leaf: str | None) -> list[dict[str, Any]]:
        """The messages of the branch ending at ``leaf``.

        Every tool call of an assistant message is answered before the next message: a call
        that never ran (a crash or a cancellation between the response and its proposal) gets
        a placeholder result, since providers refuse a conversation with an unanswered call.
        """
        out, self._pending = place_results([message for _, message in self.entries_at(leaf)])
        return out

    def entries_at(self, leaf: str | None) -> list[tuple[str, dict[str, Any]]]:
        """``(entry id, message)`` along the branch ending at ``leaf``, root first. A
        compaction's summary stands under the id of the last entry it replaces."""
        out: list[tuple[str, dict[str, Any]]] = []
        cut: dict[str, Any] | None = None
        seen: set[str] = set()
        node = leaf
        while node is not None and node not in seen:
            entry = self.nodes.get(node)
            if entry is None:
                break
            seen.add(node)
            parent, message, compaction = entry
            if compaction is not None and cut is None:
                cut = compaction
            if cut is not None and node == cut["last_entry"]:
                out.append((node, {"role": "system", "content": SUMMARY_PREFIX + cut["summary"]}))
                break
            if message is not None:
                out.append((node, message))
            node = parent
        out.reverse()
        return out

    def apply(self, record: Record) -> None:
        """Fold one record in (records must come in log order)."""
        if record.v != FORMAT_VERSION:
            record = upcast(record)
        data = record.data if isinstance(record.data, dict) else {}
        type_ = record.type
        message = self._message(type_, data)
        compaction = None
        if type_ == "compaction":
            compaction = {
                "last_entry": data.get("last_entry"),
                "summary": str(data.get("summary", "")),
            }
        self.nodes[record.id] = (record.parent, message, compaction)
        if type_ == "step.started":
            self._step(record.id, data)
        elif compaction is not None:
            self.compacted = record.id
        if type_ == "leaf.moved":
            self.leaf = data.get("to")
            self._path = None
        elif type_ in ENTRY_TYPES:
            if self._path is not None and record.parent == self.leaf and compaction is None:
                if message is not None:
                    late = message["role"] == "tool" and all(
                        call.get("id") != message.get("tool_call_id") for call in self._pending
                    )
                    if late:
                        self._path = None  # a result for an earlier call: recompute the order
                    else:
                        self._pending = _extend(self._path, self._pending, message)
            else:
                self._path = None
            self.leaf = record.id

    def sent(self, record_id: str, context: dict[str, Any]) -> None:
        """The runtime's own objects for the context step ``record_id`` sent (equal to the
        one the fold rebuilt from the record, which a store may have copied): the next step's
        delta then finds the unchanged messages by identity, at no cost per message."""
        if self.step is not None and self.step[0] == record_id:
            self.step = (record_id, context)

    def _step(self, record_id: str, data: dict[str, Any]) -> None:
        last = self.step

        def base_of(ref: Any) -> dict[str, Any] | None:
            return last[1] if last is not None and last[0] == ref else None

        try:
            context = resolve(data, base_of, str(data.get("step_id")))
        except ContextMismatch:
            context = None  # not a base (a consumer that asks for it gets the error)
        self.step = None if context is None else (record_id, context)
        self.compacted = None

    def _message(self, type_: str, data: dict[str, Any]) -> dict[str, Any] | None:
        if type_ == "turn.started":
            if data.get("input_id"):
                self._queued.pop(data["input_id"], None)
            if data.get("resumes"):
                # Not user input: the user said nothing new. The model is told what happened.
                return {"role": "system", "content": RESUME_NOTE}
            return {"role": "user", "content": data.get("input", "")}
        if type_ == "input.queued":
            self._queued[data["input_id"]] = data.get("text", "")
        elif type_ == "input.consumed":
            return {"role": "user", "content": self._queued.pop(data["input_id"], "")}
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
            return assistant
        elif type_ == "tool_call.proposed":
            self._calls[data["call_id"]] = data.get("tool", "")
        elif type_ == "tool_call.finished":
            content = (
                tool_result_text(data.get("result"))
                if data.get("ok")
                else f"error: {data.get('error') or tool_result_text(data.get('result'))}"
            )
            return self._tool(data["call_id"], content)
        elif type_ == "tool_call.denied":
            return self._tool(
                data["call_id"],
                f"denied by {data.get('by')}: {data.get('reason') or 'no reason given'}",
            )
        elif type_ == "tool_call.resolved" and data.get("decision") in ("done", "abort"):
            verb = "was completed" if data["decision"] == "done" else "was abandoned"
            return self._tool(
                data["call_id"],
                f"the outcome of this call was unknown after a crash; a human confirmed it {verb}"
                + (f": {data['note']}" if data.get("note") else ""),
            )
        elif type_ == "tool_call.cancelled":
            return self._tool(
                data["call_id"], f"cancelled before it ran: {data.get('reason') or 'cancelled'}"
            )
        elif type_ == "branch.summarized":
            return {"role": "system", "content": BRANCH_PREFIX + str(data.get("summary", ""))}
        return None

    def _tool(self, call_id: str, content: str) -> dict[str, Any]:
        return {
            "role": "tool",
            "tool_call_id": call_id,
            "name": self._calls.get(call_id, ""),
            "content": content,
        }


NO_RESULT = "(no result: this call never ran, or its outcome was never recorded)"


def place_results(
    messages: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``messages`` (a branch's, in log order) with each tool result right after the call it
    answers, and a placeholder for a call answered by nothing before the next message; then
    the calls of the last assistant message that nothing answers (no placeholder for them)."""
    # Each result goes right after the call it answers, even when it came later in the
    # log (a call approved after a cancel, or re-run after a crash): providers require it.
    results = {m.get("tool_call_id"): m for m in messages if m["role"] == "tool"}
    out: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "tool":
            continue  # placed with its call (or dropped: a result whose call is not on
            # this branch cannot be shown to a provider)
        if pending:
            out.extend(_placeholder(call) for call in pending)
            pending = []
        out.append(message)
        if message["role"] == "assistant":
            for call in message.get("tool_calls") or []:
                result = results.pop(call.get("id"), None)
                if result is not None:
                    out.append(result)
                else:
                    pending.append(call)
    return out, pending


def _extend(
    out: list[dict[str, Any]], pending: list[dict[str, Any]], message: dict[str, Any]
) -> list[dict[str, Any]]:
    """Append ``message``, answering the pending calls first if it is not their result."""
    if message["role"] == "tool":
        answered = message.get("tool_call_id")
        pending = [call for call in pending if call.get("id") != answered]
    elif pending:
        out.extend(_placeholder(call) for call in pending)
        pending = []
    out.append(message)
    if message["role"] == "assistant":
        pending = list(message.get("tool_calls") or [])
    return pending


def _placeholder(call: dict[str, Any]) -> dict[str, Any]:
    """The result shown for a call that never got one."""
    return {
        "role": "tool",
        "tool_call_id": call.get("id"),
        "name": call.get("name", ""),
        "content": NO_RESULT,
    }
