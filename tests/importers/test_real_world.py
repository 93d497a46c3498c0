"""Shapes of session files as their harnesses write them today, which the hand-written fixtures
missed (the fixtures under ``fixtures/real-world`` are our own text in each harness's shape)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from threadlog import open_store
from threadlog.importers import import_paths, source_format
from threadlog.model.context import SUMMARY_PREFIX

from ._helpers import FIXTURES, conversation

REAL = FIXTURES / "real-world"


def _import(fmt: str, *paths: Any) -> tuple[Any, Any]:
    store = open_store("memory://")
    report = import_paths(store, source_format(fmt), [str(p) for p in paths])
    return store, report


def test_claude_code_progress_lines_in_the_chain_keep_the_conversation() -> None:
    # Claude Code 2.x writes hook and shell ``progress`` lines with a uuid of their own, and
    # the next conversation line names that uuid as its parentUuid
    path = REAL / "claude-code" / "-home-me-proj" / "0b7c4f2e-3a51-4c8d-9e6f-1a2b3c4d5e60.jsonl"
    store, report = _import("claude-code", path)
    with store:
        (f,) = report.files
        assert f.status == "imported"
        assert f.problems == []
        assert f.bookkeeping == {"queue-operation": 1, "progress": 3}
        assert conversation(store.read(str(f.thread))) == [
            ("user", "fix the tests"),
            ("assistant", None, ["Bash"]),
            ("tool", "toolu_01X", "error: 1 failed, 3 passed"),
            ("assistant", "One test fails.", []),
        ]


def test_claude_code_a_line_written_before_its_parent_waits_for_it() -> None:
    # a turn's duration (a system line) written before the hook's progress line it continues;
    # the next prompt continues the system line. A parent that never comes is still reported.
    path = REAL / "claude-code" / "-home-me-proj" / "4d1e8a90-6b2c-4f3d-8e5a-7c9b0d1e2f30.jsonl"
    store, report = _import("claude-code", path)
    with store:
        (f,) = report.files
        assert [(p.line, p.kind) for p in f.problems] == [(7, "broken_parent")]
        assert conversation(store.read(str(f.thread))) == [
            ("user", "hello"),
            ("assistant", "Hi.", []),
            ("user", "and again"),
            ("assistant", "Hi again.", []),
            ("user", "last"),
        ]


def test_claude_code_bookkeeping_lines_are_counted_not_reported() -> None:
    # a session as Claude Code 2.1 writes it: beside the conversation, its settings, undo
    # snapshots, hook attachments and summaries, queued prompts, titles and the last prompt;
    # none is a problem, each is counted by type and kept as a note
    path = REAL / "claude-code" / "-home-me-proj" / "8e2f6a1b-7c3d-4e5f-9a0b-1c2d3e4f5a6b.jsonl"
    store, report = _import("claude-code", path)
    with store:
        (f,) = report.files
        assert f.problems == []
        assert f.bookkeeping == {
            "permission-mode": 1,
            "file-history-snapshot": 1,
            "attachment": 1,
            "system:stop_hook_summary": 1,
            "queue-operation": 2,
            "system:turn_duration": 1,
            "last-prompt": 1,
            "custom-title": 1,
            "ai-title": 1,
            "summary": 1,
        }
        assert report.to_dict()["totals"]["bookkeeping"] == 11
        records = store.read(str(f.thread))
        notes = [r for r in records if r.type == "custom.import.record"]
        assert len(notes) == 11
        assert conversation(records) == [
            ("user", "rename util.py to helpers.py"),
            ("assistant", "Renamed.", []),
            ("user", "thanks"),
            ("assistant", "You're welcome.", []),
        ]


def test_claude_code_an_agent_file_beside_the_sessions_is_a_sub_agent_of_its_session() -> None:
    # older versions (and the Agent SDK) write ``agent-<id>.jsonl`` next to the session files,
    # every line a side-chain line naming the session that ran the agent
    directory = REAL / "claude-code" / "-home-me-sdk"
    store, report = _import("claude-code", directory)
    with store:
        main, agent = report.files
        assert agent.path.endswith("agent-5f3a9c1e.jsonl") and agent.children == []
        first = store.read(str(agent.thread), limit=1)[0].data
        assert first["config"]["import"]["key"] == (
            "claude-code:6a2b3c4d-5e6f-4a1b-8c2d-3e4f5a6b7c8d#agent-5f3a9c1e"
        )
        assert first["lineage"]["thread"] == main.thread
        assert first["lineage"]["kind"] == "subagent"
        assert conversation(store.read(str(agent.thread))) == [
            ("user", "List the modules"),
            ("assistant", "Modules: a, b", []),
        ]


def test_codex_raw_reasoning_events_do_not_split_a_response() -> None:
    # with a model whose reasoning is readable, Codex writes an agent_reasoning_raw_content
    # event beside the reasoning item, before the rest of the response (its call)
    [path] = (REAL / "codex").rglob("rollout-*019ad000-*.jsonl")
    store, report = _import("codex", path)
    with store:
        (f,) = report.files
        assert f.problems == []
        assert f.bookkeeping == {
            "session_meta": 1,
            "event_msg:user_message": 1,
            "event_msg:agent_reasoning_raw_content": 1,
        }
        records = store.read(str(f.thread))
        responses = [r.data for r in records if r.type == "model.responded"]
        assert len(responses) == 2
        first = responses[0]["message"]
        assert [c["id"] for c in first["tool_calls"]] == ["call_1"]
        assert first["thinking"][0]["content"] == [
            {"type": "reasoning_text", "text": "I should run ls."}
        ]
        assert responses[0]["usage"]["input_tokens"] == 50
        assert conversation(records) == [
            ("user", "list files"),
            ("assistant", None, ["shell"]),
            ("tool", "call_1", "a b"),
            ("assistant", "a and b", []),
        ]


def test_pi_shell_commands_are_what_the_model_was_sent() -> None:
    # ``!cmd`` joins the context in pi's words (fenced output, exit code); ``!!cmd`` is marked
    # excludeFromContext and never reaches the model
    [path] = (REAL / "pi").rglob("*.jsonl")
    store, report = _import("pi", path)
    with store:
        (f,) = report.files
        assert f.problems == []
        assert f.bookkeeping == {"message:bashExecution": 1}
        records = store.read(str(f.thread))
        assert conversation(records) == [
            ("user", "why does the build fail?"),
            ("assistant", "Run it and show me.", []),
            ("user", "Ran `make`\n```\nerror: missing header\n```\n\nCommand exited with code 2"),
            ("assistant", "A header is missing.", []),
        ]
        notes = [r.data["kind"] for r in records if r.type == "custom.import.record"]
        assert notes == ["bashExecution"]


def test_codex_a_compaction_keeps_the_history_codex_kept() -> None:
    # with the OpenAI provider, Codex has the provider compact the history: the compacted
    # line's message is empty and its replacement_history is what the model is given from
    # then on (the user's messages, an encrypted summary, and /undo's ghost snapshot)
    [path] = (REAL / "codex").rglob("rollout-*019bc000-*.jsonl")
    store, report = _import("codex", path)
    with store:
        (f,) = report.files
        assert f.problems == []
        records = store.read(str(f.thread))
        [compaction] = [r.data for r in records if r.type == "compaction"]
        assert compaction["summary"] == (
            "user: port the parser to rust\n\n"
            "user: now add tests\n\n"
            "[the provider's summary of the earlier conversation, encrypted: readable only by "
            "the provider, kept in the compaction's note]"
        )
        assert conversation(records) == [
            ("system", SUMMARY_PREFIX + compaction["summary"]),
            ("user", "what is left to do?"),
            ("assistant", "Wire the parser into the CLI.", []),
        ]
        # the kept history as Codex wrote it, its encrypted item with it
        [kept] = [
            r.data["raw"]
            for r in records
            if r.type == "custom.import.record" and r.data["kind"] == "compacted"
        ]
        assert kept["replacement_history"][3] == {
            "type": "compaction",
            "encrypted_content": "gAAAAABpZ0ZXampleOpaqueSummaryBlob==",
        }


def test_codex_a_compaction_with_its_summary_and_kept_history_says_each_once(
    tmp_path: Path,
) -> None:
    # Codex compacting the history itself writes the summary in message and, in newer
    # versions, the history it rebuilt (the user's messages, then the summary as a user
    # message) in replacement_history
    summary = "Another language model started to solve this problem...\nPorted the parser."
    lines = [
        {"type": "session_meta", "payload": {"id": "s-local", "cli_version": "0.80.0"}},
        {"type": "response_item", "payload": _message("user", "port the parser")},
        {"type": "response_item", "payload": _message("assistant", "Ported.")},
        {
            "type": "compacted",
            "payload": {
                "message": summary,
                "replacement_history": [
                    _message("developer", "<permissions instructions>never ask</...>"),
                    _message("user", "port the parser"),
                    _message("user", summary),
                ],
            },
        },
        {"type": "response_item", "payload": _message("user", "thanks")},
    ]
    path = tmp_path / "rollout-2026-02-01T00-00-00-s-local.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    store, report = _import("codex", path)
    with store:
        (f,) = report.files
        assert f.problems == []
        records = store.read(str(f.thread))
        [compaction] = [r.data for r in records if r.type == "compaction"]
        assert compaction["summary"] == f"user: port the parser\n\nuser: {summary}"


def test_codex_a_compaction_that_kept_nothing_readable_is_not_empty(tmp_path: Path) -> None:
    lines = [
        {"type": "session_meta", "payload": {"id": "s-empty"}},
        {"type": "response_item", "payload": _message("user", "hello")},
        {"type": "compacted", "payload": {"message": "", "replacement_history": []}},
    ]
    path = tmp_path / "rollout-2026-02-02T00-00-00-s-empty.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    store, report = _import("codex", path)
    with store:
        (f,) = report.files
        [compaction] = [r.data for r in store.read(str(f.thread)) if r.type == "compaction"]
        assert compaction["summary"] == "Conversation compacted (Codex kept no message)"


def _message(role: str, text: str) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}
