"""`threadlog.model.state.trim`: a state without its finished history's payloads admits and
refuses exactly what the whole state does."""

from __future__ import annotations

import copy

import pytest

from tests.model.records import Chain, agent_turn, created
from threadlog.errors import InvalidTransition
from threadlog.model.events import (
    Event,
    InputConsumed,
    InputQueued,
    StepStarted,
    ToolCallFinished,
    ToolCallStarted,
    TurnEnded,
    TurnStarted,
)
from threadlog.model.reducer import apply
from threadlog.model.state import trim


def _log(turns: int, *, last_running: bool) -> Chain:
    chain = Chain()
    chain.add(created())
    for n in range(1, turns + 1):
        chain.add(*agent_turn(n, end=not (last_running and n == turns), steer=True))
    return chain


def test_trim_drops_the_payloads_of_turns_before_the_latest() -> None:
    state = _log(3, last_running=False).state()
    whole = copy.deepcopy(state)
    assert trim(state) is True
    assert state.trimmed and not whole.trimmed
    for n in (1, 2):
        assert state.turns[f"t{n}"].input == ""
        assert state.inputs[f"i{n}"].text == ""
        call = state.tool_calls[f"c{n}"]
        assert (call.args, call.result, call.intent, call.error) == ({}, None, None, None)
        assert call.status == "finished" and call.ok is True
    # the latest turn is kept whole (a resumed session continues an interrupted one's input)
    assert state.turns["t3"] == whole.turns["t3"]
    assert state.tool_calls["c3"] == whole.tool_calls["c3"]
    assert state.inputs["i3"] == whole.inputs["i3"]
    # what the reducer checks is all there
    for name in ("turns", "steps", "tool_calls", "inputs"):
        assert getattr(state, name).keys() == getattr(whole, name).keys()
    assert (state.last_ord, state.last_hash, state.leaf) == (
        whole.last_ord,
        whole.last_hash,
        whole.leaf,
    )
    assert trim(state) is False  # nothing more to drop


def test_the_running_turn_is_kept_whole() -> None:
    state = _log(2, last_running=True).state()
    assert trim(state) is True  # (turn 1's payloads)
    assert state.turns["t2"].status == "running"
    assert state.turns["t2"].input.startswith("question 2")
    assert state.tool_calls["c2"].result == {"text": "r" * 2000}


def test_nothing_to_drop_leaves_the_state_untrimmed() -> None:
    chain = Chain()
    chain.add(created(), ("custom.note", {"text": "x" * 500}))
    state = chain.state()
    assert trim(state) is False
    assert not state.trimmed


@pytest.mark.parametrize(
    "event",
    [
        TurnStarted(turn_id="t1", input="again"),  # a turn id used before
        TurnStarted(turn_id="t9", input="new"),
        ToolCallFinished(call_id="c1", ok=True, result=1),  # a finished call, again
        ToolCallStarted(call_id="c2"),
        InputConsumed(input_id="i1", turn_id="t3"),
        InputQueued(input_id="i1", text="same id"),
        StepStarted(turn_id="t3", step_id="s1"),
        TurnEnded(turn_id="t1", outcome="completed"),
    ],
    ids=lambda e: e.type,
)
def test_a_trimmed_state_admits_and_refuses_what_the_whole_one_does(event: Event) -> None:
    chain = _log(3, last_running=False)
    whole, trimmed = chain.state(), chain.state()
    trim(trimmed)
    record = chain.next(event)
    verdicts = []
    for state in (whole, trimmed):
        try:
            apply(state, record)
            verdicts.append("admitted")
        except InvalidTransition as exc:
            verdicts.append(f"refused: {exc}")
    assert verdicts[0] == verdicts[1]


def test_the_queued_input_a_finished_turn_started_from_is_dropped_too() -> None:
    """A turn started from a queued input (``turn.started``'s ``input_id``) does not list it
    among the inputs it consumed; its text goes once the turn is over and done, as a
    steering input's does. A queued input no turn took yet is kept."""
    chain = Chain()
    chain.add(
        created(),
        ("input.queued", {"input_id": "q1", "text": "first " * 200}),
        ("turn.started", {"turn_id": "t1", "input": "first " * 200, "input_id": "q1"}),
        ("turn.ended", {"turn_id": "t1", "outcome": "completed"}),
        ("input.queued", {"input_id": "q2", "text": "second"}),
        ("turn.started", {"turn_id": "t2", "input": "second", "input_id": "q2"}),
        ("turn.ended", {"turn_id": "t2", "outcome": "completed"}),
        ("input.queued", {"input_id": "q3", "text": "waiting"}),
    )
    state = chain.state()
    assert trim(state) is True
    assert state.inputs["q1"].text == "" and state.inputs["q1"].consumed_by == "t1"
    assert state.inputs["q2"].text == "second"  # the latest turn's: kept whole
    assert [i.text for i in state.pending_inputs] == ["waiting"]
