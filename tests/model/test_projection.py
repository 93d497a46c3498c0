from __future__ import annotations

from typing import Any

import pytest

from tests.model.records import THREAD, Chain, created, make_record
from threadlog.model.events import (
    InputQueued,
    ModelResponded,
    StepStarted,
    ThreadCreated,
    ToolCallApproved,
    ToolCallDenied,
    ToolCallFinished,
    ToolCallProposed,
    ToolCallResolved,
    ToolCallStarted,
    ToolCallUnknown,
    TurnEnded,
    TurnStarted,
)
from threadlog.model.projection import RowChange, project
from threadlog.model.toolcalls import TRANSITIONS


def test_thread_created() -> None:
    record = make_record(
        ThreadCreated(
            format=1,
            principal="alice",
            config={"model": "m"},
            lineage={"thread": "src-thread", "ord": 7, "kind": "fork"},
            title="My thread",
        )
    )
    assert project(record) == [
        RowChange(
            "thread",
            THREAD,
            {
                "principal": "alice",
                "created_at": record.ts,
                "title": "My thread",
                "forked_from": "src-thread",
            },
        )
    ]


def test_thread_created_without_lineage_or_title() -> None:
    record = make_record(created())
    assert project(record) == [
        RowChange(
            "thread",
            THREAD,
            {"principal": "alice", "created_at": record.ts, "title": None, "forked_from": None},
        )
    ]


def test_long_text_is_cut_with_an_ellipsis() -> None:
    record = make_record(ThreadCreated(format=1, principal="p", config={}, title="x" * 300))
    title = project(record)[0].fields["title"]
    assert title == "x" * 199 + "…"
    assert len(title) == 200
    exact = make_record(ThreadCreated(format=1, principal="p", config={}, title="y" * 200))
    assert project(exact)[0].fields["title"] == "y" * 200


def test_turn_started() -> None:
    record = make_record(TurnStarted(turn_id="turn-1", input="z" * 100), ord=2, prev="a" * 64)
    assert project(record) == [
        RowChange(
            "turn",
            "turn-1",
            {"status": "running", "started_ord": 2, "started_at": record.ts, "input": "z" * 100},
        ),
        RowChange("thread", THREAD, {"status": "running", "title_if_empty": "z" * 79 + "…"}),
    ]


@pytest.mark.parametrize("outcome", ["completed", "aborted", "failed", "interrupted"])
def test_turn_ended(outcome: Any) -> None:
    record = make_record(TurnEnded(turn_id="turn-1", outcome=outcome), ord=9, prev="a" * 64)
    assert project(record) == [
        RowChange("turn", "turn-1", {"status": outcome, "ended_ord": 9, "ended_at": record.ts}),
        # (a thread a recovery ended interrupted is one a service may have to take over)
        RowChange(
            "thread", THREAD, {"status": "interrupted" if outcome == "interrupted" else "idle"}
        ),
    ]


def test_tool_call_proposed() -> None:
    event = ToolCallProposed(
        turn_id="turn-1", call_id="c1", tool="ls", args={"p": 1}, side_effect="non_idempotent"
    )
    assert project(make_record(event, ord=4, prev="a" * 64)) == [
        RowChange(
            "tool_call",
            "c1",
            {
                "turn_id": "turn-1",
                "tool": "ls",
                "side_effect": "non_idempotent",
                "status": "proposed",
                "proposed_ord": 4,
                "last_ord": 4,
            },
        )
    ]


@pytest.mark.parametrize(
    ("event", "status"),
    [
        (ToolCallApproved(call_id="c1", by="b"), "approved"),
        (ToolCallDenied(call_id="c1", by="b"), "denied"),
        (ToolCallStarted(call_id="c1"), "running"),
        (ToolCallFinished(call_id="c1", ok=False), "finished"),
        (ToolCallUnknown(call_id="c1", reason="r"), "unknown"),
        (ToolCallResolved(call_id="c1", decision="done", by="b"), "done"),
        (ToolCallResolved(call_id="c1", decision="retry", by="b"), "approved"),
        (ToolCallResolved(call_id="c1", decision="abort", by="b"), "aborted"),
    ],
)
def test_tool_call_status_changes(event: Any, status: str) -> None:
    assert project(make_record(event, ord=5, prev="a" * 64)) == [
        RowChange("tool_call", "c1", {"status": status, "last_ord": 5})
    ]


def test_projected_statuses_agree_with_the_lifecycle_table() -> None:
    for state, moves in TRANSITIONS.items():
        for key, target in moves.items():
            type_, _, decision = key.partition(":")
            data: dict[str, Any] = (
                {"call_id": "c1", "decision": decision} if decision else {"call_id": "c1"}
            )
            (change,) = project(make_record((type_, data), ord=2, prev="a" * 64))
            assert change.fields["status"] == target, (state, key)


@pytest.mark.parametrize(
    "event",
    [
        InputQueued(input_id="i", text="t"),
        StepStarted(turn_id="t", step_id="s"),
        ModelResponded(turn_id="t", step_id="s", message={}),
        ("custom.thing", {"turn_id": "t", "call_id": "c"}),
        (
            "compaction",
            {
                "summary": "s",
                "first_entry": None,
                "last_entry": "e",
                "tokens_before": 1,
                "tokens_after": 1,
            },
        ),
        ("leaf.moved", {"to": None}),
        ("config.changed", {"changes": {}}),
    ],
)
def test_other_types_change_no_rows(event: Any) -> None:
    assert project(make_record(event, ord=3, prev="a" * 64)) == []


GARBAGE: list[Any] = [
    None,
    "text",
    5,
    [],
    ["turn_id"],
    {},
    {"turn_id": 5, "call_id": None},
    {"call_id": ["c"]},
]


@pytest.mark.parametrize("data", GARBAGE)
@pytest.mark.parametrize(
    "type_",
    [
        "turn.started",
        "turn.ended",
        "tool_call.proposed",
        "tool_call.approved",
        "tool_call.denied",
        "tool_call.started",
        "tool_call.finished",
        "tool_call.unknown",
        "tool_call.resolved",
    ],
)
def test_garbage_data_changes_no_rows(type_: str, data: Any) -> None:
    assert project(make_record((type_, data), ord=3, prev="a" * 64)) == []


@pytest.mark.parametrize("decision", ["maybe", None, 1, ""])
def test_a_resolution_with_an_unknown_decision_changes_no_rows(decision: Any) -> None:
    # BUG: project() maps the decision with _RESOLVED_STATUS.get(...) and returns a row with
    # status None for anything else, which would overwrite the index's status with NULL.
    # Every other malformed record projects to []; so should this one.
    record = make_record(
        ("tool_call.resolved", {"call_id": "c1", "decision": decision}), ord=3, prev="a" * 64
    )
    assert project(record) == []


@pytest.mark.parametrize("data", [None, "text", [], {}])
def test_garbage_thread_created_still_names_the_thread(data: Any) -> None:
    record = make_record(("thread.created", data))
    assert project(record) == [
        RowChange(
            "thread",
            THREAD,
            {"principal": None, "created_at": record.ts, "title": None, "forked_from": None},
        )
    ]


def test_projection_agrees_with_the_reducer() -> None:
    chain = Chain()
    chain.add(
        created(),
        TurnStarted(turn_id="t1", input="x"),
        ToolCallProposed(turn_id="t1", call_id="a", tool="ls", args={}, side_effect="read_only"),
        ToolCallProposed(turn_id="t1", call_id="b", tool="ls", args={}, side_effect="read_only"),
        ToolCallProposed(turn_id="t1", call_id="c", tool="ls", args={}, side_effect="read_only"),
        ToolCallApproved(call_id="a", by="p"),
        ToolCallDenied(call_id="b", by="p"),
        ToolCallApproved(call_id="c", by="p"),
        ToolCallStarted(call_id="a"),
        ToolCallStarted(call_id="c"),
        ToolCallFinished(call_id="a", ok=True),
        ToolCallUnknown(call_id="c", reason="crash"),
        TurnEnded(turn_id="t1", outcome="interrupted"),
        ToolCallResolved(call_id="c", decision="retry", by="bob"),
        TurnStarted(turn_id="t2", input="y"),
    )
    tables: dict[tuple[str, str], dict[str, Any]] = {}
    for record in chain.records:
        for change in project(record):
            tables.setdefault((change.table, change.key), {}).update(change.fields)
    state = chain.state()
    for call in state.tool_calls.values():
        row = tables["tool_call", call.call_id]
        assert (row["status"], row["last_ord"], row["proposed_ord"]) == (
            call.status,
            call.last_ord,
            call.proposed_ord,
        )
    for turn in state.turns.values():
        assert tables["turn", turn.turn_id]["status"] == turn.status
    assert tables["thread", THREAD]["status"] == "running"


def test_row_changes_are_frozen() -> None:
    change = RowChange("thread", "t", {})
    with pytest.raises(AttributeError):
        change.table = "turn"  # type: ignore[misc]
