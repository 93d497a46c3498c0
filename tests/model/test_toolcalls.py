"""The tool-call lifecycle table, checked on its own and through the reducer."""

from __future__ import annotations

import copy
from typing import Any, get_args

import pytest

from tests.model.records import Chain, created
from threadlog.errors import InvalidTransition
from threadlog.model.events import (
    Event,
    ToolCallApproved,
    ToolCallCancelled,
    ToolCallDenied,
    ToolCallFinished,
    ToolCallProposed,
    ToolCallResolved,
    ToolCallStarted,
    ToolCallUnknown,
    TurnStarted,
)
from threadlog.model.reducer import apply
from threadlog.model.toolcalls import TERMINAL, TRANSITIONS, ToolCallStatus, next_state

STATES = list(get_args(ToolCallStatus))
EVENT_KEYS = [
    "tool_call.proposed",
    "tool_call.approved",
    "tool_call.denied",
    "tool_call.started",
    "tool_call.finished",
    "tool_call.unknown",
    "tool_call.resolved:done",
    "tool_call.resolved:retry",
    "tool_call.resolved:abort",
    "tool_call.resolved",  # a resolution without a decision is never a key
    "tool_call.cancelled",
    "turn.started",
]
PAIRS = [(s, k) for s in STATES for k in EVENT_KEYS]
LEGAL = [(s, k) for s, k in PAIRS if k in TRANSITIONS[s]]
ILLEGAL = [(s, k) for s, k in PAIRS if k not in TRANSITIONS[s]]


def test_the_table_covers_exactly_the_statuses() -> None:
    assert set(TRANSITIONS) == set(STATES)
    for moves in TRANSITIONS.values():
        assert set(moves) <= set(EVENT_KEYS)
        assert set(moves.values()) <= set(STATES)


def test_the_documented_lifecycle() -> None:
    assert TRANSITIONS == {
        "proposed": {
            "tool_call.approved": "approved",
            "tool_call.denied": "denied",
            "tool_call.cancelled": "cancelled",
        },
        "approved": {"tool_call.started": "running", "tool_call.cancelled": "cancelled"},
        "running": {
            "tool_call.finished": "finished",
            "tool_call.unknown": "unknown",
            "tool_call.started": "running",
        },
        "unknown": {
            "tool_call.resolved:done": "done",
            "tool_call.resolved:retry": "approved",
            "tool_call.resolved:abort": "aborted",
        },
        "denied": {},
        "finished": {},
        "done": {},
        "aborted": {},
        "cancelled": {},
    }


def test_terminal_states_have_no_moves() -> None:
    assert frozenset({"denied", "finished", "done", "aborted", "cancelled"}) == TERMINAL
    for state in TERMINAL:
        assert TRANSITIONS[state] == {}
    for state in set(STATES) - TERMINAL:
        assert TRANSITIONS[state]


def test_every_state_is_reachable_from_proposed() -> None:
    seen, todo = {"proposed"}, ["proposed"]
    while todo:
        for target in TRANSITIONS[todo.pop()].values():
            if target not in seen:
                seen.add(target)
                todo.append(target)
    assert seen == set(STATES)


@pytest.mark.parametrize(("state", "key"), LEGAL)
def test_legal_moves(state: str, key: str) -> None:
    assert next_state(state, key, "c1") == TRANSITIONS[state][key]


@pytest.mark.parametrize(("state", "key"), ILLEGAL)
def test_every_other_pair_raises_naming_state_event_and_call(state: str, key: str) -> None:
    with pytest.raises(InvalidTransition) as info:
        next_state(state, key, "call-42")
    message = str(info.value)
    assert state in message and key in message and "'call-42'" in message
    assert info.value.ord is None  # the reducer adds it


def test_an_unknown_state_raises_too() -> None:
    with pytest.raises(InvalidTransition, match="'c1' is bogus"):
        next_state("bogus", "tool_call.started", "c1")


# -- through the reducer ---------------------------------------------------------------------

PROPOSE = ToolCallProposed(turn_id="t1", call_id="c1", tool="ls", args={}, side_effect="read_only")
PATHS: dict[str, list[Event]] = {
    "proposed": [PROPOSE],
    "approved": [PROPOSE, ToolCallApproved(call_id="c1", by="p")],
    "denied": [PROPOSE, ToolCallDenied(call_id="c1", by="p")],
    "running": [PROPOSE, ToolCallApproved(call_id="c1", by="p"), ToolCallStarted(call_id="c1")],
}
PATHS["finished"] = [*PATHS["running"], ToolCallFinished(call_id="c1", ok=True)]
PATHS["unknown"] = [*PATHS["running"], ToolCallUnknown(call_id="c1", reason="crash")]
PATHS["done"] = [*PATHS["unknown"], ToolCallResolved(call_id="c1", decision="done", by="b")]
PATHS["aborted"] = [*PATHS["unknown"], ToolCallResolved(call_id="c1", decision="abort", by="b")]
PATHS["cancelled"] = [*PATHS["approved"], ToolCallCancelled(call_id="c1", reason="cancelled")]
RETRIED = [*PATHS["unknown"], ToolCallResolved(call_id="c1", decision="retry", by="b")]


def _event(key: str, attempt: int) -> Event:
    if key.startswith("tool_call.resolved:"):
        decision: Any = key.split(":")[1]
        return ToolCallResolved(call_id="c1", decision=decision, by="b")
    events: dict[str, Event] = {
        "tool_call.approved": ToolCallApproved(call_id="c1", by="p"),
        "tool_call.denied": ToolCallDenied(call_id="c1", by="p"),
        "tool_call.started": ToolCallStarted(call_id="c1", attempt=attempt + 1),
        "tool_call.finished": ToolCallFinished(call_id="c1", ok=False, error="e"),
        "tool_call.unknown": ToolCallUnknown(call_id="c1", reason="r"),
        "tool_call.cancelled": ToolCallCancelled(call_id="c1", reason="r"),
    }
    return events[key]


REDUCER_KEYS = [
    k
    for k in EVENT_KEYS
    if k.startswith("tool_call.") and k not in ("tool_call.proposed", "tool_call.resolved")
]


def test_paths_reach_every_state() -> None:
    assert set(PATHS) == set(STATES)


REDUCER_CASES = [(state, key, PATHS[state]) for state in STATES for key in REDUCER_KEYS] + [
    ("approved", key, RETRIED) for key in REDUCER_KEYS
]


@pytest.mark.parametrize(
    ("state", "key", "path"),
    REDUCER_CASES,
    ids=[f"{s}-{k}-{'retried' if p is RETRIED else 'direct'}" for s, k, p in REDUCER_CASES],
)
def test_the_reducer_follows_the_table(state: str, key: str, path: list[Event]) -> None:
    chain = Chain()
    chain.add(created(), TurnStarted(turn_id="t1", input="x"), *path)
    current = chain.state()
    assert current.tool_calls["c1"].status == state
    record = chain.next(_event(key, current.tool_calls["c1"].attempt))
    if key in TRANSITIONS[state]:
        assert apply(current, record).tool_calls["c1"].status == TRANSITIONS[state][key]
        assert current.tool_calls["c1"].last_ord == record.ord
    else:
        before = copy.deepcopy(current)
        message = f"^ord {record.ord}: tool call 'c1' is {state}: {key} is not allowed"
        with pytest.raises(InvalidTransition, match=message):
            apply(current, record)
        assert current == before


def test_only_a_call_that_never_started_can_be_cancelled() -> None:
    """000 §17.7: cancellation ends calls that did not start; a started one keeps its own
    outcome (a result or unknown), and a cancelled one never runs."""
    assert {s for s in STATES if "tool_call.cancelled" in TRANSITIONS[s]} == {
        "proposed",
        "approved",
    }
    with pytest.raises(InvalidTransition):
        next_state("cancelled", "tool_call.started", "c1")
