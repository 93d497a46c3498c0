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
  ``custom_tool_call`` / ``custom_tool_call_output``, ``local_shell_call``…;
* ``event_msg``: what the UI was told: ``task_started`` / ``task_complete`` (turn
  boundaries), ``token_count`` (``info.last_token_usage``: the last model call's usage),
  ``user_message`` / ``agent_message`` / ``agent_reasoning`` /
  ``agent_reasoning_raw_content`` (the same text as the response items), ``turn_aborted``…;
* ``compacted``: a compaction: its summary ``message`` (written by the model, when Codex
  compacts the history itself), and in newer files ``replacement_history``, the history Codex
  kept in place of the conversation (the user's last messages, and the summary as a user
  message, or the provider's encrypted ``compaction`` item when the provider compacted it,
  ``message`` then empty).

Files written before the wrapper existed hold the session meta as a bare first line
(``{"id", "timestamp", "instructions"}``) and bare response items after it; they are read too.

Mapping: a Codex session has no tree, so each item continues the previous one. Consecutive
assistant-side items (reasoning, assistant text, tool calls) up to the ``token_count`` that
follows them are one model response with that usage; a user message starts a turn (or joins
the running one as steering when the file marks turns with ``task_started``), user messages
that carry environment context or instructions (``<environment_context>``…) are kept as
notes, not as prompts; ``task_complete`` / ``turn_aborted`` end the turn; ``turn_context``
is a ``config.changed``; ``compacted`` a ``compaction`` of everything before it, whose
summary is what the model was given in its place (`_compacted`). The ``event_msg`` items that
repeat response items are not stored twice; every other line that is not conversation is kept
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
ASSISTANT_ITEMS = frozenset({"reasoning", "function_call", "custom_tool_call", "local_shell_call"})
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
        "image_generation_call",
    }
)
SETTINGS = ("model", "cwd", "effort", "approval_policy", "sandbox_policy", "summary")
COMPACTION_ITEMS = frozenset({"compaction", "compaction_summary"})
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
        elif kind in OUTPUT_ITEMS or kind in ASSISTANT_ITEMS or kind == "web_search_call":
            parts.append(f"[{kind}]")
        # (a ghost_snapshot is /undo's bookkeeping, never sent to the model)
    if message.strip() and message.strip() not in texts:
        parts.insert(0, message.strip())
    return "\n\n".join(parts) or "Conversation compacted (Codex kept no message)"


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
        return _Parser(
            ctx,
            explicit_turns=bool(saved.get("explicit_turns")),
            model=saved.get("model") if isinstance(saved.get("model"), str) else None,
            settings=dict(as_dict(saved.get("settings"))),
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
                emit.config(key, emit.parent_of(None, previous=True), changes, ts)
        elif kind == "compacted":
            self._flush()
            up = emit.parent_of(None, previous=True)
            emit.compaction(key, up, summary=_compacted(payload), last_entry=up, ts=ts)
            if payload.get("replacement_history"):
                # the kept history as Codex wrote it (its encrypted item, its /undo snapshots)
                emit.note(f"{key}~history", emit.anchor(key), "compacted", payload, ts)
        elif kind == "session_meta":
            self._flush()
            self.ctx.report.count("session_meta")
            emit.note(key, emit.parent_of(None, previous=True), "session_meta", payload, ts)
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
        elif kind in OUTPUT_ITEMS:
            self._flush()
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
            elif self.explicit_turns and emit.active_turn is not None:
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
        else:
            # what the UI was told: the conversation is in the response items, so every other
            # event (of the many Codex has, and adds) is a note, counted, never a problem
            if kind in ("task_started", "turn_started"):
                self.explicit_turns = True
            self.ctx.report.count(f"event_msg:{kind}")
            emit.note(key, up, f"event:{kind}", event, ts)

    def _open(self, key: str, ts: str | None, line: Line) -> _Pending:
        if self.pending is None:
            self.pending = _Pending(key, ts, line.no)
        return self.pending

    def _flush(self, usage: dict[str, Any] | None = None) -> None:
        pending, self.pending = self.pending, None
        if pending is None:
            return
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
            return None
        self._flush()
        return None

    def saved(self) -> dict[str, Any]:
        return {
            "explicit_turns": self.explicit_turns,
            "model": self.model,
            "settings": self.settings,
        }
