"""Scripted models the service tests start ``threadlog serve --model python:…`` with.

Each decides from the request alone (how many tool results the context holds), never from a
counter, so a server killed mid-turn and started again picks up the same script where the
log says the turn was.
"""

from __future__ import annotations

from threadlog.runtime.models import ModelRequest, Reply, ScriptedModel, ToolCallSpec

READS = 6
"""How many files the reading agent reads before it answers."""


def _results(request: ModelRequest) -> int:
    return sum(1 for m in request.messages if m["role"] == "tool")


def _reader(request: ModelRequest, step: int) -> Reply:
    done = _results(request)
    if done < READS:
        return Reply(
            f"Reading README.md, pass {done + 1} of {READS}, slowly and word by word.",
            [ToolCallSpec("read_file", {"path": "README.md"})],
        )
    return Reply("All passes done.")


def reader() -> ScriptedModel:
    """Reads README.md `READS` times (read-only: no approval), streaming slowly, then ends."""
    return ScriptedModel(_reader, delay=0.05)


def _writer(request: ModelRequest, step: int) -> Reply:
    if _results(request) == 0:
        return Reply(
            "I will append a line.",
            [ToolCallSpec("append_file", {"path": "notes.txt", "text": "approved line\n"})],
        )
    return Reply("Appended.")


def writer() -> ScriptedModel:
    """Asks to append to notes.txt (non-idempotent: waits for a human's approval)."""
    return ScriptedModel(_writer)
