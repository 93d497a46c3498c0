"""Branch-carried settings (issue 10 point 11; seed 002): model, thinking level and active
tools changes are tree entries, and moving the leaf back restores the settings of that branch."""

from __future__ import annotations

import asyncio
from typing import Any

from threadlog import open_store
from threadlog.model.reducer import replay
from threadlog.runtime import Reply, Runtime, ScriptedModel, Tool, ToolContext
from threadlog.runtime.models import ModelRequest


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _noop(ctx: ToolContext, args: dict[str, Any]) -> str:
    return "ok"


TOOLS = [Tool(n, n, {"type": "object"}, "read_only", _noop) for n in ("alpha", "beta")]


def seen(request: ModelRequest) -> tuple[str, Any, list[str], str | None]:
    return (
        request.model,
        request.thinking,
        [t["name"] for t in request.tools],
        request.instructions,
    )


def test_moving_the_leaf_back_restores_the_settings_of_that_branch(home: str) -> None:
    model = ScriptedModel(lambda request, step: Reply(f"answer {step}"))

    async def main() -> tuple[str, list[Any]]:
        async with Runtime(home, model=model, tools=TOOLS) as runtime:
            session = await runtime.create(
                "u", model="m-old", thinking="low", tools=["alpha"], instructions="v1"
            )
            await session.submit("one")
            await session.wait_idle(10)
            before_change = session.state.leaf
            assert before_change is not None
            # branch A: new model, thinking and tools (and a thread-level setting)
            change = await session.configure(
                model="m-new", thinking="high", tools=["alpha", "beta"], instructions="v2"
            )
            assert session.state.leaf == change.id  # the change is a tree entry
            await session.submit("two")
            await session.wait_idle(10)
            a_leaf = session.state.leaf
            assert a_leaf is not None
            leaves = []
            # back to before the change: the old settings; then to A's leaf: the new ones
            for target in (before_change, a_leaf):
                await session.branch(target)
                await session.submit(f"from {target[:8]}")
                await session.wait_idle(10)
                leaves.append(session.state.leaf)
            return session.thread_id, leaves

    thread, _ = run(main())
    assert [seen(r) for r in model.requests] == [
        ("m-old", "low", ["alpha"], "v1"),
        ("m-new", "high", ["alpha", "beta"], "v2"),
        # instructions are thread-level: the last change holds on every branch
        ("m-old", "low", ["alpha"], "v2"),
        ("m-new", "high", ["alpha", "beta"], "v2"),
    ]
    with open_store(home) as store:
        records = store.read(thread)
        state = store.state(thread)
    # the state rebuilt from the log shows the settings of the active leaf (branch A)
    assert (state.config["model"], state.config["thinking"]) == ("m-new", "high")
    # and a replay up to the move back shows the old ones
    back = next(i for i, r in enumerate(records) if r.type == "leaf.moved")
    assert replay(records[: back + 1]).config["model"] == "m-old"


def test_removing_a_setting_on_a_branch_and_a_fork_of_a_branch(home: str) -> None:
    model = ScriptedModel(lambda request, step: Reply("ok"))

    async def main() -> tuple[str, str]:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", model="m1", thinking="low")
            await session.submit("one")
            await session.wait_idle(10)
            root_leaf = session.state.leaf
            assert root_leaf is not None
            await session.configure(thinking=None, model="m2")  # None removes it on this branch
            assert "thinking" not in session.state.config
            await session.submit("two")
            await session.wait_idle(10)
            await session.branch(root_leaf)
            assert session.state.config["thinking"] == "low"
            assert session.state.config["model"] == "m1"
            return session.thread_id, root_leaf

    thread, _ = run(main())
    assert [(r.model, r.thinking) for r in model.requests] == [("m1", "low"), ("m2", None)]
    with open_store(home) as store:
        # a fork at the head inherits the log, the active leaf and so its settings
        child = store.fork(thread)
        assert store.state(child).config == {"model": "m1", "thinking": "low"}
        assert store.verify(child).ok


def test_settings_survive_a_snapshot(home: str) -> None:
    from threadlog.model import snapshot
    from threadlog.model.context import Context

    model = ScriptedModel(lambda request, step: Reply("ok"))

    async def main() -> str:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", model="m1")
            await session.submit("one")
            await session.wait_idle(10)
            await session.configure(model="m2")
            return session.thread_id

    thread = run(main())
    with open_store(home) as store:
        records = store.read(thread)
    state = replay(records)
    loaded = snapshot.load(snapshot.dump(state, Context.from_records(records)))
    assert loaded is not None
    assert loaded[0] == state and loaded[0].config["model"] == "m2"
