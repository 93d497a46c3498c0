"""The pure parts of issue 10 points 9-11: usage totals, budgets, branch-carried settings."""

from __future__ import annotations

from typing import Any

import pytest

from tests.model.records import created, make_record
from threadlog.errors import UsageError
from threadlog.model.budget import add_usage, check_budget, exceeded, priced
from threadlog.model.envelope import Record
from threadlog.model.events import (
    ConfigChanged,
    Event,
    LeafMoved,
    ModelResponded,
    StepStarted,
    TurnStarted,
)
from threadlog.model.reducer import apply, replay
from threadlog.model.settings import settings_at


class Tree:
    """Records with explicit parents (as a session appends them: on the active leaf)."""

    def __init__(self, first: Event) -> None:
        self.records = [make_record(first)]
        self.state = replay(self.records)

    def add(self, event: Event) -> Record:
        last = self.records[-1]
        record = make_record(event, ord=last.ord + 1, prev=last.hash, parent=self.state.leaf)
        self.records.append(record)
        apply(self.state, record)
        return record


def test_usage_adds_up_per_turn_and_thread_and_a_replay_agrees() -> None:
    tree = Tree(created(budget={"turn_tokens": 100, "thread_cost": 1.0}))
    tree.add(TurnStarted(turn_id="t", input="hi"))
    for n, usage in enumerate(
        [{"input_tokens": 30, "output_tokens": 5, "cost": 0.25, "x": "text"}, {"output_tokens": 1}]
    ):
        tree.add(StepStarted(turn_id="t", step_id=f"s{n}"))
        tree.add(ModelResponded(turn_id="t", step_id=f"s{n}", message={}, usage=usage))
    want = {"input_tokens": 30, "output_tokens": 6, "cost": 0.25}
    assert tree.state.usage == tree.state.turns["t"].usage == want
    assert replay(tree.records).usage == want
    assert exceeded(tree.state, "t") is None
    tree.add(StepStarted(turn_id="t", step_id="s9"))
    tree.add(ModelResponded(turn_id="t", step_id="s9", message={}, usage={"input_tokens": 64}))
    assert exceeded(tree.state, "t") == "budget exceeded: turn_tokens 100 of 100"


def test_add_usage_priced_and_check_budget() -> None:
    total: dict[str, Any] = {}
    add_usage(total, {"input_tokens": 1, "flag": True, "cost": 0.5})
    add_usage(total, "not a usage")
    assert total == {"input_tokens": 1, "cost": 0.5}
    prices = {"m": {"input": 1.0, "output": 4.0}}
    assert priced({"input_tokens": 1_000_000, "output_tokens": 10}, "m", prices)["cost"] == (
        pytest.approx(1.00004)
    )
    assert priced({"cost": 9}, "m", prices) == {"cost": 9}  # the provider's own figure wins
    assert priced({"input_tokens": 5}, "other", prices) == {"input_tokens": 5}
    assert check_budget({"thread_cost": 2}) == {"thread_cost": 2}
    with pytest.raises(UsageError, match="unknown budget key"):
        check_budget({"tokens": 1})


def test_branch_carried_settings_follow_the_leaf_and_thread_settings_the_log() -> None:
    tree = Tree(created(model="a", tools=["x"], instructions="i1"))
    one = tree.add(TurnStarted(turn_id="t1", input="one"))
    change = tree.add(ConfigChanged(changes={"model": "b", "tools": None, "instructions": "i2"}))
    assert tree.state.leaf == change.id
    assert tree.state.config == {"model": "b", "instructions": "i2"}
    later = tree.add(ConfigChanged(changes={"thinking": "high"}))
    tree.add(LeafMoved(to=one.id))
    assert tree.state.config == {"model": "a", "tools": ["x"], "instructions": "i2"}
    assert settings_at(tree.state, later.id) == {"model": "b", "thinking": "high"}
    tree.add(LeafMoved(to=later.id))
    assert tree.state.config == {"model": "b", "thinking": "high", "instructions": "i2"}
    tree.add(LeafMoved(to=None))  # a new root: the thread's initial settings
    assert tree.state.config["model"] == "a"
    assert replay(tree.records) == tree.state
