"""Pi sessions: ``~/.pi/agent/sessions/--<cwd>--/<time>_<id>.jsonl``.

The format (pi-mono's coding agent; our fixtures are written from its public source and
docs): a header line ``{"type": "session", "version": N, "id", "timestamp", "cwd",
"parentSession"?}``, then one entry a line. Since version 2 every entry has an ``id`` and the
``parentId`` of the entry it continues, so a file is a tree (branching in place), and the
active conversation is the path from the *last* entry of the file to the root. Versions:

* **v1** (no ``version``): a linear list without ids; a compaction names the first entry it
  keeps by index (``firstKeptEntryIndex``). Migrated as pi does: each entry continues the
  previous one, and the index becomes that entry.
* **v2**: the ``id``/``parentId`` tree.
* **v3**: the ``hookMessage`` message role renamed ``custom``.
* **v4** and later: read like v3 (a later version is reported once, then read the same way).

Entries: ``message`` (``message.role`` user / assistant / toolResult / bashExecution /
custom), ``thinking_level_change``, ``model_change``, ``compaction`` (``summary``,
``firstKeptEntryId``, ``tokensBefore``), ``branch_summary`` (``fromId``, ``summary``),
``custom`` (an extension's state, not conversation), ``custom_message`` (an extension's
message, sent to the model as user text), ``label`` (``targetId``, ``label``) and
``session_info`` (``name``). An assistant message holds ``text``, ``thinking`` and
``toolCall`` (``id``, ``name``, ``arguments``) blocks, with ``model``, ``usage`` (``input``,
``output``, ``cacheRead``, ``cacheWrite``, ``cost``) and ``stopReason``; a tool result names
its ``toolCallId`` and says ``isError``.

Mapping: user text starts a turn; a shell command the user ran (``bashExecution``, in the
words pi sends the model) and an extension's message join the conversation as user input (a
command run with ``!!``, ``excludeFromContext``, is kept as a note: the model never saw it); an assistant message is one model
response; a tool result finishes its call; model and thinking changes are
``config.changed``; a compaction replaces everything before its first kept entry; labels are
``label.set``; ``custom`` and ``session_info`` entries are kept as notes (counted in the
report's `FileReport.bookkeeping`; an entry type or a message role this importer does not know
is kept as a note too, and reported: ``unknown_type``).
"""

from __future__ import annotations

import os
from typing import Any

from threadlog._dataclass import dataclass
from threadlog.importers._core import FileContext, Identity, Line
from threadlog.importers._emit import Call, Emitter
from threadlog.importers._values import as_dict, as_str

__all__ = ["Pi"]

LATEST = 4
"""The newest header version this importer knows."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict):
            if block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif block.get("type") == "image":
                parts.append("[image]")
    return "\n".join(parts)


def _bash_text(message: dict[str, Any]) -> str:
    """A shell command the user ran, as pi sends it to the model (its ``bashExecutionToText``)."""
    text = f"Ran `{message.get('command', '')}`\n"
    output = message.get("output")
    text += f"```\n{output}\n```" if output else "(no output)"
    code = message.get("exitCode")
    if message.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif isinstance(code, int) and code != 0:
        text += f"\n\nCommand exited with code {code}"
    if message.get("truncated") and message.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {message['fullOutputPath']}]"
    return text


def _usage(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    out: dict[str, Any] = {}
    for theirs, ours in (
        ("input", "input_tokens"),
        ("output", "output_tokens"),
        ("cacheRead", "cache_read_input_tokens"),
        ("cacheWrite", "cache_creation_input_tokens"),
        ("totalTokens", "total_tokens"),
    ):
        if isinstance(usage.get(theirs), int | float):
            out[ours] = usage[theirs]
    cost = usage.get("cost")
    if isinstance(cost, dict) and isinstance(cost.get("total"), int | float):
        out["cost"] = cost["total"]
    return out


class Pi:
    """The ``pi`` source format."""

    name = "pi"

    def matches(self, path: str) -> bool:
        return path.endswith(".jsonl")

    def identify(self, path: str, lines: list[Line]) -> Identity:
        header = lines[0].obj if lines and isinstance(lines[0].obj, dict) else {}
        if header.get("type") != "session":
            header = {}
        session = header.get("id") if isinstance(header.get("id"), str) else None
        session = session or os.path.basename(path)[: -len(".jsonl")]
        version = header.get("version", 1) if header else None
        title = None
        for line in lines[1:]:
            obj = as_dict(line.obj)
            message = as_dict(obj.get("message"))
            if obj.get("type") == "message" and message.get("role") == "user":
                text = _text(message.get("content")).strip()
                if text:
                    title = text.splitlines()[0][:80]
                    break
        extra: dict[str, Any] = {}
        if isinstance(header.get("parentSession"), str):
            extra["parent_session"] = header["parentSession"]
        if isinstance(header.get("timestamp"), str):
            extra["started_at"] = header["timestamp"]
        return Identity(
            key=f"pi:{session}",
            session=session,
            version=str(version) if version is not None else None,
            cwd=header.get("cwd")
            if isinstance(header.get("cwd"), str) and header.get("cwd")
            else None,
            title=title,
            extra=extra,
        )

    def parser(self, ctx: FileContext, saved: dict[str, Any] | None) -> _Parser:
        saved = saved or {}
        version = saved.get("version")
        return _Parser(ctx, version=version if isinstance(version, int) else None)


@dataclass(slots=True)
class _Parser:
    ctx: FileContext
    version: int | None = None
    """The header's version (None until the header is read)."""
    restart: bool = False
    held: int | None = None
    leaf: str | None = None

    def feed(self, line: Line) -> None:
        obj = line.obj
        emit = self.ctx.emit
        report = self.ctx.report
        if not isinstance(obj, dict):
            report.problem(line.no, "malformed", "a line that is not a JSON object")
            emit.note(f"L{line.no}", emit.parent_of(None, previous=True), "malformed", obj)
            return
        kind = as_str(obj.get("type"))
        if kind == "session":
            if self.version is not None:
                report.problem(line.no, "unknown_type", "a second session header, kept as a note")
                emit.note(f"L{line.no}", emit.parent_of(None, previous=True), "session", obj)
                return
            version = obj.get("version", 1)
            self.version = version if isinstance(version, int) else 1
            if self.version > LATEST:
                report.problem(line.no, "version", f"session version {version} read as v{LATEST}")
            return
        if self.version is None:
            report.problem(line.no, "no_header", "no session header: read as version 1")
            self.version = 1
        ts = obj.get("timestamp") if isinstance(obj.get("timestamp"), str) else None
        if self.version < 2 or not isinstance(obj.get("id"), str):
            key, up = f"L{line.no}", emit.parent_of(None, previous=True)
        else:
            key = obj["id"]
            parent = obj.get("parentId")
            up = emit.parent_of(parent if isinstance(parent, str) else None)
        self._entry(emit, key, up, kind, obj, ts, line)
        if emit.holds(emit.anchor(key)):
            self.leaf = emit.anchor(key)

    def _ref(self, emit: Emitter, entry: Any) -> str | None:
        """The record of a source entry named by id, or None."""
        if not isinstance(entry, str):
            return None
        anchor = emit.anchor(entry)
        return anchor if emit.holds(anchor) else None

    def _entry(
        self,
        emit: Emitter,
        key: str,
        up: str,
        kind: Any,
        obj: dict[str, Any],
        ts: str | None,
        line: Line,
    ) -> None:
        if kind == "message":
            self._message(emit, key, up, obj.get("message"), ts, line)
        elif kind == "model_change":
            changes = {"model": obj.get("modelId"), "provider": obj.get("provider")}
            emit.config(key, up, {k: v for k, v in changes.items() if v is not None}, ts)
        elif kind == "thinking_level_change":
            emit.config(key, up, {"thinking": obj.get("thinkingLevel")}, ts)
        elif kind == "compaction":
            first = obj.get("firstKeptEntryId")
            if first is None and isinstance(obj.get("firstKeptEntryIndex"), int):
                first = f"L{obj['firstKeptEntryIndex'] + 1}"  # v1: the header is entry 0
            last = emit.item_parent(first) if isinstance(first, str) else None
            tokens = obj.get("tokensBefore")
            emit.compaction(
                key,
                up,
                summary=str(obj.get("summary", "")),
                last_entry=last or up,
                tokens_before=tokens if isinstance(tokens, int) else 0,
                ts=ts,
            )
        elif kind == "branch_summary":
            emit.branch_summary(
                key, up, self._ref(emit, obj.get("fromId")) or up, str(obj.get("summary", ""))
            )
        elif kind == "custom_message":
            self._said(emit, key, up, _text(obj.get("content")), ts)
        elif kind == "label":
            target = self._ref(emit, obj.get("targetId"))
            if target is None:
                self.ctx.report.problem(
                    line.no, "broken_parent", "label for an entry not in the session"
                )
                emit.note(key, up, "label", obj, ts)
            else:
                label = obj.get("label")
                emit.label(key, up, target, label if isinstance(label, str) else None)
        elif kind in ("custom", "session_info"):
            self.ctx.report.count(kind)
            emit.note(key, up, str(kind), obj, ts)
        else:
            self.ctx.report.problem(line.no, "unknown_type", f"entry type {kind!r} kept as a note")
            emit.note(key, up, str(kind), obj, ts)

    def _said(self, emit: Emitter, key: str, up: str, text: str, ts: str | None) -> None:
        """User-side text: a new turn, or steering while one runs with tool calls open."""
        if emit.active_turn is not None and any(s == "running" for s in emit.calls.values()):
            emit.steer(key, up, text, ts)
        else:
            emit.user(key, up, text, ts)

    def _message(
        self, emit: Emitter, key: str, up: str, message: Any, ts: str | None, line: Line
    ) -> None:
        if not isinstance(message, dict):
            self.ctx.report.problem(line.no, "malformed", "message entry without a message object")
            emit.note(key, up, "message", message, ts)
            return
        role = as_str(message.get("role"))
        if role == "hookMessage":  # v2 → v3
            role = "custom"
        if role == "user":
            emit.user(key, up, _text(message.get("content")), ts)
        elif role == "assistant" and message.get("stopReason") in ("error", "aborted"):
            # a response that failed or was cut off: Pi never sends it to a model again (it
            # drops such messages from the context it builds), so it is kept as a note, with
            # its ``errorMessage``, and what follows continues from it in the tree
            kind = f"assistant:{message['stopReason']}"
            self.ctx.report.count(kind)
            emit.note(key, up, kind, message, ts)
        elif role == "assistant":
            texts: list[str] = []
            calls: list[Call] = []
            thinking: list[dict[str, Any]] = []
            for block in message.get("content") or []:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text":
                    texts.append(str(block.get("text", "")))
                elif block.get("type") == "thinking":
                    signature = block.get("thinkingSignature")
                    if isinstance(signature, str) and "signature" not in block:
                        # the provider's signature, under the name its API takes back
                        block = {**block, "signature": signature}
                    thinking.append(block)
                elif block.get("type") == "toolCall":
                    args = block.get("arguments")
                    calls.append(
                        Call(
                            str(block.get("id")),
                            str(block.get("name")),
                            args if isinstance(args, dict) else {"input": args},
                        )
                    )
            emit.assistant(
                key,
                up,
                text="".join(texts) if texts else None,
                calls=calls,
                thinking=thinking or None,
                usage=_usage(message.get("usage")),
                model=message.get("model") if isinstance(message.get("model"), str) else None,
                stop_reason=message.get("stopReason")
                if isinstance(message.get("stopReason"), str)
                else None,
                ts=ts,
            )
        elif role == "toolResult":
            result = (
                str(message.get("toolCallId")),
                _text(message.get("content")),
                bool(message.get("isError")),
            )
            if not emit.tool_results(key, up, [result], ts):
                emit.note(key, up, "toolResult", message, ts)
        elif role == "bashExecution":
            if message.get("excludeFromContext"):  # (``!!``: pi never sends it to the model)
                self.ctx.report.count("message:bashExecution")
                emit.note(key, up, "bashExecution", message, ts)
            else:
                self._said(emit, key, up, _bash_text(message), ts)
        elif role == "custom":
            self._said(emit, key, up, _text(message.get("content")), ts)
        else:
            self.ctx.report.problem(
                line.no, "unknown_type", f"message role {role!r} kept as a note"
            )
            emit.note(key, up, f"message:{role}", message, ts)

    def finish(self) -> str | None:
        return self.leaf

    def saved(self) -> dict[str, Any]:
        return {"version": self.version}
