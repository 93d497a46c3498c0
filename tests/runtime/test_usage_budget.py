"""Usage and budget survive restarts (issue 10 point 9; seed 002: after a restart, know how
much budget was spent)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import pytest

from threadlog import open_store
from threadlog.errors import UsageError
from threadlog.model.policy import durability_of
from threadlog.runtime import Reply, Runtime, ScriptedModel, Tool, ToolCallSpec, ToolContext


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _noop(ctx: ToolContext, args: dict[str, Any]) -> str:
    return "ok"


NOOP = Tool("noop", "does nothing", {"type": "object"}, "read_only", _noop)


def usage(i: int, o: int, **more: Any) -> dict[str, Any]:
    return {"input_tokens": i, "output_tokens": o, **more}


CRASH_CHILD = """
import os, sys, threadlog
with threadlog.open_store(sys.argv[1]) as store:
    t = store.create_thread("u")
    store.append(t, "turn.started", {"turn_id": "t1", "input": "hi"})
    store.append(t, "step.started", {"turn_id": "t1", "step_id": "s1"})
    store.append(t, "model.responded", {"turn_id": "t1", "step_id": "s1",
        "message": {"role": "assistant", "content": "hello"},
        "usage": {"input_tokens": 1200, "output_tokens": 34, "cost": 0.25}})
    print(t, flush=True)
    os._exit(137)  # killed before anything else is written or flushed
"""


def test_usage_is_durable_when_the_response_append_returns(home: str) -> None:
    assert durability_of("model.responded") == "critical"
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_CHILD, home],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 137, proc.stderr
    thread = proc.stdout.split()[0]
    with open_store(home) as store:
        state = store.state(thread)
    assert state.usage == usage(1200, 34, cost=0.25)
    assert state.turns["t1"].usage == usage(1200, 34, cost=0.25)


def test_usage_and_cost_totals_per_turn_and_thread_survive_close_and_reopen(home: str) -> None:
    model = ScriptedModel(
        [
            Reply("", [ToolCallSpec("noop")], usage=usage(100, 10)),
            Reply("done", usage=usage(150, 5)),
            Reply("again", usage=usage(40, 2, cost=0.5)),  # a cost the provider reported
        ]
    )
    prices = {"scripted": {"input": 2.0, "output": 10.0}}

    async def first() -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
        async with Runtime(home, model=model, tools=[NOOP]) as runtime:
            session = await runtime.create("u", prices=prices)
            for text in ("go", "more"):
                await session.submit(text)
                await session.wait_idle(10)
            turns = [t.usage for t in session.state.turns.values()]
            return session.thread_id, dict(session.state.usage), turns

    thread, totals, turns = run(first())
    cost_1 = (250 * 2.0 + 15 * 10.0) / 1_000_000  # computed from the price when recorded
    assert turns == [usage(250, 15, cost=pytest.approx(cost_1)), usage(40, 2, cost=0.5)]
    assert totals == usage(290, 17, cost=pytest.approx(cost_1 + 0.5))

    with open_store(home) as store:  # the state rebuilt from the log
        rebuilt = store.state(thread)
    assert rebuilt.usage == totals
    assert [t.usage for t in rebuilt.turns.values()] == turns

    async def reopen() -> dict[str, Any]:
        async with Runtime(home, model=ScriptedModel([]), tools=[NOOP]) as runtime:
            session = await runtime.open(thread)
            return dict(session.state.usage)

    assert run(reopen()) == totals


def test_a_turn_budget_stops_the_turn_before_its_second_model_call(home: str) -> None:
    model = ScriptedModel(
        [Reply("", [ToolCallSpec("noop")], usage=usage(90, 20)), Reply("never", usage=usage(1, 1))]
    )

    async def main() -> Any:
        async with Runtime(home, model=model, tools=[NOOP]) as runtime:
            session = await runtime.create("u", budget={"turn_tokens": 100})
            await session.submit("go")
            await session.wait_idle(10)
            return session.state

    state = run(main())
    assert model.calls == 1  # the second call was never made
    (turn,) = state.turns.values()
    assert turn.status == "failed"
    assert turn.reason == "budget exceeded: turn_tokens 110 of 100"
    # the call the response proposed was settled first: nothing is cut off mid-way
    assert [c.status for c in state.tool_calls.values()] == ["finished"]


def test_a_thread_budget_spent_before_a_restart_stops_the_next_turn(home: str) -> None:
    async def first() -> str:
        model = ScriptedModel([Reply("a", usage=usage(40, 10, cost=0.75))])
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", budget={"thread_cost": 0.5})
            await session.submit("one")
            await session.wait_idle(10)
            assert list(session.state.turns.values())[-1].status == "completed"
            return session.thread_id

    async def second(thread: str) -> tuple[ScriptedModel, Any]:
        model = ScriptedModel([Reply("b")])
        async with Runtime(home, model=model) as runtime:
            session = await runtime.open(thread)
            await session.submit("two")
            await session.wait_idle(10)
            return model, session.state

    thread = run(first())
    model, state = run(second(thread))
    assert model.calls == 0
    last = list(state.turns.values())[-1]
    assert (last.status, last.reason) == ("failed", "budget exceeded: thread_cost 0.75 of 0.5")


@pytest.mark.parametrize(
    "config",
    [
        {"budget": {"thread_tokens": 0}},
        {"budget": {"turn_tokens": 1.5}},
        {"budget": {"tokens": 10}},
        {"budget": 100},
        {"budget": {"thread_cost": True}},
        {"prices": {"m": {"input": -1}}},
        {"prices": {"m": {"in": 1}}},
    ],
)
def test_budget_and_prices_are_validated(home: str, config: dict[str, Any]) -> None:
    async def main() -> None:
        async with Runtime(home, model=ScriptedModel([])) as runtime:
            with pytest.raises(UsageError):
                await runtime.create("u", **config)
            session = await runtime.create("u")
            before = session.state.last_ord
            with pytest.raises(UsageError):
                await session.configure(**config)
            assert session.state.last_ord == before  # nothing written

    run(main())
