"""Claude Code sessions: ``~/.claude/projects/<project>/<session>.jsonl``.

The format (as Claude Code writes it; our fixtures are written from its public description):
one JSON object a line. Conversation lines (``type`` ``user``, ``assistant``, ``system``)
carry a ``uuid`` and the ``parentUuid`` of the line they continue, so a file holds a tree:
editing an earlier prompt or retrying a response starts a branch, and resuming picks the
newest leaf. ``isSidechain`` lines are a sub-agent's conversation (the ``Task`` tool), in the
same file (older versions), in ``agent-<id>.jsonl`` beside the session files (2.0, the Agent
SDK), or in ``<session>/subagents/agent-<id>.jsonl``. Other lines are
bookkeeping (`BOOKKEEPING`): ``summary`` (a title for a leaf), ``file-history-snapshot`` (the
files' backups for undo), ``queue-operation`` (a prompt typed while a turn ran, queued),
``last-prompt``, ``custom-title`` / ``ai-title``, ``progress`` (a hook's or a tool's output
while it runs, in 2.x), ``attachment``, the session's mode and settings lines…; they are kept
as notes and counted in the report (`FileReport.bookkeeping`), and a type this importer does
not know is kept as a note too, and reported (``unknown_type``). Some have a ``uuid`` and
``parentUuid`` of their own (``progress``, ``attachment``) and sit in the chain: the next
conversation line may name one as its parent, so they are kept as notes at their place in the
tree. A line may be written just
before its parent (a turn's ``system`` duration line before the hook's ``progress`` line it
continues): it waits for its parent until a user or assistant line goes on without it (16
lines at most), and one whose parent never comes continues the root (``broken_parent``). A
file whose import ends between such a line and its parent keeps that line on the root.

A ``user`` line's ``message.content`` is a string or blocks: ``text``, ``image``, and
``tool_result`` (``tool_use_id``, ``content``, ``is_error``); ``toolUseResult`` holds the tool's
structured result for the UI. An ``assistant`` line is one content block of a model response
(``text``, ``thinking`` with its ``signature``, ``redacted_thinking``, ``tool_use`` with ``id``,
``name``, ``input``); the blocks of one response share ``message.id`` and its ``usage``. A
``system`` line with ``subtype: compact_boundary`` marks a compaction: it restarts the chain
(``parentUuid`` null) and names what it replaced in ``logicalParentUuid``; the next line is
the summary (a user line with ``isCompactSummary``).

Mapping: a user prompt starts a turn; tool results finish their calls (a text beside them
joins the running turn); each assistant line is one model response (the usage of a
``message.id`` counted once, on its first line); a compact boundary is a ``compaction`` whose
summary is the boundary's content and which replaces everything up to the logical parent; a
side-chain is a child thread (lineage kind ``subagent``). Other system lines and bookkeeping
lines are kept as ``custom.import.record`` notes. The active leaf is the last conversation
line of the main chain, as Claude Code resumes it.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import field
from typing import Any

from threadlog._dataclass import dataclass
from threadlog.importers._core import FileContext, Identity, Line
from threadlog.importers._emit import Call, Emitter
from threadlog.importers._values import as_dict, as_int, as_str

__all__ = ["ClaudeCode"]

CHAIN = frozenset({"user", "assistant", "system"})
BOOKKEEPING = frozenset(
    {
        # what Claude Code writes beside the conversation (its session files, 1.x-2.x): kept
        # as notes and counted, not reported
        "summary",
        "file-history-snapshot",
        "file-history-delta",
        "queue-operation",
        "progress",
        "attachment",
        "last-prompt",
        "custom-title",
        "ai-title",
        "tag",
        "agent-name",
        "agent-color",
        "agent-setting",
        "mode",
        "permission-mode",
        "worktree-state",
        "pr-link",
        "task-summary",
        "attribution-snapshot",
        "content-replacement",
        "marble-origami-commit",
        "marble-origami-snapshot",
        "fork-context-ref",
        "frame-link",
        "bridge-session",
        "relocated",
        "atis-latch",
    }
)
WAIT = 16
"""A line waits for a parent written after it for this many lines at most (`_Parser.feed`)."""


def block_text(content: Any) -> str:
    """Text of a string or a list of content blocks (an image becomes ``[image]``)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else str(content)
    parts: list[str] = []
    for block in content:
        if isinstance(block, dict):
            kind = block.get("type")
            if kind == "text":
                parts.append(str(block.get("text", "")))
            elif kind == "image":
                parts.append("[image]")
            elif kind == "tool_reference" or kind == "document":
                parts.append(f"[{kind}]")
        elif isinstance(block, str):
            parts.append(block)
    return "\n".join(parts)


class ClaudeCode:
    """The ``claude-code`` source format."""

    name = "claude-code"

    def matches(self, path: str) -> bool:
        return path.endswith(".jsonl")

    def identify(self, path: str, lines: list[Line]) -> Identity:
        stem = os.path.basename(path)[: -len(".jsonl")]
        objs = [line.obj for line in lines if isinstance(line.obj, dict)]
        version = next((o["version"] for o in objs if isinstance(o.get("version"), str)), None)
        cwd = next((o["cwd"] for o in objs if isinstance(o.get("cwd"), str)), None)
        title = next((_prompt(o) for o in objs if _prompt(o)), None)
        parent_dir = os.path.basename(os.path.dirname(path))
        # a sub-agent's file: ``<session>/subagents/agent-<id>.jsonl``, or (older versions, the
        # Agent SDK) ``agent-<id>.jsonl`` beside the sessions, its side-chain lines naming the
        # session that ran it
        session = None
        if parent_dir == "subagents":
            session = os.path.basename(os.path.dirname(os.path.dirname(path)))
        elif stem.startswith("agent-"):
            session = next(
                (
                    o["sessionId"]
                    for o in objs
                    if o.get("isSidechain") is True and isinstance(o.get("sessionId"), str)
                ),
                None,
            )
        if session is not None and stem.startswith("agent-"):
            parent_key = f"claude-code:{session}"
            return Identity(
                key=f"{parent_key}#{stem}",
                session=session,
                version=version,
                cwd=cwd,
                title=title,
                lineage={"key": parent_key, "kind": "subagent", "agent": stem[len("agent-") :]},
            )
        # Claude Code names a session's file by its id; the lines of a continued session may
        # still carry the id of the one they were copied from, so the name decides
        session = stem
        lineage = None
        forked = next(
            (o["forkedFrom"] for o in objs if isinstance(o.get("forkedFrom"), dict)), None
        )
        source = forked.get("sessionId") if forked is not None else None
        if isinstance(source, str) and source != session:
            # a branch Claude Code copied into a session of its own
            lineage = {"key": f"claude-code:{source}", "kind": "fork"}
        return Identity(
            key=f"claude-code:{session}",
            session=session,
            version=version,
            cwd=cwd,
            title=title,
            lineage=lineage,
        )

    def parser(self, ctx: FileContext, saved: dict[str, Any] | None) -> _Parser:
        sub = (ctx.identity.lineage or {}).get("kind") == "subagent"
        saved = saved or {}
        results = saved.get("last_results")
        return _Parser(
            ctx,
            subagent_file=sub,
            last_message=saved.get("last_message"),
            last_results=results if isinstance(results, str) else None,
        )


def _prompt(obj: dict[str, Any]) -> str | None:
    """A user prompt's first line (a title), or None."""
    message = obj.get("message")
    if obj.get("type") != "user" or not isinstance(message, dict) or obj.get("isMeta"):
        return None
    content = message.get("content")
    if isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    ):
        return None
    text = block_text(content).strip()
    return text.splitlines()[0][:80] if text else None


@dataclass(slots=True)
class _Parser:
    ctx: FileContext
    subagent_file: bool
    last_message: str | None = None
    """``message.id`` of the last assistant line: its usage is counted once."""
    last_results: str | None = None
    """``uuid`` of the last user line that carried tool results: a meta line continuing it
    (a skill's instructions after its ``Skill`` call's result) joins the running turn."""
    restart: bool = False
    held: int | None = None
    leaf: str | None = None
    routes: dict[str, str] = field(default_factory=dict)
    """Side-chain line uuid → the suffix of its child thread."""
    seen: set[str] = field(default_factory=set)
    """The uuids of the lines read so far."""
    waiting: dict[str, list[Line]] = field(default_factory=dict)
    """parentUuid → the lines read before that parent (they wait for it)."""
    oldest: int = 0
    """The number of the first line that waits."""

    def feed(self, line: Line) -> None:
        if self.waiting and self.oldest + WAIT <= line.no:
            self._settle(line.no - WAIT)  # their parent is not coming
        obj = line.obj
        if not (isinstance(obj, dict) and isinstance(obj.get("uuid"), str)):
            self._read(line)
            return
        uuid = obj["uuid"]
        kind = obj.get("type")
        if kind in CHAIN and not (obj.get("isSidechain") and not self.subagent_file):
            self.leaf = self.ctx.emit.anchor(uuid)  # (the last line of the main chain)
        parent = obj.get("parentUuid")
        if isinstance(parent, str) and not self._known(parent):
            # Claude Code writes some lines just before their parent (a turn's duration before
            # the hook's line it continues, a hook's attachments): such a line waits for it
            if not self.waiting:
                self.oldest = line.no
            self.waiting.setdefault(parent, []).append(line)
            return
        if kind in ("user", "assistant") and self.waiting:
            self._settle()  # the conversation went on without their parents
        self._read(line)
        self._release(uuid)

    def _known(self, uuid: str) -> bool:
        """Whether the line ``uuid`` was read (in this import, or in one before it)."""
        if uuid in self.seen:
            return True
        emit = self.ctx.emit
        return emit.holds(emit.anchor(uuid))

    def _release(self, uuid: str) -> None:
        """Read the lines that waited for line ``uuid`` (and those that waited for them)."""
        if not self.waiting:
            return
        ready = deque([uuid])
        while ready:
            for line in self.waiting.pop(ready.popleft(), ()):
                self._read(line, late=True)
                ready.append(line.obj["uuid"])
        if self.waiting:
            self.oldest = min(line.no for group in self.waiting.values() for line in group)

    def _settle(self, upto: int | None = None) -> None:
        """Read the waiting lines (up to line ``upto``), in file order: their parent never
        came, so they continue the root (reported as a broken chain)."""
        while self.waiting:
            lines = [line for group in self.waiting.values() for line in group]
            waiting = {line.obj["uuid"] for line in lines}
            first = min(
                (line for line in lines if line.obj["parentUuid"] not in waiting),
                key=lambda line: line.no,
                default=min(lines, key=lambda line: line.no),  # (a cycle)
            )
            if upto is not None and first.no > upto:
                break
            parent = first.obj["parentUuid"]
            self.waiting[parent].remove(first)
            if not self.waiting[parent]:
                del self.waiting[parent]
            self._read(first, late=True)
            self._release(first.obj["uuid"])

    def _read(self, line: Line, *, late: bool = False) -> None:
        """Import one line (``late``: a line that waited for its parent)."""
        if late:  # (its problems are reported at its own line)
            for emitter in (self.ctx.emit, *self.ctx.children.values()):
                emitter.line = line.no
        obj = line.obj
        emit = self.ctx.emit
        if not isinstance(obj, dict):
            self.ctx.report.problem(line.no, "malformed", "a line that is not a JSON object")
            emit.note(f"L{line.no}", emit.parent_of(None, previous=True), "malformed", obj)
            return
        kind = as_str(obj.get("type"))
        uuid = obj.get("uuid")
        if kind not in CHAIN and isinstance(uuid, str):
            self._chained_note(obj, kind, uuid, line)
            return
        if kind not in CHAIN or not isinstance(uuid, str):
            if kind in CHAIN:
                self.ctx.report.problem(line.no, "malformed", f"a {kind} line without a uuid")
            else:
                self._bookkeeping(kind, line)
            emit.note(
                f"L{line.no}",
                emit.parent_of(None, previous=True),
                str(kind),
                obj,
                obj.get("timestamp"),
            )
            return
        self.seen.add(uuid)
        if obj.get("isSidechain") and not self.subagent_file:
            self._line(self._route(obj, uuid), obj, uuid, line)
            return
        self._line(emit, obj, uuid, line)

    def _chained_note(self, obj: dict[str, Any], kind: str | None, uuid: str, line: Line) -> None:
        """A bookkeeping line with a ``uuid`` of its own (``progress``, ``attachment``…): a
        note in the tree, under its ``uuid``, since the conversation lines after it may name it
        as their ``parentUuid``."""
        self._bookkeeping(kind, line)
        self.seen.add(uuid)
        emit = self.ctx.emit
        if obj.get("isSidechain") and not self.subagent_file:
            emit = self._route(obj, uuid)
        parent = obj.get("parentUuid")
        up = emit.parent_of(parent if isinstance(parent, str) else None)
        ts = obj.get("timestamp") if isinstance(obj.get("timestamp"), str) else None
        emit.note(uuid, up, str(kind), obj, ts)

    def _bookkeeping(self, kind: str | None, line: Line) -> None:
        """A line that is not conversation, kept as a note: counted if its type is known,
        reported if not."""
        if kind in BOOKKEEPING:
            self.ctx.report.count(kind)
        else:
            self.ctx.report.problem(line.no, "unknown_type", f"record type {kind!r} kept as a note")

    def _route(self, obj: dict[str, Any], uuid: str) -> Emitter:
        """The child emitter a side-chain line belongs to (by its chain's first line)."""
        self.restart = True  # routes are rebuilt from the whole file on the next import
        parent = obj.get("parentUuid")
        suffix = self.routes.get(parent) if isinstance(parent, str) else None
        if suffix is None:
            agent = obj.get("agentId")
            suffix = f"agent-{agent}" if isinstance(agent, str) else f"side-{uuid}"
        self.routes[uuid] = suffix
        prompt = _prompt(obj)
        return self.ctx.child(suffix, title=prompt)

    def _line(self, emit: Emitter, obj: dict[str, Any], uuid: str, line: Line) -> None:
        kind = obj["type"]
        ts = obj.get("timestamp") if isinstance(obj.get("timestamp"), str) else None
        parent_uuid = obj.get("parentUuid")
        if kind == "system":
            if obj.get("subtype") == "compact_boundary":
                logical = obj.get("logicalParentUuid")
                up = emit.parent_of(logical if isinstance(logical, str) else parent_uuid)
                meta = as_dict(obj.get("compactMetadata"))
                tokens = as_int(meta.get("preTokens"))
                emit.compaction(
                    uuid,
                    up,
                    summary=str(obj.get("content") or "Conversation compacted"),
                    last_entry=up,
                    tokens_before=tokens,
                    ts=ts,
                )
            else:
                up = emit.parent_of(parent_uuid if isinstance(parent_uuid, str) else None)
                kind = f"system:{obj.get('subtype')}"
                self.ctx.report.count(kind)
                emit.note(uuid, up, kind, obj, ts)
            return
        up = emit.parent_of(parent_uuid if isinstance(parent_uuid, str) else None)
        message = obj.get("message")
        if not isinstance(message, dict):
            self.ctx.report.problem(line.no, "malformed", f"{kind} line without a message object")
            emit.note(uuid, up, f"{kind}:no-message", obj, ts)
            return
        content = message.get("content")
        if kind == "user":
            # text Claude Code itself adds right after a tool's result (``isMeta``: a skill's
            # instructions after its ``Skill`` call) is part of the running turn, not a prompt
            inside = (
                bool(obj.get("isMeta"))
                and self.last_results is not None
                and parent_uuid == self.last_results
            )
            self._user(emit, uuid, up, content, ts, inside=inside)
        else:
            self._assistant(emit, uuid, up, message, ts)

    def _user(
        self, emit: Emitter, uuid: str, up: str, content: Any, ts: str | None, *, inside: bool
    ) -> None:
        blocks = content if isinstance(content, list) else None
        results = [
            b for b in blocks or [] if isinstance(b, dict) and b.get("type") == "tool_result"
        ]
        if not results:
            if inside:
                emit.steer(uuid, up, block_text(content), ts)  # (a prompt if no turn runs)
            else:
                emit.user(uuid, up, block_text(content), ts)
            return
        self.last_results = uuid
        rest = [
            b for b in blocks or [] if not (isinstance(b, dict) and b.get("type") == "tool_result")
        ]
        text = block_text(rest)
        triples = [
            (str(b.get("tool_use_id")), block_text(b.get("content")), bool(b.get("is_error")))
            for b in results
        ]
        if text:
            written = emit.tool_results(f"{uuid}~results", up, triples, ts)
            emit.steer(uuid, emit.anchor(f"{uuid}~results") if written else up, text, ts)
        elif not emit.tool_results(uuid, up, triples, ts):
            emit.note(uuid, up, "user:unwritten-results", content, ts)

    def _assistant(
        self, emit: Emitter, uuid: str, up: str, message: dict[str, Any], ts: str | None
    ) -> None:
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        texts: list[str] = []
        calls: list[Call] = []
        thinking: list[dict[str, Any]] = []
        for block in blocks:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                texts.append(str(block.get("text", "")))
            elif kind in ("thinking", "redacted_thinking"):
                thinking.append(block)
            elif kind == "tool_use":
                args = block.get("input")
                calls.append(
                    Call(
                        str(block.get("id")),
                        str(block.get("name")),
                        args if isinstance(args, dict) else {"input": args},
                    )
                )
            else:  # server tools, web search results…: kept with the response
                thinking.append({"type": "source_block", "block": block})
        message_id = message.get("id") if isinstance(message.get("id"), str) else None
        usage = None
        if message_id is None or message_id != self.last_message:
            usage = message.get("usage") if isinstance(message.get("usage"), dict) else None
        self.last_message = message_id
        emit.assistant(
            uuid,
            up,
            text="".join(texts) if texts else None,
            calls=calls,
            thinking=thinking or None,
            usage=usage,
            model=message.get("model") if isinstance(message.get("model"), str) else None,
            stop_reason=message.get("stop_reason")
            if isinstance(message.get("stop_reason"), str)
            else None,
            ts=ts,
        )

    def finish(self) -> str | None:
        self._settle()
        return self.leaf

    def saved(self) -> dict[str, Any]:
        return {"last_message": self.last_message, "last_results": self.last_results}
