"""Plans are first-class (issue 10 point 10; 000 §17.1 task graph and plan versions)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from threadlog import open_store
from threadlog.errors import InvalidTransition, UsageError
from threadlog.runtime import Reply, Runtime, ScriptedModel, Tool, ToolCallSpec, ToolContext


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _charge(ctx: ToolContext, args: dict[str, Any]) -> str:
    return "charged"


CHARGE = Tool("charge", "charges", {"type": "object"}, "non_idempotent", _charge)


def test_plan_versions_are_linked_to_the_approval_and_the_replan(home: str) -> None:
    model = ScriptedModel([Reply("", [ToolCallSpec("charge", id="c1")]), Reply("done")])

    async def main() -> tuple[str, list[str]]:
        async with Runtime(home, model=model, tools=[CHARGE]) as runtime:
            session = await runtime.create("u")  # non-idempotent calls wait for a human
            assert session.plan is None
            await session.submit("pay the invoice")
            await session.wait_idle(10)
            approval = await session.approve("c1", by="alice")
            first = await session.set_plan(
                ["charge the card", "send the receipt"], by="alice", caused_by=approval.id
            )
            await session.wait_idle(10)
            result = next(
                r
                for r in await asyncio.to_thread(runtime.store.read, session.thread_id)
                if r.type == "tool_call.finished"
            )
            second = await session.set_plan(
                ["send the receipt"],
                reason="the card is charged",
                by="model",
                caused_by=result.id,
                call_id="c1",
            )
            assert session.plan == ["send the receipt"]
            assert session.state.plan_version == 2
            assert session.state.plan_source == {
                "by": "model",
                "reason": "the card is charged",
                "caused_by": result.id,
                "call_id": "c1",
            }
            return session.thread_id, [approval.id, first.id, second.id, result.id]

    thread, (approval, first, second, result) = run(main())
    with open_store(home) as store:
        records = {r.id: r for r in store.read(thread)}
        state = store.state(thread)
    assert {k: v for k, v in records[first].data.items() if k != "session"} == {
        "version": 1,
        "plan": ["charge the card", "send the receipt"],
        "by": "alice",
        "caused_by": approval,
    }
    assert records[approval].type == "tool_call.approved"
    assert records[second].data["caused_by"] == result
    assert (state.plan_version, state.plan) == (2, ["send the receipt"])


def test_the_current_plan_is_in_the_model_context(home: str) -> None:
    from threadlog.model.plans import PLAN_PREFIX

    model = ScriptedModel([Reply("a"), Reply("b")])

    async def main() -> None:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u")
            await session.submit("one")
            await session.wait_idle(10)
            await session.set_plan({"steps": ["read", "write"]}, by="alice", reason="start")
            await session.submit("two")
            await session.wait_idle(10)

    run(main())
    assert all(m["role"] != "system" for m in model.requests[0].messages)  # no plan yet
    first = model.requests[1].messages[0]
    assert first["role"] == "system"
    assert first["content"].startswith(
        PLAN_PREFIX.format(version=1, source=", set by alice: start")
    )
    assert '"read"' in first["content"] and '"write"' in first["content"]
    assert model.requests[1].messages[-1] == {"role": "user", "content": "two"}


def test_set_plan_refuses_what_it_cannot_link_and_writes_nothing(home: str) -> None:
    async def main() -> None:
        async with Runtime(home, model=ScriptedModel([])) as runtime:
            session = await runtime.create("u")
            before = session.state.last_ord
            for kwargs in ({"caused_by": "no-such-record"}, {"call_id": "no-such-call"}):
                with pytest.raises(UsageError, match="no "):
                    await session.set_plan(["x"], **kwargs)
            with pytest.raises(UsageError):
                await session.set_plan(None)
            with pytest.raises(UsageError):
                await session.set_plan({"x": float("nan")})
            assert session.state.last_ord == before
            # the reducer refuses a version that names an unknown call (any append path)
            with pytest.raises(InvalidTransition):
                await session.append("plan.versioned", {"version": 1, "plan": [], "call_id": "x"})
            # nothing but the session's own opening record (written before its first append)
            written = runtime.store.read(session.thread_id, after=before)
            assert [r.type for r in written] in ([], ["session.opened"])

    run(main())
