"""Codex sessions: ``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``.

The format (a *rollout*, as the Codex CLI writes it; our fixtures are written from its public
source): one ``RolloutLine`` a line, ``{"timestamp", "type", "payload"}`` (newer files add an
``ordinal``), where ``type`` is

* ``session_meta``: the session's ``id``, ``cwd``, ``cli_version``, ``instructions``, and for a
  fork ``forked_from_id``, for a sub-agent ``source.subagent.thread_spawn.parent_thread_id``;
* ``turn_context``: the settings of the turn that follows (``model``, ``cwd``, ``effort``,
  ``approval_policy``, ``sandbox_policy``);
* ``response_item``: what the model saw or said, a Responses API item: ``message`` (``role``
  user / assistant / developer, ``content`` of ``input_text`` / ``output_text``),
  ``reasoning`` (``summary``, ``encrypted_content``), ``function_call`` (``name``, JSON-string
  ``arguments``, ``call_id``), ``function_call_output`` (``call_id``, ``output``),
  ``custom_tool_call`` / ``custom_tool_call_output``, ``local_shell_call``, and in newer
  files ``tool_search_call`` / ``tool_search_output`` (a search for tools to load: a call
  and its result when Codex runs it, ``call_id`` set), ``agent_message`` (the model's copy
  of an inter-agent message), ``context_compaction``, ``additional_tools``…; an assistant
  message may say its ``phase`` (commentary or final answer), a line may carry harness
  ``metadata`` beside its payload;
* ``event_msg``: what the UI was told: ``task_started`` / ``task_complete`` (turn
  boundaries), ``token_count`` (``info.last_token_usage``: the last model call's usage),
  ``user_message`` / ``agent_message`` / ``agent_reasoning`` /
  ``agent_reasoning_raw_content`` (the same text as the response items), ``turn_aborted``,
  ``thread_rolled_back`` (the user took back the last ``num_turns`` turns)…;
* ``compacted``: a compaction: its summary ``message`` (written by the model, when Codex
  compacts the history itself), and in newer files ``replacement_history``, the history Codex
  kept in place of the conversation (the user's last messages, and the summary as a user
  message, or the provider's encrypted ``compaction`` item when the provider compacted it,
  ``message`` then empty);
* in newer files (multi-agent Codex, 0.14x): ``inter_agent_communication``, a message another
  agent sent this one (``author``, ``recipient``, ``content``, ``trigger_turn``), and
  bookkeeping (`BOOKKEEPING`): ``world_state`` (every turn), ``token_usage_record``,
  ``security_risk_score``, ``retained_context``, ``realtime_item``,
  ``inter_agent_communication_metadata``.

Files written before the wrapper existed hold the session meta as a bare first line
(``{"id", "timestamp", "instructions"}``) and bare response items after it; they are read too.

Mapping: a Codex session has no tree, so each item continues the previous one. Consecutive
assistant-side items (reasoning, assistant text, tool calls) up to the ``token_count`` that
follows them are one model response with that usage; a user message starts a turn (or joins
the running one as steering when the file marks turns with ``task_started``), user messages
that carry environment context or instructions (``<environment_context>``…) are kept as
notes, not as prompts; ``task_complete`` / ``turn_aborted`` end the turn; ``turn_context``
is a ``config.changed``; ``compacted`` a ``compaction`` of everything before it, whose
summary is what the model was given in its place (`_compacted`). An inter-agent message is
input, as a user's is. ``thread_rolled_back`` takes the conversation back to before the
last ``num_turns`` user-turn boundaries (a user's message, an inter-agent message: what
Codex drops from its history), so what follows is a branch beside the turns taken back. The
``event_msg`` items that repeat response items are not stored twice; every other line that is not conversation is kept
as a note. Those lines (events, the session meta, context and developer messages, the known
response items that are not conversation) are counted by type in the report
(`FileReport.bookkeeping`), not reported as problems: only a rollout item or a response item
of a type this importer does not know is (``unknown_type``).
"""

from __future__ import annotations

import os
from dataclasses import field
from typing import Any

import orjson

from threadlog._dataclass import dataclass
from threadlog.importers._core import FileContext, Identity, Line
from threadlog.importers._emit import Call
from threadlog.importers._values import as_dict, as_str

__all__ = ["Codex"]

CONTEXT_PREFIXES = (
    "<environment_context>",
    "<user_instructions>",
    "# AGENTS.md instructions",
    "<permissions instructions>",
)
ASSISTANT_ITEMS = frozenset(
    {"reasoning", "function_call", "custom_tool_call", "local_shell_call", "tool_search_call"}
)
OUTPUT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output"})
DUPLICATE_EVENTS = frozenset(
    {"user_message", "agent_message", "agent_reasoning", "agent_reasoning_raw_content"}
)
KNOWN_ITEMS = frozenset(
    {
        "web_search_call",
        "ghost_snapshot",
        "compaction",
        "compaction_summary",
        "context_compaction",
        "compaction_trigger",
        "image_generation_call",
        # the tools a tool search loaded, sent to the model as an item of their own
        "additional_tools",
        # the model's copy of an ``inter_agent_communication`` line (imported from that line)
        "agent_message",
        # a tool search the provider ran itself (no ``call_id``: nothing of ours to finish)
        "tool_search_call",
        "tool_search_output",
    }
)
BOOKKEEPING = frozenset(
    {
        # rollout items newer Codex versions write beside the conversation: the world-state
        # baseline the next turn's context is diffed against (every turn), token usage
        # snapshots, retained-context and risk-score bookkeeping, realtime presentation
        # facts, and whether an inter-agent message started a turn
        "world_state",
        "token_usage_record",
        "retained_context",
        "security_risk_score",
        "realtime_item",
        "inter_agent_communication_metadata",
    }
)
SETTINGS = ("model", "cwd", "effort", "approval_policy", "sandbox_policy", "summary")
COMPACTION_ITEMS = frozenset({"compaction", "compaction_summary", "context_compaction"})
BOUNDARIES = 256
"""The most recent user-turn boundaries a parser keeps (and saves) for ``thread_rolled_back``."""
ENCRYPTED = (
    "[the provider's summary of the earlier conversation, encrypted: readable only by the "
    "provider, kept in the compaction's note]"
)


def _texts(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for item in content if isinstance(content, list) else []:
        if isinstance(item, dict):
            if item.get("type") in ("input_text", "output_text", "text"):
                parts.append(str(item.get("text", "")))
            elif item.get("type") == "input_image":
                parts.append("[image]")
    return "\n".join(parts)


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return {"_raw": raw}
        return value if isinstance(value, dict) else {"_value": value}
    return {"_value": raw}


def _compacted(payload: dict[str, Any]) -> str:
    """A ``compacted`` line's summary: what Codex gave the model in place of the history
    before it. Without a ``replacement_history``, Codex rebuilds that from the user's messages
    and ``message``, the summary (as this importer keeps the messages, the summary is
    ``message``). With one, the model was given that history: its messages (without the
    environment context and developer instructions, which are notes on import, as elsewhere)
    and, for the provider's encrypted ``compaction`` item, a placeholder; ``message`` (empty
    when the provider compacted) is added if the history does not hold it."""
    message = str(payload.get("message") or "")
    history = payload.get("replacement_history")
    if not isinstance(history, list):
        return message
    parts: list[str] = []
    texts: set[str] = set()
    for item in history:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            role = as_str(item.get("role")) or "user"
            text = _texts(item.get("content")).strip()
            if not text or role in ("developer", "system") or text.startswith(CONTEXT_PREFIXES):
                continue
            texts.add(text)
            parts.append(f"{role}: {text}")
        elif kind in COMPACTION_ITEMS:
            parts.append(ENCRYPTED)
        elif kind == "agent_message":
            text = _texts(item.get("content")).strip()
            parts.append(f"{as_str(item.get('author')) or 'agent'}: {text or '[encrypted]'}")
        elif (
            kind in OUTPUT_ITEMS
            or kind in ASSISTANT_ITEMS
            or kind in ("web_search_call", "tool_search_output")
        ):
            parts.append(f"[{kind}]")
        # (a ghost_snapshot is /undo's bookkeeping, never sent to the model)
    if message.strip() and message.strip() not in texts:
        parts.insert(0, message.strip())
    return "\n\n".join(parts) or "Conversation compacted (Codex kept no message)"


def _inter_agent_text(message: dict[str, Any]) -> str:
    """An ``inter_agent_communication``'s text, naming who sent it to whom (the model is
    told; a reader of the thread would otherwise take it for the user's words)."""
    author = as_str(message.get("author")) or "an agent"
    recipient = as_str(message.get("recipient")) or "this agent"
    content = str(message.get("content") or "")
    if not content.strip() and message.get("encrypted_content"):
        content = "[encrypted: readable only by the provider]"
    return f"Message from {author} to {recipient}:\n{content}"


def _output(raw: Any) -> tuple[str, bool]:
    """A tool output's text and whether it is an error."""
    if isinstance(raw, str):
        return raw, False
    if isinstance(raw, dict):
        content = raw.get("content")
        text = content if isinstance(content, str) else _texts(content)
        return text, raw.get("success") is False
    return _texts(raw), False


class Codex:
    """The ``codex`` source format."""

    name = "codex"

    def matches(self, path: str) -> bool:
        name = os.path.basename(path)
        if name.startswith("rollout-") and name.endswith(".jsonl.zst"):
            # an archived rollout Codex compressed (read through a zstd decoder, or reported
            # when there is none), unless its plain sibling is there, which Codex reads first
            return not os.path.exists(path[: -len(".zst")])
        if not name.endswith(".jsonl"):
            return False
        if name.startswith("rollout-"):
            return True
        try:  # other names (``<id>.jsonl``): a rollout starts with its session meta
            with open(path, "rb") as f:
                return b'"session_meta"' in f.read(512)
        except OSError:
            return False

    def identify(self, path: str, lines: list[Line]) -> Identity:
        meta: dict[str, Any] = {}
        first = lines[0].obj if lines and isinstance(lines[0].obj, dict) else {}
        if first.get("type") == "session_meta" and isinstance(first.get("payload"), dict):
            meta = first["payload"]
            version = "rollout"
        elif "id" in first and "type" not in first:
            meta, version = first, "legacy"
        else:
            version = "unknown"
        session = meta.get("id") if isinstance(meta.get("id"), str) else None
        if session is None:
            session = os.path.basename(path)[: -len(".jsonl")]
        lineage = None
        source = meta.get("source")
        spawn = source.get("subagent") if isinstance(source, dict) else None
        spawn = spawn.get("thread_spawn") if isinstance(spawn, dict) else None
        if isinstance(spawn, dict) and isinstance(spawn.get("parent_thread_id"), str):
            lineage = {"key": f"codex:{spawn['parent_thread_id']}", "kind": "subagent"}
        elif isinstance(meta.get("forked_from_id"), str):
            lineage = {"key": f"codex:{meta['forked_from_id']}", "kind": "fork"}
        extra = {"layout": version}
        if isinstance(meta.get("originator"), str):
            extra["originator"] = meta["originator"]
        title = None
        for line in lines:
            obj = as_dict(line.obj)
            payload = as_dict(obj.get("payload")) or obj
            if payload.get("type") == "message" and payload.get("role") == "user":
                text = _texts(payload.get("content")).strip()
                if text and not text.startswith(CONTEXT_PREFIXES):
                    title = text.splitlines()[0][:80]
                    break
        return Identity(
            key=f"codex:{session}",
            session=session,
            version=meta.get("cli_version")
            if isinstance(meta.get("cli_version"), str)
            else version,
            cwd=meta.get("cwd") if isinstance(meta.get("cwd"), str) else None,
            title=title,
            lineage=lineage,
            extra=extra,
        )

    def parser(self, ctx: FileContext, saved: dict[str, Any] | None) -> _Parser:
        saved = saved or {}
        boundaries = saved.get("boundaries")
        return _Parser(
            ctx,
            explicit_turns=bool(saved.get("explicit_turns")),
            model=saved.get("model") if isinstance(saved.get("model"), str) else None,
            settings=dict(as_dict(saved.get("settings"))),
            boundaries=[b for b in boundaries if isinstance(b, str)]
            if isinstance(boundaries, list)
            else [],
        )


@dataclass(slots=True)
class _Pending:
    """Assistant-side items of one model response, not written yet."""

    key: str
    ts: str | None
    line: int
    """The source line of its first item."""
    texts: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    thinking: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class _Parser:
    ctx: FileContext
    explicit_turns: bool = False
    model: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    """The settings the last ``turn_context`` left."""
    restart: bool = False
    pending: _Pending | None = None
    held: int | None = None
    """The line a response still being written starts at, when the file ends inside it
    (`finish`): the import stops before it and the next one reads it again."""
    boundaries: list[str] = field(default_factory=list)
    """For each user-turn boundary (a user's message, an inter-agent message), the record it
    continued: where a ``thread_rolled_back`` that drops it takes the conversation back to
    (the last `BOUNDARIES` of them)."""
    cut: str | None = None
    """Where the last ``thread_rolled_back`` took the conversation, until something follows
    it: the active leaf when the import ends there (`finish`)."""

    def feed(self, line: Line) -> None:
        obj = line.obj
        emit = self.ctx.emit
        if not isinstance(obj, dict):
            self.ctx.report.problem(line.no, "malformed", "a line that is not a JSON object")
            self._flush()
            emit.note(f"L{line.no}", emit.parent_of(None, previous=True), "malformed", obj)
            return
        ordinal = obj.get("ordinal")
        key = f"o{ordinal}" if isinstance(ordinal, int) else f"L{line.no}"
        ts = obj.get("timestamp") if isinstance(obj.get("timestamp"), str) else None
        kind = as_str(obj.get("type"))
        payload = obj.get("payload")
        if "payload" not in obj:  # a legacy line: a bare response item, or the meta line
            if line.no == 1 or "record_type" in obj or kind is None:
                self._flush()
                self.ctx.report.count("legacy")
                emit.note(key, emit.parent_of(None, previous=True), "legacy", obj, ts)
                return
            kind, payload = "response_item", obj
        if not isinstance(payload, dict):
            payload = {}
        if kind == "response_item":
            self._item(key, payload, ts, line)
        elif kind == "event_msg":
            self._event(key, payload, ts)
        elif kind == "turn_context":
            self._flush()
            settings = {k: payload[k] for k in SETTINGS if payload.get(k) is not None}
            if isinstance(settings.get("effort"), str):
                settings["thinking"] = settings.pop("effort")
            if isinstance(payload.get("model"), str):
                self.model = payload["model"]
            # every turn repeats its context: only what changed is a config.changed
            changes = {k: v for k, v in settings.items() if self.settings.get(k) != v}
            self.settings.update(changes)
            if changes:
                self.cut = None
                emit.config(key, emit.parent_of(None, previous=True), changes, ts)
        elif kind == "compacted":
            self._flush()
            self.cut = None
            up = emit.parent_of(None, previous=True)
            emit.compaction(key, up, summary=_compacted(payload), last_entry=up, ts=ts)
            if payload.get("replacement_history"):
                # the kept history as Codex wrote it (its encrypted item, its /undo snapshots)
                emit.note(f"{key}~history", emit.anchor(key), "compacted", payload, ts)
        elif kind == "session_meta":
            self._flush()
            self.ctx.report.count("session_meta")
            emit.note(key, emit.parent_of(None, previous=True), "session_meta", payload, ts)
        elif kind == "inter_agent_communication":
            self._flush()
            self._inter_agent(key, payload, ts)
        elif kind in BOOKKEEPING:
            # (not a response's end: its items may go on after it, and its usage follows)
            self.ctx.report.count(str(kind))
            emit.note(key, emit.parent_of(None, previous=True), str(kind), payload, ts)
        else:
            self.ctx.report.problem(
                line.no, "unknown_type", f"rollout item {kind!r} kept as a note"
            )
            self._flush()
            emit.note(key, emit.parent_of(None, previous=True), str(kind), obj, ts)

    def _item(self, key: str, item: dict[str, Any], ts: str | None, line: Line) -> None:
        emit = self.ctx.emit
        kind = as_str(item.get("type"))
        role = as_str(item.get("role"))
        if kind == "message" and role == "assistant":
            self._open(key, ts, line).texts.append(_texts(item.get("content")))
        elif kind == "reasoning":
            self._open(key, ts, line).thinking.append(item)
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            call_id = item.get("call_id") or item.get("id")
            if kind == "function_call":
                args = _arguments(item.get("arguments"))
            elif kind == "custom_tool_call":
                args = {"input": item.get("input")}
            else:
                action = item.get("action")
                args = action if isinstance(action, dict) else {"action": action}
            name = as_str(item.get("name")) or "local_shell"
            self._open(key, ts, line).calls.append(Call(str(call_id), name, args))
        elif kind == "tool_search_call" and isinstance(item.get("call_id"), str):
            # a tool search Codex runs: a call like the others, its result the tools it found
            search = as_dict(item.get("arguments"))
            self._open(key, ts, line).calls.append(Call(item["call_id"], "tool_search", search))
        elif kind == "tool_search_output" and isinstance(item.get("call_id"), str):
            self._flush()
            self.cut = None
            text = orjson.dumps(item.get("tools") or []).decode()
            error = item.get("status") not in (None, "completed")
            up = emit.parent_of(None, previous=True)
            if not emit.tool_results(key, up, [(item["call_id"], text, error)], ts):
                emit.note(key, up, "unwritten_output", item, ts)
        elif kind in OUTPUT_ITEMS:
            self._flush()
            self.cut = None
            text, error = _output(item.get("output"))
            up = emit.parent_of(None, previous=True)
            if not emit.tool_results(key, up, [(str(item.get("call_id")), text, error)], ts):
                emit.note(key, up, "unwritten_output", item, ts)
        elif kind == "message" and role == "user":
            self._flush()
            text = _texts(item.get("content"))
            up = emit.parent_of(None, previous=True)
            if text.lstrip().startswith(CONTEXT_PREFIXES):
                self.ctx.report.count("response_item:context")
                emit.note(key, up, "context", item, ts)
                return
            self._boundary(up)
            if self.explicit_turns and emit.active_turn is not None:
                emit.steer(key, up, text, ts)
            else:
                emit.user(key, up, text, ts)
        else:
            if kind in KNOWN_ITEMS:
                self.ctx.report.count(f"response_item:{kind}")
            elif kind == "message" and role in ("developer", "system"):
                self.ctx.report.count(f"response_item:message:{role}")
            else:
                self.ctx.report.problem(
                    line.no, "unknown_type", f"response item {kind!r} kept as a note"
                )
            self._flush()
            emit.note(key, emit.parent_of(None, previous=True), f"response_item:{kind}", item, ts)

    def _event(self, key: str, event: dict[str, Any], ts: str | None) -> None:
        emit = self.ctx.emit
        kind = as_str(event.get("type"))
        if kind in DUPLICATE_EVENTS:
            self.ctx.report.count(f"event_msg:{kind}")
            return  # the same text as the response items, which are imported
        if kind == "token_count":
            info = as_dict(event.get("info"))
            usage = info.get("last_token_usage")
            if self.pending is not None and isinstance(usage, dict):
                self._flush(usage)
                return
        self._flush()
        up = emit.parent_of(None, previous=True)
        if kind in ("task_complete", "turn_complete"):
            emit.end_turn(key, up, "completed", ts=ts)
        elif kind == "turn_aborted":
            reason = event.get("reason")
            emit.end_turn(key, up, "aborted", str(reason) if reason else None, ts=ts)
        elif kind == "thread_rolled_back":
            # the user took back the last ``num_turns`` turns: what follows continues from
            # before them, a branch beside the turns taken back (which stay in the thread)
            self.ctx.report.count(f"event_msg:{kind}")
            cut = self._roll_back(event.get("num_turns"))
            emit.note(key, cut or up, f"event:{kind}", event, ts)
            if cut is not None:
                self.cut = cut
        else:
            # what the UI was told: the conversation is in the response items, so every other
            # event (of the many Codex has, and adds) is a note, counted, never a problem
            if kind in ("task_started", "turn_started"):
                self.explicit_turns = True
            self.ctx.report.count(f"event_msg:{kind}")
            emit.note(key, up, f"event:{kind}", event, ts)

    def _inter_agent(self, key: str, message: dict[str, Any], ts: str | None) -> None:
        """A message another agent sent this one (Codex's multi-agent threads): what the model
        got in place of a user's prompt, so it is imported as one, and Codex counts it as a
        turn boundary. One that does not ``trigger_turn`` joins the running turn."""
        emit = self.ctx.emit
        up = emit.parent_of(None, previous=True)
        text = _inter_agent_text(message)
        self._boundary(up)
        if not message.get("trigger_turn") and emit.active_turn is not None:
            emit.steer(key, up, text, ts)
        else:
            emit.user(key, up, text, ts)

    def _boundary(self, up: str) -> None:
        """A user-turn boundary begins after record ``up``."""
        self.cut = None
        self.boundaries.append(up)
        if len(self.boundaries) > 2 * BOUNDARIES:
            del self.boundaries[:-BOUNDARIES]

    def _roll_back(self, turns: Any) -> str | None:
        """Where dropping the last ``turns`` user turns takes the conversation (the record
        before the first of them), as Codex rolls back its history: every user turn when
        there are fewer, and nowhere (None) when there are none or ``turns`` is not a
        positive count."""
        if isinstance(turns, bool) or not isinstance(turns, int) or turns <= 0:
            return None
        if not self.boundaries:
            return None
        at = max(0, len(self.boundaries) - turns)
        cut = self.boundaries[at]
        del self.boundaries[at:]
        return cut

    def _open(self, key: str, ts: str | None, line: Line) -> _Pending:
        if self.pending is None:
            self.pending = _Pending(key, ts, line.no)
        return self.pending

    def _flush(self, usage: dict[str, Any] | None = None) -> None:
        pending, self.pending = self.pending, None
        if pending is None:
            return
        self.cut = None
        emit = self.ctx.emit
        emit.assistant(
            pending.key,
            emit.parent_of(None, previous=True),
            text="\n".join(pending.texts) if pending.texts else None,
            calls=pending.calls,
            thinking=pending.thinking or None,
            usage=usage,
            model=self.model,
            ts=pending.ts,
        )

    def finish(self) -> str | None:
        # Codex writes a response's items as they stream: its reasoning first, then its
        # message or calls. A file that ends on reasoning alone is being written (a response
        # is never reasoning only): those lines are read again by the next import, which sees
        # the whole response, unless the file has not changed since the last import (its
        # writer is done, or gone): then what there is is the response.
        pending = self.pending
        if pending is not None and not (self.ctx.settled or pending.texts or pending.calls):
            self.held, self.pending = pending.line, None
            return self.cut
        self._flush()
        return self.cut  # (None: the leaf is where the records appended left it)

    def saved(self) -> dict[str, Any]:
        return {
            "explicit_turns": self.explicit_turns,
            "model": self.model,
            "settings": self.settings,
            "boundaries": self.boundaries[-BOUNDARIES:],
        }
