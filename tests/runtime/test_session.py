"""The runtime: write order, steering, approvals, tool execution, cancellation, crashes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from threadlog import open_store
from threadlog.model.commands import Approve
from threadlog.model.envelope import Record
from threadlog.model.events import TurnEnded
from threadlog.runtime import (
    BUILTIN_TOOLS,
    Progress,
    Reply,
    Runtime,
    ScriptedModel,
    Tool,
    ToolCallSpec,
    ToolContext,
)
from threadlog.store.protocol import Mailbox


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    return root


def counting_tool(
    name: str,
    side_effect: str,
    counter: list[int],
    *,
    delay: float = 0.0,
    started: asyncio.Event | None = None,
) -> Tool:
    async def body(ctx: ToolContext, args: dict[str, Any]) -> Any:
        if started is not None:
            started.set()
        if delay:
            await asyncio.sleep(delay)
        counter.append(1)
        return {"n": len(counter)}

    return Tool(name, f"{name} (test)", {"type": "object"}, side_effect, body)  # type: ignore[arg-type]


def types(records: list[Record]) -> list[str]:
    return [r.type for r in records]


def test_a_turn_runs_tools_and_ends(home: str, workspace: Path) -> None:
    model = ScriptedModel(
        [
            Reply("reading", [ToolCallSpec("read_file", {"path": "a.txt"})]),
            Reply("done"),
        ]
    )

    async def main() -> str:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("read a.txt")
            await session.wait_idle(10)
            return session.thread_id

    thread = run(main())
    with open_store(home) as store:
        records = store.read(thread)
        assert types(records) == [
            "thread.created",
            "session.opened",
            "turn.started",
            "step.started",
            "provider.started",
            "model.responded",
            "tool_call.proposed",
            "tool_call.approved",
            "tool_call.started",
            "tool_call.finished",
            "step.started",
            "provider.started",
            "model.responded",
            "turn.ended",
            "session.closed",
        ]
        finished = records[9].data
        assert finished["ok"] is True and finished["result"] == "alpha\n"
        assert records[-2].data["outcome"] == "completed"
        assert store.verify(thread).ok
    # the second model call saw the tool result
    assert model.requests[1].messages[-1] == {
        "role": "tool",
        "tool_call_id": "call_1_0",
        "name": "read_file",
        "content": "alpha\n",
    }


def test_every_event_is_on_disk_before_a_subscriber_sees_it(home: str, workspace: Path) -> None:
    model = ScriptedModel([Reply("x", [ToolCallSpec("read_file", {"path": "a.txt"})]), Reply("y")])
    checked: list[int] = []

    async def main() -> None:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            path = runtime.store.path_of(session.thread_id)  # type: ignore[attr-defined]

            async def watch() -> None:
                async for item in session.subscribe():
                    assert isinstance(item, Record)
                    lines = Path(path).read_bytes().splitlines()
                    assert len(lines) >= item.ord, f"ord {item.ord} delivered before it was written"
                    assert item.hash.encode() in lines[item.ord - 1]
                    checked.append(item.ord)
                    if item.type == "turn.ended":
                        return

            watcher = asyncio.create_task(watch())
            await session.submit("go")
            await asyncio.wait_for(watcher, 10)

    run(main())
    assert checked == list(range(1, len(checked) + 1)) and len(checked) >= 10


def test_subscribers_start_from_any_ordinal_without_gaps_or_repeats(
    home: str, workspace: Path
) -> None:
    model = ScriptedModel([Reply("a"), Reply("b")])

    async def main() -> tuple[list[int], list[int]]:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("one")
            await session.wait_idle(10)
            late: list[int] = []

            async def watch(after: int, out: list[int]) -> None:
                async for item in session.subscribe(after=after):
                    assert isinstance(item, Record)
                    out.append(item.ord)
                    if item.type == "turn.ended" and item.ord > 8:
                        return

            watcher = asyncio.create_task(watch(3, late))
            await session.submit("two")
            await asyncio.wait_for(watcher, 10)
            return late, [r.ord for r in runtime.store.read(session.thread_id)]

    late, all_ords = run(main())
    assert late == all_ords[3:]


def test_steering_during_a_tool_call_is_consumed_after_it(home: str, workspace: Path) -> None:
    counter: list[int] = []

    async def main() -> list[Record]:
        started = asyncio.Event()
        slow = counting_tool("slow", "read_only", counter, delay=0.3, started=started)
        model = ScriptedModel(
            [Reply("working", [ToolCallSpec("slow")]), Reply("noted"), Reply("x")]
        )
        async with Runtime(home, model=model, tools=[slow]) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("start")
            await asyncio.wait_for(started.wait(), 5)
            await session.submit("also do this")
            await session.wait_idle(10)
            assert model.requests[1].messages[-1] == {"role": "user", "content": "also do this"}
            return runtime.store.read(session.thread_id)

    records = run(main())
    order = types(records)
    assert (
        order.index("input.queued")
        < order.index("tool_call.finished")
        < order.index("input.consumed")
    )
    assert order.count("input.consumed") == 1 and order[-1] == "turn.ended"
    assert counter == [1]


def test_approval_wait_survives_closing_and_reopening(home: str, workspace: Path) -> None:
    counter: list[int] = []
    tool = counting_tool("charge", "non_idempotent", counter)
    script = [Reply("charging", [ToolCallSpec("charge", {"amount": 5})]), Reply("charged")]

    async def first() -> str:
        async with Runtime(home, model=ScriptedModel(script), tools=[tool]) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("charge it")
            await session.wait_idle(10)
            assert session.waiting_for_human
            return session.thread_id

    thread = run(first())
    assert counter == []
    with open_store(home) as store:
        state = store.state(thread)
        assert state.active_turn is not None
        (call,) = state.tool_calls.values()
        assert call.status == "proposed"

    async def second() -> None:
        model = ScriptedModel(script[1:])
        async with Runtime(home, model=model, tools=[tool]) as runtime:
            session = await runtime.open(thread)
            await asyncio.sleep(0.05)
            assert session.waiting_for_human and counter == []
            await session.approve(call.call_id, by="alice")
            await session.wait_idle(10)

    run(second())
    assert counter == [1]
    with open_store(home) as store:
        state = store.state(thread)
        assert state.turns[state.tool_calls[call.call_id].turn_id].status == "completed"
        assert state.tool_calls[call.call_id].decided_by == "alice"


def test_denied_calls_are_reported_to_the_model(home: str, workspace: Path) -> None:
    counter: list[int] = []
    tool = counting_tool("rm", "non_idempotent", counter)
    model = ScriptedModel([Reply("deleting", [ToolCallSpec("rm")]), Reply("ok, I won't")])

    async def main() -> None:
        async with Runtime(home, model=model, tools=[tool]) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("clean up")
            await session.wait_idle(10)
            (call,) = session.state.tool_calls.values()
            await session.deny(call.call_id, reason="no deleting today")
            await session.wait_idle(10)

    run(main())
    assert counter == []
    assert "no deleting today" in model.requests[1].messages[-1]["content"]


def test_policy_can_deny_and_auto_approve(home: str, workspace: Path) -> None:
    counter: list[int] = []
    tool = counting_tool("pay", "non_idempotent", counter)
    model = ScriptedModel(
        [
            Reply("", [ToolCallSpec("pay")]),
            Reply("", [ToolCallSpec("run_command", {"command": "true"})]),
            Reply("end"),
        ]
    )

    async def main() -> dict[str, str]:
        async with Runtime(home, model=model, tools=[tool, *BUILTIN_TOOLS]) as runtime:
            session = await runtime.create(
                "u",
                cwd=str(workspace),
                approval_policy={"non_idempotent": "auto", "tools": {"run_command": "deny"}},
            )
            await session.submit("go")
            await session.wait_idle(10)
            return {c.tool: c.status for c in session.state.tool_calls.values()}

    assert run(main()) == {"pay": "finished", "run_command": "denied"}
    assert counter == [1]


def test_cancellation_mid_tool_aborts_the_turn_and_cancels_the_tool(
    home: str, workspace: Path
) -> None:
    cancelled: list[bool] = []
    started: list[bool] = []

    async def body(ctx: ToolContext, args: dict[str, Any]) -> Any:
        started.append(True)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    tool = Tool("wait", "waits", {"type": "object"}, "read_only", body)

    async def main() -> list[Record]:
        model = ScriptedModel([Reply("", [ToolCallSpec("wait")])])
        async with Runtime(home, model=model, tools=[tool]) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("wait")
            while not started:  # the tool body itself is running
                await asyncio.sleep(0.01)
            await session.cancel()
            return runtime.store.read(session.thread_id)

    records = run(main())
    assert cancelled == [True]
    assert records[-1].type == "turn.ended" and records[-1].data["outcome"] == "aborted"
    finished = [r for r in records if r.type == "tool_call.finished"]
    assert finished and finished[0].data["error"] == "cancelled"


def test_a_provider_error_mid_stream_is_recorded(home: str, workspace: Path) -> None:
    model = ScriptedModel([Reply("this will break off here", fail_after=3)])

    async def main() -> list[Record]:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("talk")
            await session.wait_idle(10)
            return runtime.store.read(session.thread_id)

    records = run(main())
    interrupted = [r for r in records if r.type == "provider.interrupted"]
    assert len(interrupted) == 1
    assert interrupted[0].data["partial"] == "this will break"
    assert records[-1].type == "turn.ended"
    assert (
        records[-1].data["outcome"] == "failed" and "provider error" in records[-1].data["reason"]
    )


def test_tool_errors_are_results(home: str, workspace: Path) -> None:
    model = ScriptedModel(
        [
            Reply(
                "", [ToolCallSpec("read_file", {"path": "../../etc/passwd"}), ToolCallSpec("nope")]
            ),
            Reply("ok"),
        ]
    )

    async def main() -> dict[str, Any]:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("escape")
            await session.wait_idle(10)
            return {c.tool: (c.status, c.ok, c.error) for c in session.state.tool_calls.values()}

    calls = run(main())
    status, ok, error = calls["read_file"]
    assert status == "finished" and ok is False and "outside the workspace" in error
    assert calls["nope"][0] == "denied"


@pytest.mark.parametrize("then", ["run", "cancel"])
def test_a_turn_submitted_while_the_last_one_finishes_is_driven(
    home: str, workspace: Path, then: str
) -> None:
    """The next turn can start between the previous turn's ``turn.ended`` and the end of the
    task that drove it (a caller polling the state sees the turn ended first): it is driven
    by that task, next, not left running in the log with nothing driving it; a cancel that
    reaches the task in between ends the new turn."""
    model = ScriptedModel([Reply("a"), Reply("b")])

    async def main() -> list[str]:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            append, ended = session.append, []

            async def submit_on_end(event: Any, *args: Any, **kwargs: Any) -> Record:
                record = await append(event, *args, **kwargs)
                if isinstance(event, TurnEnded) and not ended:
                    ended.append(event)
                    # still inside the first turn's task, which has not returned yet
                    await session.submit("two")
                    if then == "cancel":
                        task = asyncio.current_task()
                        assert task is not None
                        task.cancel()
                        await asyncio.sleep(0)
                return record

            session.append = submit_on_end  # type: ignore[method-assign]
            await session.submit("one")
            async with asyncio.timeout(10):
                while session.state.active_turn is not None or len(session.state.turns) < 2:
                    await session.wait_idle()
                    await asyncio.sleep(0.01)
            return [t.status for t in session.state.turns.values()]

    expected = {"run": ["completed", "completed"], "cancel": ["completed", "aborted"]}
    assert run(main()) == expected[then]


def test_closing_lets_an_ended_turn_finish_its_append(home: str, workspace: Path) -> None:
    """A session closed while its turn's task still awaits ``turn.ended``'s durability does
    not cancel that append (the turn is over): it returns as usual."""
    model = ScriptedModel([Reply("a")])

    async def main() -> list[str]:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            store: Any = runtime.store
            aappend, ended, returned = store.aappend, asyncio.Event(), []

            async def slow_end(thread_id: str, type: Any, *args: Any, **kwargs: Any) -> Record:
                record: Record = await aappend(thread_id, type, *args, **kwargs)
                if record.type == "turn.ended":
                    ended.set()
                    await asyncio.sleep(0.05)  # the durability wait, drawn out
                    returned.append(record.type)
                return record

            store.aappend = slow_end
            await session.submit("one")
            await ended.wait()
            await session.close()
            return returned

    assert run(main()) == ["turn.ended"]


def test_config_changes_between_turns_are_recorded(home: str, workspace: Path) -> None:
    model = ScriptedModel([Reply("a"), Reply("b")])

    async def main() -> None:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", cwd=str(workspace), model="m1")
            await session.submit("one")
            await session.wait_idle(10)
            await session.configure(model="m2", instructions="be brief")
            await session.submit("two")
            await session.wait_idle(10)

    run(main())
    assert [r.model for r in model.requests] == ["m1", "m2"]
    assert model.requests[1].instructions == "be brief"


def test_ephemeral_sessions_write_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workspace: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())

    async def main() -> None:
        model = ScriptedModel(
            [Reply("", [ToolCallSpec("read_file", {"path": "a.txt"})]), Reply("done")]
        )
        async with Runtime(ephemeral=True, model=model) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("go")
            await session.wait_idle(10)
            assert (
                session.state.turns[
                    session.state.last_id and next(iter(session.state.turns))
                ].status
                == "completed"
            )

    run(main())
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not (tmp_path / "ambient-home").exists()


def test_subagents_have_lineage(home: str, workspace: Path) -> None:
    async def main() -> tuple[str, str]:
        async with Runtime(home, model=ScriptedModel([])) as runtime:
            parent = await runtime.create("u", cwd=str(workspace))
            child = await parent.spawn(title="research")
            return parent.thread_id, child.thread_id

    parent, child = run(main())
    with open_store(home) as store:
        state = store.state(child)
        assert state.lineage is not None
        assert state.lineage["thread"] == parent and state.lineage["kind"] == "subagent"
        assert state.config["cwd"] == str(workspace)
        ops = [r for r in store.read(parent) if r.type == "operation.finished"]
        assert ops[0].data["detail"]["thread"] == child


@pytest.mark.parametrize("side_effect", ["idempotent", "non_idempotent"])
def test_closing_mid_tool_releases_the_lease(home: str, workspace: Path, side_effect: str) -> None:
    running: list[bool] = []

    async def body(ctx: ToolContext, args: dict[str, Any]) -> Any:
        running.append(True)
        await asyncio.sleep(30)

    tool = Tool("wait", "waits", {"type": "object"}, side_effect, body)  # type: ignore[arg-type]

    async def main() -> str:
        model = ScriptedModel([Reply("", [ToolCallSpec("wait")])])
        runtime = Runtime(home, model=model, tools=[tool])
        session = await runtime.create(
            "u", cwd=str(workspace), approval_policy={"non_idempotent": "auto"}
        )
        await session.submit("wait")
        while not running:  # the tool body itself is running
            await asyncio.sleep(0.01)
        await runtime.close()
        return session.thread_id

    thread = run(main())
    with open_store(home) as store:
        store.append(thread, "custom.after", {})  # the lease was released
        records = store.read(thread)
        state = store.state(thread)
    (call,) = state.tool_calls.values()
    if side_effect == "idempotent":
        # safe to repeat: an error result, and the turn ends aborted
        assert call.status == "finished" and call.error == "cancelled"
        assert [r.type for r in records[-3:]] == ["turn.ended", "session.closed", "custom.after"]
        assert records[-3].data["outcome"] == "aborted"
    else:
        # the effect may have happened: unknown, and the turn waits for a human, durably
        assert call.status == "unknown"
        assert state.active_turn == call.turn_id


def test_inbox_messages_reach_a_live_session(home: str, workspace: Path) -> None:
    counter: list[int] = []
    tool = counting_tool("charge", "non_idempotent", counter)

    async def main() -> None:
        model = ScriptedModel([Reply("", [ToolCallSpec("charge")]), Reply("done")])
        async with Runtime(home, model=model, tools=[tool]) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("go")
            await session.wait_idle(10)
            (call,) = session.state.tool_calls.values()
            mailbox = runtime.store
            assert isinstance(mailbox, Mailbox)
            await asyncio.to_thread(
                mailbox.post, session.thread_id, Approve(call_id=call.call_id, by="bob")
            )
            for _ in range(100):
                if session.state.active_turn is None:
                    break
                await asyncio.sleep(0.05)
            assert session.state.tool_calls[call.call_id].decided_by == "bob"
            assert not os.listdir(os.path.join(home, "inbox", session.thread_id))

    run(main())
    assert counter == [1]


def test_cli_approve_goes_through_the_inbox_of_a_live_session(home: str, workspace: Path) -> None:
    counter: list[int] = []
    tool = counting_tool("charge", "non_idempotent", counter)

    async def main() -> None:
        model = ScriptedModel([Reply("", [ToolCallSpec("charge")]), Reply("done")])
        async with Runtime(home, model=model, tools=[tool]) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("go")
            await session.wait_idle(10)
            (call,) = session.state.tool_calls.values()
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "threadlog",
                "approve",
                session.thread_id,
                call.call_id,
                "--home",
                home,
                "--by",
                "carol",
                stdout=asyncio.subprocess.PIPE,
            )
            out, _ = await proc.communicate()
            assert proc.returncode == 0 and b"inbox" in out
            for _ in range(100):
                if session.state.active_turn is None:
                    break
                await asyncio.sleep(0.05)

    run(main())
    assert counter == [1]


CRASH_CHILD = """
import asyncio, sys
from threadlog.runtime import Runtime, ScriptedModel, Reply, ToolCallSpec
async def main():
    model = ScriptedModel([Reply("", [ToolCallSpec("append_file", {"path": "log.txt", "text": "once\\n"})]), Reply("done")])
    async with Runtime(sys.argv[1], model=model) as runtime:
        session = await runtime.create("u", cwd=sys.argv[2], approval_policy={"non_idempotent": "auto"})
        print(session.thread_id, flush=True)
        await session.submit("append")
        await session.wait_idle(30)
asyncio.run(main())
"""


@pytest.mark.parametrize("crash_at", ["tool_call.started", "tool_call.finished"])
def test_crash_around_a_non_idempotent_tool_never_repeats_it(
    home: str, workspace: Path, crash_at: str
) -> None:
    env = dict(os.environ, THREADLOG_CRASH_AT=crash_at)
    child = subprocess.run(
        [sys.executable, "-c", CRASH_CHILD, home, str(workspace)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 137, child.stderr
    thread = child.stdout.split()[0]
    log = workspace / "log.txt"
    assert log.read_text() in ("", "once\n") if log.exists() else True

    async def reopen() -> dict[str, str]:
        model = ScriptedModel([Reply("done")])
        async with Runtime(home, model=model) as runtime:
            session = await runtime.open(thread)
            await session.wait_idle(10)
            return {c.call_id: c.status for c in session.state.tool_calls.values()}

    statuses = run(reopen())
    appended = log.read_text().count("once") if log.exists() else 0
    assert appended <= 1
    if crash_at == "tool_call.started":
        # started, no result: unknown; the file still holds its pre-image (the crash came
        # before the append), which the reconcile hook proves, so it is run again, once
        assert list(statuses.values()) == ["finished"] and appended == 1
    else:
        # the stored result is reused: never run again, and the turn completes
        assert list(statuses.values()) == ["finished"] and appended == 1
        with open_store(home) as store:
            assert store.state(thread).active_turn is None
    run(reopen())
    assert (log.read_text().count("once") if log.exists() else 0) == appended


def test_progress_is_transient(home: str, workspace: Path) -> None:
    model = ScriptedModel([Reply("three little words")])

    async def main() -> tuple[list[str], list[str]]:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            texts: list[str] = []

            async def watch() -> None:
                async for item in session.subscribe(progress=True):
                    if isinstance(item, Progress) and item.kind == "text":
                        texts.append(item.data["text"])
                    elif isinstance(item, Record) and item.type == "turn.ended":
                        return

            watcher = asyncio.create_task(watch())
            await session.submit("say it")
            await asyncio.wait_for(watcher, 10)
            return texts, types(runtime.store.read(session.thread_id))

    texts, logged = run(main())
    assert "".join(texts) == "three little words"
    assert "progress" not in " ".join(logged)


def _unused(_: Callable[..., Any]) -> None:
    pass


def test_a_late_subscriber_gets_the_answer_so_far_then_the_rest(home: str, workspace: Path) -> None:
    """A subscription with progress that starts mid-answer (a page opened while the model
    writes) first gets ``text_so_far``, then the deltas after it: the whole answer, once."""
    words = " ".join(f"w{i}" for i in range(12))
    model = ScriptedModel([Reply(words), Reply("second answer")], delay=0.01)

    async def main() -> tuple[list[Progress], list[Progress]]:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            deltas = 0
            halfway = asyncio.Event()
            late: list[Progress] = []
            after_answer: list[Progress] = []

            async def first() -> None:
                nonlocal deltas
                async for item in session.subscribe(progress=True):
                    if isinstance(item, Progress) and item.kind == "text":
                        deltas += 1
                        if deltas == 5:
                            halfway.set()
                    elif isinstance(item, Record) and item.type == "turn.ended":
                        return

            async def watch(into: list[Progress]) -> None:
                async for item in session.subscribe(session.state.last_ord, progress=True):
                    if isinstance(item, Progress):
                        into.append(item)
                    elif isinstance(item, Record) and item.type == "turn.ended":
                        return

            watcher = asyncio.create_task(first())
            await session.submit("say it")
            await asyncio.wait_for(halfway.wait(), 10)
            late_task = asyncio.create_task(watch(late))
            await asyncio.wait_for(watcher, 10)
            await asyncio.wait_for(late_task, 10)
            # after the answer is durable, nothing stale is handed to a new subscriber
            third = asyncio.create_task(watch(after_answer))
            await asyncio.sleep(0.05)
            await session.submit("again")
            await asyncio.wait_for(third, 10)
            return late, after_answer

    late, after_answer = run(main())
    kinds = [p.kind for p in late]
    assert kinds[0] == "text_so_far" and kinds.count("text_so_far") == 1
    so_far = late[0].data["text"]
    assert so_far.startswith("w0 w1 w2 w3 w4") and so_far != words
    rest = "".join(p.data["text"] for p in late[1:] if p.kind == "text")
    assert so_far + rest == words
    assert "text_so_far" not in [p.kind for p in after_answer]
    assert "".join(p.data["text"] for p in after_answer if p.kind == "text") == "second answer"
