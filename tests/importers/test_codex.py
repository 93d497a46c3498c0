"""Codex rollouts: turns, model responses with their usage, tool calls, compaction, the legacy
layout, newer files with ordinals, and a sub-agent's file with its lineage."""

from __future__ import annotations

import shutil
import sys
from typing import Any

import pytest

from threadlog import open_store
from threadlog.importers import import_paths, source_format
from threadlog.model.context import Context
from threadlog.model.reducer import replay

from ._helpers import FIXTURES, anchor, conversation, simple

SESSION = "0199a213-81c0-7800-8aa1-bbab2a035a53"
KEY = f"codex:{SESSION}"


@pytest.fixture
def imported() -> Any:
    with open_store("memory://") as store:
        report = import_paths(store, source_format("codex"), [str(FIXTURES / "codex")])
        yield store, {f.path: f for f in report.files}


def _file(imported: Any, fragment: str) -> Any:
    store, files = imported
    [found] = [f for path, f in files.items() if fragment in path]
    return store, found


def test_the_whole_session_before_its_compaction(imported: Any) -> None:
    store, main = _file(imported, SESSION)
    records = store.read(main.thread)
    before = Context.from_records(records).messages_at(anchor(KEY, "o23"))
    assert simple(before) == [
        ("user", "Run the tests"),
        ("assistant", None, ["shell"]),
        (
            "tool",
            "call_1",
            '{"output":"3 passed","metadata":{"exit_code":0,"duration_seconds":1.2}}',
        ),
        ("assistant", "All 3 tests pass.", []),
        ("user", "Fix the typo in README"),
        ("assistant", None, ["apply_patch"]),
        ("tool", "call_2", '{"output":"Success. Updated README.md","metadata":{"exit_code":0}}'),
        ("user", "also check LICENSE"),
    ]
    call = before[1]["tool_calls"][0]
    assert call["arguments"] == {"command": ["pytest", "-q"], "workdir": "/home/user/project"}
    assert before[1]["thinking"][0]["encrypted_content"] == "gAAAAB-opaque"


def test_the_active_conversation_is_the_compacted_one(imported: Any) -> None:
    store, main = _file(imported, SESSION)
    records = store.read(main.thread)
    active = conversation(records)
    assert active[0][0] == "system" and "fixed a README typo" in active[0][1]
    assert active[1:] == [("assistant", "Fixed; LICENSE is fine.", [])]


def test_turns_usage_and_settings(imported: Any) -> None:
    store, main = _file(imported, SESSION)
    state = replay(store.read(main.thread))
    assert [t.status for t in state.turns.values()] == ["completed", "completed"]
    # usage of the three model responses that a token_count followed
    assert state.usage["input_tokens"] == 900 + 1000 + 300 + 1200
    assert state.config["approval_policy"] == "on-request"
    assert state.config["thinking"] == "high"
    assert state.config["model"] == "gpt-5-codex"
    # "also check LICENSE" arrived while the second turn ran: steering, not a new turn
    assert len(state.inputs) == 1
    first = store.read(main.thread, limit=1)[0].data
    assert first["config"]["import"]["version"] == "0.46.0"
    assert first["config"]["cwd"] == "/home/user/project"
    assert first["title"] == "Run the tests"


def test_odd_lines_are_reported_and_kept(imported: Any) -> None:
    store, main = _file(imported, SESSION)
    assert {(p.line, p.kind) for p in main.problems} == {(15, "malformed"), (16, "unknown_type")}
    # the events, the session meta and the context message are no problem: counted by type
    assert main.bookkeeping == {
        "session_meta": 1,
        "response_item:context": 1,
        "event_msg:task_started": 2,
        "event_msg:user_message": 1,
        "event_msg:agent_message": 1,
    }
    notes = [r.data["kind"] for r in store.read(main.thread) if r.type == "custom.import.record"]
    assert "context" in notes and "malformed" in notes and "future_item" in notes


def test_legacy_layout(imported: Any) -> None:
    store, legacy = _file(imported, "5973b6c0")
    assert legacy.problems == []
    assert conversation(store.read(legacy.thread)) == [
        ("user", "What is 2+2?"),
        ("assistant", "4", []),
    ]
    assert store.read(legacy.thread, limit=1)[0].data["config"]["import"]["layout"] == "legacy"


def test_a_sub_agent_names_its_parent(imported: Any) -> None:
    store, child = _file(imported, "2a035a99")
    _, main = _file(imported, SESSION)
    lineage = store.read(child.thread, limit=1)[0].data["lineage"]
    assert lineage["thread"] == main.thread and lineage["kind"] == "subagent"
    assert conversation(store.read(child.thread)) == [
        ("user", "Review the patch"),
        ("assistant", "Looks good.", []),
    ]


def test_a_rollout_by_another_name_is_found_and_other_files_are_not(tmp_path: Any) -> None:
    day = tmp_path / "sessions" / "2026" / "01" / "02"
    day.mkdir(parents=True)
    (day / "0199a213-0000-7000-8000-000000000001.jsonl").write_text(
        '{"timestamp":"2026-01-02T00:00:00Z","type":"session_meta","payload":{"id":"named-1"}}\n'
    )
    (tmp_path / "history.jsonl").write_text('{"session_id":"x","ts":1,"text":"hi"}\n')
    with open_store("memory://") as store:
        report = import_paths(store, source_format("codex"), [str(tmp_path)])
    assert [f.path.rsplit("/", 1)[-1] for f in report.files] == [
        "0199a213-0000-7000-8000-000000000001.jsonl"
    ]


def test_local_shell_calls_and_an_aborted_turn(tmp_path: Any) -> None:
    def line(kind: str, payload: dict[str, Any]) -> str:
        import json

        return (
            json.dumps({"timestamp": "2026-01-01T00:00:00Z", "type": kind, "payload": payload})
            + "\n"
        )

    path = tmp_path / "rollout-2026-01-01T00-00-00-shell.jsonl"
    path.write_text(
        line("session_meta", {"id": "shell-1", "cwd": "/home/user/project"})
        + line("event_msg", {"type": "task_started"})
        + line(
            "response_item",
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "list"}],
            },
        )
        + line(
            "response_item",
            {
                "type": "local_shell_call",
                "call_id": "ls1",
                "status": "completed",
                "action": {"type": "exec", "command": ["ls"]},
            },
        )
        + line(
            "response_item",
            {
                "type": "function_call_output",
                "call_id": "ls1",
                "output": {"content": "a b", "success": False},
            },
        )
        + line("event_msg", {"type": "turn_aborted", "reason": "interrupted"})
        + line(
            "response_item", {"type": "function_call_output", "call_id": "nope", "output": "late"}
        )
    )
    with open_store("memory://") as store:
        [f] = import_paths(store, source_format("codex"), [str(path)]).files
        records = store.read(f.thread)
        state = replay(records)
    assert conversation(records) == [
        ("user", "list"),
        ("assistant", None, ["local_shell"]),
        ("tool", "ls1", "error: a b"),
    ]
    [turn] = state.turns.values()
    assert (turn.status, turn.reason) == ("aborted", "interrupted")
    assert state.tool_calls["ls1"].args == {"type": "exec", "command": ["ls"]}
    assert [p.kind for p in f.problems] == ["orphan_result"]


def _archived(tmp_path: Any, compressed: bytes) -> tuple[Any, str]:
    """A sessions tree with one plain rollout (a fixture), one archived ``.jsonl.zst`` of
    ``compressed`` bytes, and a compressed copy beside the plain one (which Codex ignores)."""
    sessions = tmp_path / "sessions" / "2025" / "09" / "01"
    sessions.mkdir(parents=True)
    plain = next((FIXTURES / "codex").rglob("rollout-*.jsonl"))
    shutil.copy(plain, sessions / plain.name)
    (sessions / "rollout-2025-09-01T00-00-00-archived.jsonl.zst").write_bytes(compressed)
    (sessions / f"{plain.name}.zst").write_bytes(compressed)  # its plain sibling is there
    return tmp_path / "sessions", plain.name


def _by_name(report: Any) -> dict[str, Any]:
    return {f.path.rsplit("/", 1)[1]: f for f in report.files}


def test_a_compressed_rollout_is_imported_as_its_plain_twin(tmp_path: Any) -> None:
    # Codex keeps older rollouts as ``.jsonl.zst``: read through a zstd decoder, one gives
    # the conversation its plain file gives (written in two frames, as a stream may be).
    zstandard = pytest.importorskip("zstandard")
    twin = next((FIXTURES / "codex").rglob("rollout-*.jsonl"))
    raw = twin.read_bytes()
    half = raw.index(b"\n", len(raw) // 2) + 1
    encoder = zstandard.ZstdCompressor()
    frames = encoder.compress(raw[:half]) + encoder.compress(raw[half:])
    sessions, plain = _archived(tmp_path, frames)
    with open_store(str(tmp_path / "home")) as store:
        report = import_paths(store, source_format("codex"), [str(sessions)])
        files = _by_name(report)
        assert set(files) == {plain, "rollout-2025-09-01T00-00-00-archived.jsonl.zst"}
        archived = files["rollout-2025-09-01T00-00-00-archived.jsonl.zst"]
        assert archived.status == "unchanged" and archived.problems == []
        # the same session id: the archived file is the same thread, its lines known
        assert archived.thread == files[plain].thread and archived.records == 0
    other = tmp_path / "alone"
    other.mkdir()
    (other / "rollout-2025-09-01T00-00-00-archived.jsonl.zst").write_bytes(frames)
    with open_store(str(tmp_path / "home2")) as a, open_store(str(tmp_path / "home3")) as b:
        from_zst = import_paths(a, source_format("codex"), [str(other)]).files[0]
        from_plain = import_paths(b, source_format("codex"), [str(twin)]).files[0]
        assert from_zst.records == from_plain.records > 0
        assert conversation(a.read(from_zst.thread)) == conversation(b.read(from_plain.thread))
        again = import_paths(a, source_format("codex"), [str(other)]).files[0]
        assert again.status == "unchanged"


def test_a_compressed_rollout_that_cannot_be_read_is_reported_and_the_others_are_imported(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a damaged frame, or no decoder installed: the file is reported with what to do, never
    # read as garbage lines nor skipped in silence, and the other files are imported
    sessions, plain = _archived(tmp_path, b"\x28\xb5\x2f\xfd" + bytes(range(40)))
    with open_store(str(tmp_path / "home")) as store:
        files = _by_name(import_paths(store, source_format("codex"), [str(sessions)]))
        archived = files["rollout-2025-09-01T00-00-00-archived.jsonl.zst"]
        assert archived.status == "failed" and archived.thread is None
        assert "cannot be read" in archived.problems[0].message
        assert files[plain].status == "imported"
        assert len(store.thread_ids()) == 1
    monkeypatch.setitem(sys.modules, "zstandard", None)  # no decoder (before Python 3.14)
    monkeypatch.setitem(sys.modules, "compression", None)
    with open_store(str(tmp_path / "home2")) as store:
        files = _by_name(import_paths(store, source_format("codex"), [str(sessions)]))
        archived = files["rollout-2025-09-01T00-00-00-archived.jsonl.zst"]
        assert archived.status == "failed"
        assert "zstd -d" in archived.problems[0].message
        assert "threadlog[zstd]" in archived.problems[0].message
