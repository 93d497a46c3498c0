"""Regression tests of an audit: a stray non-UTF-8 byte, Codex turn end times, and one Claude
Code response written as several lines (parallel tool calls) exported as one message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from threadlog import open_store
from threadlog.export import anthropic_request, openai_messages
from threadlog.export.trajectory import trajectory
from threadlog.importers import import_paths, source_format

from ._helpers import conversation

SESSION = "5e551011-0000-4000-8000-000000000000"


def _cc(uuid: str, parent: str | None, kind: str, content: Any, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": kind, "content": content}
    message.update(extra.pop("message", {}))
    return {
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": SESSION,
        "isSidechain": False,
        "timestamp": "2025-08-01T10:00:00.000Z",
        "message": message,
        **extra,
    }


def _write(path: Path, lines: list[bytes]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return str(path)


def test_a_non_utf8_byte_costs_neither_the_line_nor_the_chain(tmp_path: Path) -> None:
    lines = [
        json.dumps(_cc("u1", None, "user", "hello")).encode(),
        json.dumps(
            _cc("a1", "u1", "assistant", [{"type": "text", "text": "hXi"}], message={"id": "m1"})
        )
        .encode()
        .replace(b"hXi", b"h\xffi"),
        json.dumps(_cc("u2", "a1", "user", "more")).encode(),
    ]
    path = _write(tmp_path / "p" / f"{SESSION}.jsonl", lines)
    with open_store("memory://") as store:
        report = import_paths(store, source_format("claude-code"), [path])
        (f,) = report.files
        assert [(p.line, p.kind) for p in f.problems] == [(2, "encoding")]
        assert conversation(store.read(str(f.thread))) == [
            ("user", "hello"),
            ("assistant", "h\ufffdi", []),
            ("user", "more"),
        ]


def test_codex_turns_end_at_the_source_time(tmp_path: Path) -> None:
    def line(ts: str, kind: str, payload: dict[str, Any]) -> bytes:
        return json.dumps({"timestamp": ts, "type": kind, "payload": payload}).encode()

    sid = "0199aaaa-0000-7000-8000-0000000000aa"
    lines = [
        line("2025-09-01T10:00:00.000Z", "session_meta", {"id": sid, "cli_version": "0.36.0"}),
        line("2025-09-01T10:00:01.000Z", "event_msg", {"type": "task_started"}),
        line(
            "2025-09-01T10:00:02.000Z",
            "response_item",
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        ),
        line(
            "2025-09-01T10:00:03.000Z",
            "response_item",
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "hello"}],
            },
        ),
        line("2025-09-01T10:00:04.000Z", "event_msg", {"type": "task_complete"}),
    ]
    path = _write(tmp_path / f"rollout-2025-09-01T10-00-00-{sid}.jsonl", lines)
    with open_store("memory://") as store:
        (f,) = import_paths(store, source_format("codex"), [path]).files
        (turn,) = trajectory(store.read(str(f.thread)))["turns"]
        assert (turn["started_at"], turn["ended_at"]) == (
            "2025-09-01T10:00:02.000Z",
            "2025-09-01T10:00:04.000Z",
        )


def test_parallel_tool_calls_of_one_response_export_as_one_message(tmp_path: Path) -> None:
    def assistant(uuid: str, parent: str, block: dict[str, Any], mid: str) -> dict[str, Any]:
        return _cc(uuid, parent, "assistant", [block], message={"id": mid})

    def result(uuid: str, parent: str, call: str, text: str) -> dict[str, Any]:
        block = {"type": "tool_result", "tool_use_id": call, "content": text}
        return _cc(uuid, parent, "user", [block])

    rows = [
        _cc("p1", None, "user", "read both"),
        assistant("p2", "p1", {"type": "thinking", "thinking": "t", "signature": "s"}, "m"),
        assistant("p3", "p2", {"type": "tool_use", "id": "A", "name": "Read", "input": {}}, "m"),
        assistant("p4", "p3", {"type": "tool_use", "id": "B", "name": "Read", "input": {}}, "m"),
        result("p5", "p4", "A", "AAA"),
        result("p6", "p5", "B", "BBB"),
    ]
    path = _write(tmp_path / "p" / f"{SESSION}.jsonl", [json.dumps(r).encode() for r in rows])
    with open_store("memory://") as store:
        (f,) = import_paths(store, source_format("claude-code"), [path]).files
        records = store.read(str(f.thread))
        messages = openai_messages(records)
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
        assert [c["id"] for c in messages[1]["tool_calls"]] == ["A", "B"]
        body = anthropic_request(records)
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
        assert [b["type"] for b in body["messages"][1]["content"]] == [
            "thinking",
            "tool_use",
            "tool_use",
        ]
        assert [b["tool_use_id"] for b in body["messages"][2]["content"]] == ["A", "B"]


def test_a_sub_agent_is_not_called_a_fork_at_ord_none() -> None:
    from threadlog.cli._describe import lineage_text

    assert lineage_text({"thread": "T", "kind": "subagent", "entry": None}) == "sub-agent of T"
    assert lineage_text({"thread": None, "kind": "subagent", "source_key": "codex:x"}) == (
        "sub-agent of codex:x"
    )
    assert lineage_text({"thread": "T", "ord": 4, "kind": "fork"}) == "forked from T at ord 4"
