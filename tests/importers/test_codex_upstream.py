"""Codex rollouts as today's Codex writes them (0.14x, hand-written from its public source):
the rollout items newer than the first five (``world_state``, ``security_risk_score``,
``token_usage_record``, ``inter_agent_communication``…), tool search calls, a message's
``phase`` and a line's ``metadata``, and a ``thread_rolled_back`` event."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from threadlog import open_store
from threadlog.importers import import_paths, source_format
from threadlog.model.reducer import replay

from ._helpers import FIXTURES, anchor, conversation

DAY = FIXTURES / "upstream" / "codex" / "2026" / "05" / "20"
MAIN = "019e4a10-0c2b-7d31-9a55-3f0e6b7c8d01"
SUB = "019e4a10-0c2b-7d31-9a55-3f0e6b7c8d02"
MAIN_FILE = f"rollout-2026-05-20T10-00-00-{MAIN}.jsonl"
SUB_FILE = f"rollout-2026-05-20T10-05-00-{SUB}.jsonl"
ADDED = [
    ("user", "Add the standup to my calendar"),
    ("assistant", None, ["tool_search"]),
    (
        "tool",
        "tsc_1",
        '[{"type":"namespace","name":"calendar","tools":'
        '[{"type":"function","name":"create_event"}]}]',
    ),
    ("assistant", None, ["create_event"]),
    ("tool", "call_1", "created evt_1"),
    ("assistant", "Added the standup at 09:30.", []),
]


@pytest.fixture
def imported() -> Any:
    with open_store("memory://") as store:
        report = import_paths(store, source_format("codex"), [str(DAY)])
        yield store, {Path(f.path).name: f for f in report.files}


def test_the_rollout_items_of_today_s_codex_are_no_problem(imported: Any) -> None:
    _, files = imported
    main, sub = files[MAIN_FILE], files[SUB_FILE]
    assert main.problems == [] and sub.problems == []
    assert main.bookkeeping["world_state"] == 2
    assert main.bookkeeping["security_risk_score"] == 1
    assert main.bookkeeping["token_usage_record"] == 1
    assert main.bookkeeping["event_msg:thread_rolled_back"] == 1
    assert sub.bookkeeping["inter_agent_communication_metadata"] == 1
    # the model's copy of an inter-agent message (imported from its own line)
    assert sub.bookkeeping["response_item:agent_message"] == 1


def test_a_rolled_back_turn_is_left_on_a_branch(imported: Any) -> None:
    store, files = imported
    records = store.read(files[MAIN_FILE].thread)
    # Codex dropped "Invite Bob to it" and its answer from the history: the conversation
    # goes on from before it
    assert conversation(records) == [
        *ADDED,
        ("user", "Invite Carol instead"),
        ("assistant", "Invited Carol.", []),
    ]
    # the turn taken back stays in the thread, on the branch it was on
    key = f"codex:{MAIN}"
    assert conversation(records, anchor(key, "o24"))[-2:] == [
        ("user", "Invite Bob to it"),
        ("assistant", "Invited Bob.", []),
    ]
    state = replay(records)
    assert [t.status for t in state.turns.values()] == ["completed"] * 3


def test_tool_search_calls_are_calls_and_their_results_finish_them(imported: Any) -> None:
    store, files = imported
    state = replay(store.read(files[MAIN_FILE].thread))
    search = state.tool_calls["tsc_1"]
    assert (search.status, search.args) == (
        "finished",
        {"query": "create calendar event", "limit": 5},
    )
    assert state.tool_calls["call_1"].status == "finished"
    # every response a token_count followed, the one taken back too (its tokens were spent)
    assert state.usage["input_tokens"] == 900 + 1100 + 1200 + 1300 + 1250


def test_an_inter_agent_message_is_the_sub_agent_s_prompt(imported: Any) -> None:
    store, files = imported
    records = store.read(files[SUB_FILE].thread)
    assert conversation(records) == [
        ("user", "Message from /root to /root/worker:\nCheck which fields the calendar API needs"),
        ("assistant", "It needs a title and a start time.", []),
        (
            "user",
            "Message from /root to /root/worker:\n[encrypted: readable only by the provider]",
        ),
    ]
    assert len(replay(records).turns) == 2


def _lines(path: Path, upto: int) -> str:
    return "".join(path.read_text().splitlines(keepends=True)[:upto])


def test_a_rollback_at_the_end_of_a_file_moves_the_leaf_and_survives_its_growth(
    tmp_path: Path,
) -> None:
    source = DAY / MAIN_FILE
    path = tmp_path / MAIN_FILE
    with open_store("memory://") as store:
        path.write_text(_lines(source, 28))  # (up to the thread_rolled_back event)
        [first] = import_paths(store, source_format("codex"), [str(path)]).files
        assert conversation(store.read(first.thread)) == ADDED
        shutil.copyfile(source, path)
        [grown] = import_paths(store, source_format("codex"), [str(path)]).files
        assert grown.status == "grown" and grown.problems == []
        assert conversation(store.read(grown.thread)) == [
            *ADDED,
            ("user", "Invite Carol instead"),
            ("assistant", "Invited Carol.", []),
        ]


def test_a_rollback_of_more_turns_than_there_are_keeps_what_came_before_them(
    tmp_path: Path,
) -> None:
    source = DAY / MAIN_FILE
    path = tmp_path / MAIN_FILE
    text = _lines(source, 27) + _lines(source, 28).splitlines(keepends=True)[-1].replace(
        '"num_turns":1', '"num_turns":5'
    )
    path.write_text(text)
    with open_store("memory://") as store:
        [f] = import_paths(store, source_format("codex"), [str(path)]).files
        assert f.problems == []
        assert conversation(store.read(f.thread)) == []
