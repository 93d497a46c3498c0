"""Pi sessions, versions 1 to 4: the id/parentId tree, branch summaries, compaction, labels,
model and thinking changes, tool results and the migrations."""

from __future__ import annotations

from typing import Any

import pytest

from threadlog import open_store
from threadlog.importers import import_paths, source_format
from threadlog.model.reducer import replay

from ._helpers import FIXTURES, anchor, conversation, import_lines

V3 = "b2c4e6f8-1a3c-4e5f-8a9b-0c1d2e3f4a5b"
KEY = f"pi:{V3}"


@pytest.fixture
def imported() -> Any:
    with open_store("memory://") as store:
        report = import_paths(store, source_format("pi"), [str(FIXTURES / "pi")])
        yield store, report.files


def _file(imported: Any, fragment: str) -> Any:
    store, files = imported
    [found] = [f for f in files if fragment in f.path]
    return store, found


def test_the_abandoned_branch(imported: Any) -> None:
    store, f = _file(imported, V3)
    assert conversation(store.read(f.thread), anchor(KEY, "e0000006")) == [
        ("user", "What does main.py do?"),
        ("assistant", "Let me read it.", ["read"]),
        ("tool", "toolu_p1", "print('hello')"),
        ("assistant", "It prints hello.", []),
    ]


def test_the_active_branch_as_pi_builds_it(imported: Any) -> None:
    """Pi's context at the last entry: the compaction summary, the kept entries from
    firstKeptEntryId, then what follows the compaction."""
    store, f = _file(imported, V3)
    records = store.read(f.thread)
    active = conversation(records)
    assert active[0] == (
        "system",
        "Summary of the earlier conversation (compacted; the full log is kept):\n"
        "User wants main.py to greet the world; writing it failed.",
    )
    assert active[1:] == [
        ("assistant", None, ["write"]),
        ("tool", "toolu_p2", "error: permission denied"),
        ("assistant", "The write failed: permission denied.", []),
        ("user", "Ran `ls -l main.py`\n```\n-r--r--r-- main.py\n```"),
        ("assistant", "The file is read-only.", []),
    ]
    before = conversation(records, anchor(KEY, "e0000011"))
    assert before[:3] == [
        ("user", "What does main.py do?"),
        (
            "system",
            "An abandoned branch of this conversation, summarized:\nRead main.py; it prints hello.",
        ),
        ("user", "Rewrite main.py to greet the world"),
    ]


def test_settings_labels_usage(imported: Any) -> None:
    store, f = _file(imported, V3)
    records = store.read(f.thread)
    state = replay(records)
    assert state.labels == {anchor(KEY, "e0000006"): "answer"}
    assert state.usage["input_tokens"] == 120 * 5
    assert round(state.usage["cost"], 6) == round(0.0009 * 5, 6)
    changes = [r.data["changes"] for r in records if r.type == "config.changed"]
    assert changes == [
        {"model": "claude-sonnet-4-5", "provider": "anthropic"},
        {"thinking": "medium"},
    ]
    assert [(p.line, p.kind) for p in f.problems] == [(17, "unknown_type")]
    assert f.bookkeeping == {"custom": 1}  # an extension's state: a note, no problem
    assert store.read(f.thread, limit=1)[0].data["config"]["import"]["version"] == "3"


def test_version_1_is_linear_and_its_compaction_keeps_by_index(imported: Any) -> None:
    store, f = _file(imported, "c3d5e7f9")
    active = conversation(store.read(f.thread))
    assert active == [
        (
            "system",
            "Summary of the earlier conversation (compacted; the full log is kept):\nGreeted.",
        ),
        ("user", "tell me more"),
        ("assistant", "more", []),
    ]
    assert store.read(f.thread, limit=1)[0].data["config"]["import"]["version"] == "1"


def test_version_2_hook_messages_are_custom_messages(imported: Any) -> None:
    store, f = _file(imported, "d4e6f8a0")
    assert conversation(store.read(f.thread)) == [
        ("user", "start"),
        ("user", "remember the style guide"),
        ("assistant", "ok", []),
    ]


def test_version_4_reads_like_3(imported: Any) -> None:
    store, f = _file(imported, "e5f7a9b1")
    assert f.problems == []
    assert conversation(store.read(f.thread)) == [("user", "v4 hello"), ("assistant", "v4 hi", [])]


def test_an_extension_message_is_user_text(tmp_path: Any) -> None:

    entries = [
        {
            "type": "session",
            "version": 3,
            "id": "ext",
            "timestamp": "2026-01-01T00:00:00Z",
            "cwd": "/home/user/project",
        },
        {
            "type": "message",
            "id": "a",
            "parentId": None,
            "timestamp": "t",
            "message": {"role": "user", "content": "hi"},
        },
        {
            "type": "custom_message",
            "id": "b",
            "parentId": "a",
            "timestamp": "t",
            "customType": "note",
            "content": [{"type": "text", "text": "extension says"}],
            "display": True,
        },
        {
            "type": "branch_summary",
            "id": "c",
            "parentId": "b",
            "timestamp": "t",
            "fromId": "gone",
            "summary": "s",
        },
    ]
    _, records = import_lines(tmp_path / "ext.jsonl", "pi", entries)
    assert conversation(records) == [
        ("user", "hi"),
        ("user", "extension says"),
        ("system", "An abandoned branch of this conversation, summarized:\ns"),
    ]


def test_a_failed_or_cut_off_response_is_a_note_not_part_of_the_conversation(
    tmp_path: Any,
) -> None:
    # Pi drops an assistant message that ended with an error or was aborted from every
    # context it builds (the model retries from the last good state): it is kept, as a note
    # with its error, but the conversation goes on without it, as Pi's does.

    def message(id_: str, parent: str | None, body: dict[str, Any]) -> dict[str, Any]:
        return {"type": "message", "id": id_, "parentId": parent, "timestamp": "t", "message": body}

    entries = [
        {"type": "session", "version": 3, "id": "err", "timestamp": "2026-01-01T00:00:00Z",
         "cwd": "/home/user/project"},
        message("a", None, {"role": "user", "content": "hi"}),
        message("b", "a", {"role": "assistant", "content": [], "stopReason": "error",
                           "errorMessage": "overloaded"}),
        message("c", "b", {"role": "assistant", "stopReason": "aborted", "content": [
            {"type": "text", "text": "half a"},
            {"type": "toolCall", "id": "x1", "name": "bash", "arguments": {"command": "ls"}}]}),
        message("d", "c", {"role": "user", "content": "again"}),
        message("e", "d", {"role": "assistant", "stopReason": "stop",
                           "content": [{"type": "text", "text": "hello"}]}),
    ]  # fmt: skip
    f, records = import_lines(tmp_path / "err.jsonl", "pi", entries)
    assert f.problems == []
    assert f.bookkeeping["assistant:error"] == 1 and f.bookkeeping["assistant:aborted"] == 1
    assert conversation(records) == [("user", "hi"), ("user", "again"), ("assistant", "hello", [])]
    notes = [r.data for r in records if r.type == "custom.import.record"]
    assert any(n.get("raw", {}).get("errorMessage") == "overloaded" for n in notes)
