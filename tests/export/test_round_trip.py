"""Export, then import: the active conversation survives.

Every thread imported from the fixtures is exported as a Messages API body and written as a
Claude Code session, and exported as Chat Completions messages and written as a Codex rollout
(the writers here are the test's: each source format's shape, line by line); importing those
files gives threads whose active conversation is the original's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from threadlog import open_store
from threadlog.export import anthropic_request, openai_messages
from threadlog.export._active import active_conversation
from threadlog.importers import SOURCES, import_paths, source_format

from ..importers._helpers import FIXTURES


@pytest.fixture(scope="module")
def originals() -> Iterator[list[list[Any]]]:
    with open_store("memory://") as store:
        threads = []
        for fmt in SOURCES:
            for f in import_paths(store, source_format(fmt), [str(FIXTURES / fmt)]).files:
                threads += [store.read(t) for t in [f.thread, *f.children]]
        yield threads


def _said(records: list[Any], *, join_users: bool = False) -> list[tuple[Any, ...]]:
    """The active conversation without system text: what both formats carry. With
    ``join_users``, consecutive user texts are one (the Messages API alternates roles, so the
    export merges them into one message of two text blocks)."""
    out: list[tuple[Any, ...]] = []
    for m in active_conversation(records)[1]:
        if m["role"] == "assistant":
            calls = [(c["id"], c["name"], c["arguments"]) for c in m.get("tool_calls") or []]
            out.append(("assistant", m.get("content"), calls))
        elif m["role"] == "tool":
            out.append(("tool", m["tool_call_id"], m["content"]))
        elif m["role"] == "user":
            if join_users and out and out[-1][0] == "user":
                out[-1] = ("user", f"{out[-1][1]}\n{m['content']}")
            else:
                out.append(("user", m["content"]))
    return out


def _as_claude_code(body: dict[str, Any], session: str) -> str:
    lines = []
    parent = None
    for n, message in enumerate(body["messages"]):
        uuid = f"{session}-{n}"
        content = message["content"]
        if message["role"] == "assistant":
            content = [b for b in content if b["type"] != "thinking"]
            inner = {"id": f"msg_{n}", "role": "assistant", "model": "m", "content": content}
        else:
            inner = {"role": "user", "content": content}
        lines.append(
            {
                "type": message["role"],
                "uuid": uuid,
                "parentUuid": parent,
                "sessionId": session,
                "message": inner,
            }
        )
        parent = uuid
    return "".join(json.dumps(line) + "\n" for line in lines)


def _as_codex(messages: list[dict[str, Any]], session: str) -> str:
    items: list[dict[str, Any]] = [{"type": "session_meta", "payload": {"id": session}}]
    for m in messages:
        if m["role"] == "user":
            items.append(
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": m["content"]}],
                }
            )
        elif m["role"] == "assistant":
            if m.get("content"):
                items.append(
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": m["content"]}],
                    }
                )
            for call in m.get("tool_calls") or []:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": call["function"]["name"],
                        "arguments": call["function"]["arguments"],
                    }
                )
        elif m["role"] == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": m["tool_call_id"],
                    "output": m["content"],
                }
            )
    lines = [items[0]] + [{"type": "response_item", "payload": item} for item in items[1:]]
    return "".join(
        json.dumps({"timestamp": "2026-01-01T00:00:00Z", **line}) + "\n" for line in lines
    )


def test_anthropic_export_as_claude_code_imports_to_the_same_conversation(
    originals: Any, tmp_path: Path
) -> None:
    for n, records in enumerate(originals):
        body = anthropic_request(records)
        if not body["messages"]:
            continue
        path = tmp_path / f"session-{n}.jsonl"
        path.write_text(_as_claude_code(body, f"rt{n}"))
        with open_store("memory://") as store:
            [f] = import_paths(store, source_format("claude-code"), [str(path)]).files
            back = store.read(f.thread)
        expected = _said(records, join_users=True)
        if body["messages"][0]["content"][0].get("text") == "(the conversation continues)":
            expected = [("user", "(the conversation continues)"), *expected]
        # a tool error travels as is_error: the text is the same, with its "error: " prefix
        assert _said(back) == expected, n


def test_openai_export_as_a_codex_rollout_imports_to_the_same_conversation(
    originals: Any, tmp_path: Path
) -> None:
    for n, records in enumerate(originals):
        messages = openai_messages(records)
        path = tmp_path / f"rollout-2026-01-01T00-00-00-rt{n}.jsonl"
        path.write_text(_as_codex(messages, f"rt{n}"))
        with open_store("memory://") as store:
            [f] = import_paths(store, source_format("codex"), [str(path)]).files
            back = store.read(f.thread)
        # Chat Completions has no error flag: an error is its text
        assert _said(back) == _said(records), n
