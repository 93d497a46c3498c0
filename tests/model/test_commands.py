"""Commands (`threadlog.model.commands`): round trip, the wire format, refusal of bad bodies."""

from __future__ import annotations

import re
from typing import Any, get_args

import pytest

from threadlog.errors import UsageError
from threadlog.model.commands import (
    Approve,
    Cancel,
    Command,
    Deny,
    Resolve,
    Submit,
    command_from_data,
)
from threadlog.model.events import Resolution

EXAMPLES: list[Command] = [
    Submit(text="also update the changelog"),
    Submit(text="hi", by="alice"),
    Approve(call_id="call_3_0"),
    Approve(call_id="call_3_0", by="bob", reason="looks right"),
    Deny(call_id="call_3_0", reason="not on production"),
    *(Resolve(call_id="c", decision=d, note="checked") for d in get_args(Resolution)),
    Cancel(),
    Cancel(turn_id="t1"),
]


@pytest.mark.parametrize("command", EXAMPLES, ids=repr)
def test_a_command_round_trips_through_its_data(command: Command) -> None:
    data = command.to_data()
    assert command_from_data(data) == command
    assert command_from_data(dict(data)) is not command  # a new value, equal


def test_every_kind_has_an_example() -> None:
    assert {type(c) for c in EXAMPLES} == set(get_args(Command))


def test_the_wire_format_is_the_inbox_format_of_older_clis() -> None:
    # exactly the keys `threadlog approve/deny/send/resolve/cancel` have always written
    assert Approve(call_id="c", by="cli").to_data() == {
        "kind": "approve",
        "call_id": "c",
        "by": "cli",
        "reason": None,
    }
    assert Deny(call_id="c").to_data() == {
        "kind": "deny",
        "call_id": "c",
        "by": "cli",
        "reason": None,
    }
    assert Submit(text="t").to_data() == {"kind": "input", "text": "t", "by": "cli"}
    assert Resolve(call_id="c", decision="done").to_data() == {
        "kind": "resolve",
        "call_id": "c",
        "decision": "done",
        "by": "cli",
        "note": None,
    }
    assert Cancel().to_data() == {"kind": "cancel"}
    # a cancel names the turn it is for (a newer field: older sessions never see it unset)
    assert Cancel(turn_id="t1").to_data() == {"kind": "cancel", "turn_id": "t1"}


def test_optional_fields_may_be_left_out() -> None:
    assert command_from_data({"kind": "input", "text": "hi"}) == Submit(text="hi", by="cli")
    assert command_from_data({"kind": "approve", "call_id": "c"}) == Approve(call_id="c")
    assert command_from_data({"kind": "resolve", "call_id": "c", "decision": "retry"}) == Resolve(
        call_id="c", decision="retry"
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (["approve", "c"], "a command is a JSON object, not list"),
        (None, "a command is a JSON object, not NoneType"),
        ({}, "unknown command kind None"),
        ({"kind": "shutdown"}, "unknown command kind 'shutdown'"),
        ({"kind": 3}, "unknown command kind 3"),
        ({"kind": "approve"}, "approve: missing field 'call_id'"),
        ({"kind": "approve", "call_id": 7}, "approve: field 'call_id' must be a string"),
        ({"kind": "deny", "call_id": "c", "by": None}, "deny: field 'by' must be a string"),
        (
            {"kind": "deny", "call_id": "c", "reason": 5},
            "deny: field 'reason' must be a string or null",
        ),
        ({"kind": "input"}, "input: missing field 'text'"),
        ({"kind": "input", "text": ["a"]}, "input: field 'text' must be a string"),
        ({"kind": "resolve", "call_id": "c"}, "resolve: missing field 'decision'"),
        (
            {"kind": "resolve", "call_id": "c", "decision": "maybe"},
            "resolve: field 'decision' must be one of 'done', 'retry', 'abort'",
        ),
        ({"kind": "cancel", "turn": "t1"}, "cancel: unknown field 'turn'"),
        ({"kind": "input", "text": "hi", "id": "m1"}, "input: unknown field 'id'"),
    ],
)
def test_a_malformed_body_is_refused(body: Any, message: str) -> None:
    with pytest.raises(UsageError, match="^" + re.escape(message)):
        command_from_data(body)


def test_commands_are_frozen_values() -> None:
    command = Approve(call_id="c")
    with pytest.raises(AttributeError):
        command.call_id = "d"  # type: ignore[misc]
    assert command == Approve(call_id="c") and hash(command) == hash(Approve(call_id="c"))
