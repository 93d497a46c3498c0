"""Cancellation reaches every pending call: an aborted turn leaves nothing for the next one.

A user who cancels ("never mind") must not see the next turn run a payment the model proposed
before the cancel. An aborted turn ends every call that has not started with a recorded,
terminal ``cancelled`` outcome; a proposal still waiting for a decision does not resurface.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from threadlog import open_store
from threadlog.model.envelope import Record
from threadlog.model.events import InputQueued
from threadlog.runtime import Reply, Runtime, ScriptedModel, Tool, ToolCallSpec, ToolContext
from threadlog.runtime.takeover import waiting_threads


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def _tools(paid: list[dict[str, Any]], started: asyncio.Event | None) -> list[Tool]:
    async def slow(ctx: ToolContext, args: dict[str, Any]) -> Any:
        if started is not None:
            started.set()
        await asyncio.sleep(30)
        return "slow done"

    async def pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
        paid.append(args)
        return {"paid": args.get("amount")}

    return [
        Tool("slow", "waits", {"type": "object"}, "idempotent", slow),
        Tool("pay", "pays", {"type": "object"}, "non_idempotent", pay),
    ]


def test_an_approved_call_that_never_started_is_cancelled_with_the_turn(
    home: str, workspace: Path
) -> None:
    paid: list[dict[str, Any]] = []

    async def main() -> list[Record]:
        started = asyncio.Event()
        model = ScriptedModel(
            [
                Reply("", [ToolCallSpec("slow"), ToolCallSpec("pay", {"amount": 100})]),
                Reply("ok, nothing paid"),
            ]
        )
        policy = {"non_idempotent": "auto"}
        async with Runtime(home, model=model, tools=_tools(paid, started)) as runtime:
            session = await runtime.create("u", cwd=str(workspace), approval_policy=policy)
            await session.submit("pay 100")
            await asyncio.wait_for(started.wait(), 10)  # both approved, "slow" running
            await session.cancel()  # the user: "never mind"
            await session.submit("what happened?")
            await session.wait_idle(10)
            return runtime.store.read(session.thread_id)

    records = run(main())
    assert paid == []  # the payment never ran, neither in the aborted turn nor after it
    pay_id = next(
        r.data["call_id"]
        for r in records
        if r.type == "tool_call.proposed" and r.data["tool"] == "pay"
    )
    outcome = [r for r in records if r.data.get("call_id") == pay_id][-1]
    assert outcome.type == "tool_call.cancelled"
    assert not any(r.type == "tool_call.started" and r.data["call_id"] == pay_id for r in records)
    ends = [r for r in records if r.type == "turn.ended"]
    assert [e.data["outcome"] for e in ends] == ["aborted", "completed"]
    # The cancellation is recorded before the aborted turn's end.
    assert outcome.ord < ends[0].ord


def test_an_undecided_proposal_does_not_resurface_after_cancel(home: str, workspace: Path) -> None:
    paid: list[dict[str, Any]] = []

    async def main() -> tuple[list[Record], str]:
        model = ScriptedModel([Reply("", [ToolCallSpec("pay", {"amount": 5})]), Reply("fine")])
        async with Runtime(home, model=model, tools=_tools(paid, None)) as runtime:
            session = await runtime.create("u", cwd=str(workspace))  # pay asks a human
            await session.submit("pay 5")
            await session.wait_idle(10)
            assert session.waiting_for_human
            await session.cancel()
            assert not session.waiting_for_human
            await session.submit("forget it, just say fine")
            await session.wait_idle(10)
            state = session.state
            call = next(iter(state.tool_calls.values()))
            return runtime.store.read(session.thread_id), call.status

    records, status = run(main())
    assert paid == []
    assert status == "cancelled"
    assert [r.data["outcome"] for r in records if r.type == "turn.ended"] == [
        "aborted",
        "completed",
    ]


def test_a_cancelled_call_survives_reopening_as_cancelled(home: str, workspace: Path) -> None:
    paid: list[dict[str, Any]] = []

    async def first() -> str:
        model = ScriptedModel([Reply("", [ToolCallSpec("pay", {"amount": 7})])])
        async with Runtime(home, model=model, tools=_tools(paid, None)) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("pay 7")
            await session.wait_idle(10)
            await session.cancel()
            return session.thread_id

    thread = run(first())

    async def second() -> str:
        model = ScriptedModel([Reply("hello again")])
        async with Runtime(home, model=model, tools=_tools(paid, None)) as runtime:
            session = await runtime.resume(thread)
            await session.submit("hi")
            await session.wait_idle(10)
            return next(iter(session.state.tool_calls.values())).status

    assert run(second()) == "cancelled"
    assert paid == []


def test_a_clean_close_cancels_the_calls_that_never_started(home: str, workspace: Path) -> None:
    """Closing a session mid-turn aborts the turn like ``cancel()``: the approved payment is
    cancelled (recorded), and reopening the thread never runs it."""
    paid: list[dict[str, Any]] = []

    async def first() -> str:
        started = asyncio.Event()
        model = ScriptedModel(
            [Reply("", [ToolCallSpec("slow"), ToolCallSpec("pay", {"amount": 9})])]
        )
        policy = {"non_idempotent": "auto"}
        async with Runtime(home, model=model, tools=_tools(paid, started)) as runtime:
            session = await runtime.create("u", cwd=str(workspace), approval_policy=policy)
            await session.submit("pay 9")
            await asyncio.wait_for(started.wait(), 10)
            return session.thread_id  # the runtime closes the session here

    thread = run(first())

    async def second() -> list[Record]:
        async with Runtime(home, model=ScriptedModel([]), tools=_tools(paid, None)) as runtime:
            session = await runtime.open(thread)
            await session.wait_idle(10)
            return runtime.store.read(thread)

    records = run(second())
    assert paid == []
    cancelled = [r for r in records if r.type == "tool_call.cancelled"]
    assert len(cancelled) == 1
    assert cancelled[0].data["reason"] == "session closed"
    ended = [r for r in records if r.type == "turn.ended"]
    assert [e.data["outcome"] for e in ended] == ["aborted"]
    assert cancelled[0].ord < ended[0].ord
    assert not any(r.type == "thread.resumed" for r in records)  # nothing to repair


def test_a_crash_in_the_middle_of_an_abort_finishes_the_abort(home: str, workspace: Path) -> None:
    """The process dies after ``tool_call.cancelled`` and before the turn's ``turn.ended``:
    resume finishes the abort (the turn ends ``aborted``) and never continues the task."""
    import shutil

    paid: list[dict[str, Any]] = []

    async def first() -> str:
        model = ScriptedModel([Reply("", [ToolCallSpec("pay", {"amount": 3})])])
        async with Runtime(home, model=model, tools=_tools(paid, None)) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("pay 3")
            await session.wait_idle(10)
            await session.cancel()
            return session.thread_id

    thread = run(first())
    with open_store(home) as store:
        records = store.read(thread)
    cut = next(r.ord for r in records if r.type == "tool_call.cancelled")
    crashed = home + "-crashed"
    shutil.copytree(home, crashed, ignore=shutil.ignore_patterns("index.sqlite3*"))
    path = next(Path(crashed, "threads").glob(f"*/*/{thread}.jsonl"))
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:cut]))

    async def second() -> list[Record]:
        async with Runtime(crashed, model=ScriptedModel([]), tools=_tools(paid, None)) as rt:
            session = await rt.resume(thread)
            await session.wait_idle(10)
            assert session.recovery is not None and session.recovery.continued_by is None
            return rt.store.read(thread)

    after = run(second())
    ends = [r.data["outcome"] for r in after if r.type == "turn.ended"]
    assert ends == ["aborted"]
    assert sum(r.type == "turn.started" for r in after) == 1
    assert paid == []


def test_steering_left_by_a_cancelled_turn_never_starts_a_turn_of_its_own(
    home: str, workspace: Path
) -> None:
    """Steering queued for a turn the user then cancelled is not new work: reopening the
    thread (or a worker's scan, `waiting_threads`) starts nothing. Before, `start_queued` took
    any pending input, and a worker would have run the steer as a turn right after the
    cancel. Input sent afterwards with no turn running does start a turn, which takes the
    old steer at its first safe point, as the live session's next turn would."""

    async def first() -> str:
        started = asyncio.Event()
        model = ScriptedModel([Reply("", [ToolCallSpec("slow")])])
        async with Runtime(home, model=model, tools=_tools([], started)) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("wait a while")
            await asyncio.wait_for(started.wait(), 10)
            await session.submit("and then say hi")  # steering: queued, the tool runs
            await session.cancel()
            assert [i.text for i in session.state.pending_inputs] == ["and then say hi"]
            return session.thread_id

    thread = run(first())
    with open_store(home) as store:
        assert waiting_threads(store) == []

    async def reopen() -> list[str]:
        model = ScriptedModel([Reply("never called")])
        async with Runtime(home, model=model, tools=_tools([], None)) as runtime:
            session = await runtime.open(thread)
            await session.wait_idle(10)
            assert session.state.active_turn is None
            await session.append(InputQueued(input_id="sent-1", text="now say hi"))  # a send
            await session.close()
        return [t.status for t in session.state.turns.values()]

    assert run(reopen()) == ["aborted"]  # nothing ran the steer

    with open_store(home) as store:
        assert waiting_threads(store) == [thread]

    async def after_send() -> Any:
        model = ScriptedModel([Reply("hi")])
        async with Runtime(home, model=model, tools=_tools([], None)) as runtime:
            session = await runtime.open(thread)
            await session.wait_idle(10)
            return session.state

    state = run(after_send())
    aborted, sent = state.turns.values()
    assert (sent.input, sent.status) == ("now say hi", "completed")
    assert [state.inputs[i].text for i in sent.inputs] == ["and then say hi"]
    assert not state.pending_inputs
