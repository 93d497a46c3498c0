"""What ``show`` and ``tail`` say about a record (`threadlog.cli._describe.describe`)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.model.records import make_record

from threadlog.cli._describe import describe


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"context": {"messages": [{}, {}, {}]}}, "model call with 3 messages"),
        # a later step records its context as a delta over the step before (linear storage):
        # two slices of the base's messages and one message it did not have
        ({"delta": {"messages": [[0, 4], {"role": "user"}, [5, 7]]}}, "model call with 7 messages"),
        ({}, "model call"),  # an imported step: its context is unknown
    ],
)
def test_a_step_says_how_many_messages_it_sent(data: dict[str, Any], said: str) -> None:
    record = make_record(("step.started", {"turn_id": "t", "step_id": "s", **data}), ord=3)
    assert describe(record).plain == said
