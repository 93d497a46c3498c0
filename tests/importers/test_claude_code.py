"""Claude Code sessions: the tree, the side-chains, the compaction and every odd line.

The expected conversations are read from the source file by a small independent walker
(``parentUuid`` from a leaf to the root), so the test checks the importer against the format,
not against itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from threadlog import open_store
from threadlog.importers import import_paths, source_format
from threadlog.model.reducer import replay

from ._helpers import FIXTURES, anchor, conversation, import_lines

SESSION = "7d3c2a10-5b6e-4f1a-9c8d-0e1f2a3b4c5d"
KEY = f"claude-code:{SESSION}"
MAIN = FIXTURES / "claude-code" / "-home-user-project" / f"{SESSION}.jsonl"


def _source_lines() -> dict[str, dict[str, Any]]:
    by_uuid = {}
    for raw in MAIN.read_text().splitlines():
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        if isinstance(obj, dict) and "uuid" in obj:
            by_uuid[obj["uuid"]] = obj
    return by_uuid


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(b["text"] for b in content if b.get("type") == "text")


def source_path(leaf: str) -> list[tuple[Any, ...]]:
    """What Claude Code resumes at ``leaf``: the messages from the root to it."""
    lines = _source_lines()
    chain = []
    node: str | None = leaf
    while node is not None:
        obj = lines[node]
        chain.append(obj)
        node = obj.get("parentUuid")
    out: list[tuple[Any, ...]] = []
    for obj in reversed(chain):
        if obj["type"] == "system":
            continue
        content = obj["message"]["content"]
        if obj["type"] == "user":
            results = (
                [b for b in content if b.get("type") == "tool_result"]
                if isinstance(content, list)
                else []
            )
            for b in results:
                text = _text(b["content"])
                out.append(
                    ("tool", b["tool_use_id"], f"error: {text}" if b.get("is_error") else text)
                )
            if not results:
                out.append(("user", _text(content)))
        else:
            texts = [b["text"] for b in content if b["type"] == "text"]
            calls = [b["name"] for b in content if b["type"] == "tool_use"]
            out.append(("assistant", "".join(texts) if texts else None, calls))
    return out


@pytest.fixture
def imported() -> Any:
    with open_store("memory://") as store:
        report = import_paths(store, source_format("claude-code"), [str(FIXTURES / "claude-code")])
        yield store, report


def _main(imported: Any) -> Any:
    store, report = imported
    [main] = [f for f in report.files if f.path.endswith(f"{SESSION}.jsonl")]
    return store, main


def test_every_branch_is_the_source_path(imported: Any) -> None:
    store, main = _main(imported)
    records = store.read(main.thread)
    for leaf in ("a4", "a6"):
        assert conversation(records, anchor(KEY, leaf)) == source_path(leaf)


def test_the_active_conversation_is_the_newest_leaf_after_the_compaction(imported: Any) -> None:
    store, main = _main(imported)
    records = store.read(main.thread)
    active = conversation(records)
    # Claude Code resumes at the last line, a7: its chain stops at the compact boundary.
    assert active[1:] == source_path("a7")
    assert active[0][0] == "system" and "Conversation compacted" in active[0][1]
    state = replay(records)
    assert state.leaf == anchor(KEY, "a7")
    [compaction] = state.compactions
    assert compaction["tokens_before"] == 12345
    assert compaction["last_entry"] == anchor(KEY, "sys1")  # the boundary's logical parent


def test_usage_is_counted_once_per_message_and_models_and_times_are_kept(imported: Any) -> None:
    store, main = _main(imported)
    records = store.read(main.thread)
    state = replay(records)
    # six API messages (msg_A twice in the file, counted once), 10 input tokens each
    assert state.usage["input_tokens"] == 60
    responded = [r for r in records if r.type == "model.responded"]
    assert {r.data["message"]["model"] for r in responded} == {"claude-sonnet-4-20250514"}
    thinking = responded[0].data["message"]["thinking"]
    assert thinking == [
        {"type": "thinking", "thinking": "I should run ls.", "signature": "c2lnbmF0dXJlLUE="}
    ]
    [progress] = [r for r in records if r.type == "custom.import.progress"]
    assert progress.data["times"][anchor(KEY, "u1")] == "2025-09-01T10:00:01.000Z"


def test_thread_created_names_the_source(imported: Any) -> None:
    store, main = _main(imported)
    first = store.read(main.thread, limit=1)[0]
    meta = first.data["config"]["import"]
    assert meta["format"] == "claude-code"
    assert meta["version"] == "1.0.98"
    assert meta["session"] == SESSION
    assert meta["source"] == str(MAIN)
    assert first.data["config"]["cwd"] == "/home/user/project"
    assert first.data["title"] == "List the files"


def test_side_chains_become_child_threads_with_lineage(imported: Any) -> None:
    store, report = imported
    _, main = _main(imported)
    [side] = main.children
    assert conversation(store.read(side)) == [
        ("user", "Search for TODOs"),
        ("assistant", "Found 3 TODOs.", []),
    ]
    lineage = store.read(side, limit=1)[0].data["lineage"]
    assert lineage["thread"] == main.thread and lineage["kind"] == "subagent"
    [agent] = [f for f in report.files if "subagents" in f.path]
    first = store.read(agent.thread, limit=1)[0].data
    assert first["lineage"]["thread"] == main.thread
    assert first["lineage"]["agent"] == "a1b2c3"
    assert conversation(store.read(agent.thread)) == [
        ("user", "Find the config file"),
        ("assistant", None, ["Glob"]),
        ("tool", "toolu_g1", "pyproject.toml"),
        ("assistant", "It is pyproject.toml.", []),
    ]


def test_odd_lines_are_reported_and_kept(imported: Any) -> None:
    store, main = _main(imported)
    kinds = {(p.line, p.kind) for p in main.problems}
    assert kinds == {
        (10, "malformed"),
        (18, "broken_parent"),
        (23, "torn_tail"),
    }
    # Claude Code's own bookkeeping lines are no problem: counted by type, and kept
    assert main.bookkeeping == {
        "summary": 1,
        "file-history-snapshot": 1,
        "queue-operation": 1,
        "system:informational": 1,
    }
    records = store.read(main.thread)
    notes = [r.data for r in records if r.type == "custom.import.record"]
    assert {n["kind"] for n in notes} >= {
        "summary",
        "file-history-snapshot",
        "queue-operation",
        "malformed",
        "system:informational",
    }
    # the prompt whose parent is missing continues the root, on a branch of its own
    orphan = next(r for r in records if r.id == anchor(KEY, "orphan"))
    assert orphan.type == "turn.started"
    assert main.lines == 22  # the torn 23rd line is left for the next import


def test_a_line_of_a_type_claude_code_does_not_write_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "s1.jsonl"
    lines = [
        {"type": "user", "uuid": "u1", "parentUuid": None, "message": {"content": "hi"}},
        {"type": "zzz-new-thing", "sessionId": "s1", "value": 1},
        {"type": "zzz-chained-thing", "uuid": "z1", "parentUuid": "u1"},
        {"type": "last-prompt", "lastPrompt": "hi", "sessionId": "s1"},
        {"type": "assistant", "uuid": "a1", "parentUuid": "z1", "message": {"content": "Hi."}},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    store = open_store("memory://")
    with store:
        (f,) = import_paths(store, source_format("claude-code"), [str(path)]).files
        assert [(p.line, p.kind, p.message) for p in f.problems] == [
            (2, "unknown_type", "record type 'zzz-new-thing' kept as a note"),
            (3, "unknown_type", "record type 'zzz-chained-thing' kept as a note"),
        ]
        assert f.bookkeeping == {"last-prompt": 1}
        records = store.read(str(f.thread))
        notes = [r.data["kind"] for r in records if r.type == "custom.import.record"]
        assert notes == ["zzz-new-thing", "zzz-chained-thing", "last-prompt"]
        assert conversation(records) == [("user", "hi"), ("assistant", "Hi.", [])]


def test_a_bom_is_skipped_and_reported(imported: Any) -> None:
    store, report = imported
    [other] = [f for f in report.files if "-home-user-other" in f.path]
    assert [(p.line, p.kind) for p in other.problems] == [(1, "bom")]
    assert conversation(store.read(other.thread)) == [("user", "hello"), ("assistant", "Hi!", [])]


def test_every_imported_thread_verifies(imported: Any) -> None:
    store, report = imported
    for f in report.files:
        for thread in [f.thread, *f.children]:
            assert store.verify(thread).ok, thread


def test_a_single_file_path(tmp_path: Path) -> None:
    with open_store("memory://") as store:
        report = import_paths(store, source_format("claude-code"), [str(MAIN)])
        assert [f.status for f in report.files] == ["imported"]


def test_a_large_tool_output_goes_to_the_artifact_store(store: Any, tmp_path: Path) -> None:
    from threadlog.export import load_records, openai_messages
    from threadlog.model.refs import is_artifact_ref

    big = "line of output\n" * 20_000
    lines = [
        {
            "type": "user",
            "uuid": "x1",
            "parentUuid": None,
            "sessionId": "big",
            "message": {"role": "user", "content": "dump it"},
        },
        {
            "type": "assistant",
            "uuid": "x2",
            "parentUuid": "x1",
            "message": {
                "id": "m",
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "Bash",
                        "input": {"command": "cat big"},
                    }
                ],
            },
        },
        {
            "type": "user",
            "uuid": "x3",
            "parentUuid": "x2",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": big}],
            },
        },
    ]
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    [f] = import_paths(store, source_format("claude-code"), [str(path)]).files
    [finished] = [r for r in store.read(f.thread) if r.type == "tool_call.finished"]
    assert is_artifact_ref(finished.data["result"])
    assert openai_messages(load_records(store, f.thread))[-1]["content"] == big
    assert store.verify(f.thread).ok


def test_text_beside_tool_results_joins_the_running_turn(tmp_path: Path) -> None:
    lines = [
        {
            "type": "user",
            "uuid": "m1",
            "parentUuid": None,
            "sessionId": "mixed",
            "message": {"role": "user", "content": "run it"},
        },
        {
            "type": "assistant",
            "uuid": "m2",
            "parentUuid": "m1",
            "message": {
                "id": "a",
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "make"}},
                    {
                        "type": "tool_use",
                        "id": "t2",
                        "name": "Bash",
                        "input": {"command": "make test"},
                    },
                ],
            },
        },
        {
            "type": "user",
            "uuid": "m3",
            "parentUuid": "m2",
            "message": {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "built"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "t2",
                        "content": [
                            {"type": "text", "text": "1 failed"},
                            {"type": "image", "source": {}},
                        ],
                        "is_error": True,
                    },
                    {"type": "text", "text": "[Request interrupted by user]"},
                ],
            },
        },
        {
            "type": "assistant",
            "uuid": "m4",
            "parentUuid": "m3",
            "message": {
                "id": "b",
                "role": "assistant",
                "content": [{"type": "text", "text": "Stopped."}],
            },
        },
    ]
    f, records = import_lines(tmp_path / "mixed.jsonl", "claude-code", lines)
    state = replay(records)
    assert f.problems == []
    assert conversation(records) == [
        ("user", "run it"),
        ("assistant", None, ["Bash", "Bash"]),
        ("tool", "t1", "built"),
        ("tool", "t2", "error: 1 failed\n[image]"),
        ("user", "[Request interrupted by user]"),
        ("assistant", "Stopped.", []),
    ]
    assert len(state.turns) == 1 and len(state.inputs) == 1


def test_a_bom_is_reported_once_not_at_each_growth(tmp_path: Any) -> None:
    """Reported when the file is read from its start; a grown file's import reads on from
    where it stopped and does not say it again."""
    from threadlog import open_store
    from threadlog.importers import import_paths, source_format

    path = tmp_path / "7d3c2a10-5b6e-4f1a-9c8d-0e1f2a3b4c5e.jsonl"
    line = (
        '{{"parentUuid":{parent},"isSidechain":false,"type":"user","uuid":"{uuid}",'
        '"sessionId":"7d3c2a10-5b6e-4f1a-9c8d-0e1f2a3b4c5e",'
        '"timestamp":"2025-09-01T10:00:00.000Z","message":{{"role":"user","content":"{text}"}}}}\n'
    )
    path.write_bytes(b"\xef\xbb\xbf" + line.format(parent="null", uuid="u1", text="hi").encode())
    home = str(tmp_path / "home")
    kinds = []
    for n in range(2, 4):
        with open_store(home) as store:
            [f] = import_paths(store, source_format("claude-code"), [str(path)]).files
        kinds.append([p.kind for p in f.problems])
        with open(path, "a") as out:
            out.write(line.format(parent=f'"u{n - 1}"', uuid=f"u{n}", text=f"more {n}"))
    with open_store(home) as store:
        [f] = import_paths(store, source_format("claude-code"), [str(path)]).files
    kinds.append([p.kind for p in f.problems])
    assert kinds == [["bom"], [], []]
    assert f.status == "grown"


def test_a_skills_instructions_after_its_call_join_the_running_turn(tmp_path: Path) -> None:
    # Claude Code runs a skill as a ``Skill`` tool call whose result says it launched, then
    # adds the skill's instructions as a user line marked ``isMeta`` under that result: part
    # of the same turn (it used to start a turn of its own, with the skill's text as input).
    # A meta line that follows no tool result (a command's caveat) still starts a turn.
    lines = [
        {"type": "user", "uuid": "k1", "parentUuid": None, "sessionId": "skill",
         "message": {"role": "user", "content": "tidy the repo"}},
        {"type": "assistant", "uuid": "k2", "parentUuid": "k1",
         "message": {"id": "a", "role": "assistant", "content": [
             {"type": "tool_use", "id": "s1", "name": "Skill", "input": {"skill": "tidy"}}]}},
        {"type": "user", "uuid": "k3", "parentUuid": "k2",
         "message": {"role": "user", "content": [
             {"type": "tool_result", "tool_use_id": "s1", "content": "Launching skill: tidy"}]}},
        {"type": "user", "uuid": "k4", "parentUuid": "k3", "isMeta": True,
         "message": {"role": "user", "content": [
             {"type": "text", "text": "Base directory for this skill: /s/tidy\n\n# Tidy"}]}},
        {"type": "assistant", "uuid": "k5", "parentUuid": "k4",
         "message": {"id": "b", "role": "assistant", "content": [
             {"type": "text", "text": "Tidied."}]}},
        {"type": "user", "uuid": "k6", "parentUuid": "k5", "isMeta": True,
         "message": {"role": "user", "content": "Caveat: the messages below were generated "
                     "by the user while running local commands."}},
        {"type": "user", "uuid": "k7", "parentUuid": "k6",
         "message": {"role": "user", "content": "<command-name>/cost</command-name>"}},
    ]  # fmt: skip
    f, records = import_lines(tmp_path / "skill.jsonl", "claude-code", lines)
    state = replay(records)
    assert f.problems == []
    assert conversation(records) == [
        ("user", "tidy the repo"),
        ("assistant", None, ["Skill"]),
        ("tool", "s1", "Launching skill: tidy"),
        ("user", "Base directory for this skill: /s/tidy\n\n# Tidy"),
        ("assistant", "Tidied.", []),
        ("user", "Caveat: the messages below were generated by the user while running local commands."),
        ("user", "<command-name>/cost</command-name>"),
    ]  # fmt: skip
    inputs = [t.input for t in state.turns.values()]
    assert inputs[0] == "tidy the repo" and len(inputs) == 3
    assert not any(i and i.startswith("Base directory") for i in inputs)
