"""`threadlog resume` keeps the task alive, and commands sent while no session is live are
honest (issue 10, points 6 and 7).

* The CLI repairs a crashed thread and leaves the interrupted task running in a new turn;
  the next `Runtime.resume` / `Runtime.open` finishes it, with no second repair.
* A second `threadlog resume` writes nothing; `--salvage` twice makes one copy.
* A clean close is never followed by a "process stopped" recovery.
* Input sent with `threadlog send` while nothing runs starts a turn when the thread is next
  opened; decisions for unknown or settled calls fail; a stale cancel aborts nothing later.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.runtime.test_resume import crashed_log, effect_tool, thread_of
from threadlog import open_store
from threadlog.cli import cli
from threadlog.cli import live as _live  # noqa: F401 - registers the commands
from threadlog.model.commands import Cancel, Submit
from threadlog.runtime import Reply, Runtime, ScriptedModel, Tool, ToolCallSpec, ToolContext
from threadlog.runtime.takeover import waiting_threads
from threadlog.store.protocol import Mailbox


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def cli_json(*args: str) -> tuple[int, Any]:
    result = CliRunner().invoke(cli, [*args, "--json"])
    try:
        return result.exit_code, json.loads(result.stdout)
    except ValueError:
        return result.exit_code, result.output


def types(home: str, thread: str) -> list[str]:
    with open_store(home) as store:
        return [r.type for r in store.read(thread)]


# -- point 6: threadlog resume ---------------------------------------------------------------


@pytest.mark.parametrize("reopen", ["resume", "open"])
def test_cli_resume_then_the_agent_finishes_the_task(
    home: str, workspace: Path, reopen: str
) -> None:
    log = workspace / "effects.txt"
    tool = effect_tool("append_file", "idempotent", log)
    crashed = crashed_log(home, workspace, tool, until="provider.started")
    log.unlink(missing_ok=True)
    thread = thread_of(crashed)
    code, report = cli_json("resume", thread, "--home", crashed)
    assert code == 0, report
    assert report["repaired"] is True and report["interrupted_turn"] is not None
    continued = report["continued_by"]
    assert continued is not None and report["running_turn"] == continued
    with open_store(crashed) as store:
        state = store.state(thread)
        assert state.active_turn == continued  # left running for the next session
    before = types(crashed, thread)

    async def agent() -> None:
        model = ScriptedModel([Reply("", [ToolCallSpec("append_file")]), Reply("finished")])
        async with Runtime(crashed, model=model, tools=[tool]) as runtime:
            policy_free = runtime.resume if reopen == "resume" else runtime.open
            session = await policy_free(thread)
            await session.wait_idle(10)

    run(agent())
    with open_store(crashed) as store:
        records = store.read(thread)
        state = store.state(thread)
    after = records[len(before) :]
    assert state.active_turn is None
    assert state.turns[continued].status == "completed"  # the task was finished
    assert log.read_text().split()  # the tool ran in the continued turn
    # no second repair of the turn the CLI left: it is driven as it is
    assert not any(r.type == "turn.ended" and r.data["outcome"] == "interrupted" for r in after)
    assert not any(r.type == "turn.started" and r.data.get("resumes") for r in after)
    for r in after:
        if r.type == "thread.resumed":
            assert not [x for x in r.data["repairs"] if x["kind"] == "turn_interrupted"]


def test_a_second_cli_resume_writes_nothing(home: str, workspace: Path) -> None:
    tool = effect_tool("append_file", "non_idempotent", workspace / "effects.txt")
    crashed = crashed_log(home, workspace, tool, until="tool_call.started")
    thread = thread_of(crashed)
    code, first = cli_json("resume", thread, "--home", crashed)
    assert code == 0 and first["repaired"] is True
    path = next(Path(crashed, "threads").glob(f"*/*/{thread}.jsonl"))
    before = path.read_bytes()
    code, second = cli_json("resume", thread, "--home", crashed)
    assert code == 0, second
    assert second["repaired"] is False and second["resumed_ord"] is None
    assert second["waiting_for_human"] == first["waiting_for_human"] != []
    assert path.read_bytes() == before
    result = CliRunner().invoke(cli, ["resume", thread, "--home", crashed])
    assert "nothing to repair (nothing written)" in result.output
    assert path.read_bytes() == before


def test_salvage_twice_makes_one_copy(home: str, workspace: Path) -> None:
    async def main() -> str:
        async with Runtime(home, model=ScriptedModel([Reply("a"), Reply("b")])) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            for text in ("one", "two"):
                await session.submit(text)
                await session.wait_idle(10)
            return session.thread_id

    thread = run(main())
    path = next(Path(home, "threads").glob(f"*/*/{thread}.jsonl"))
    lines = path.read_bytes().splitlines(keepends=True)
    lines[5] = lines[5].replace(b'"turn_id":"', b'"turn_id":"X', 1)
    path.write_bytes(b"".join(lines))
    code, first = cli_json("resume", thread, "--home", home, "--salvage")
    assert code == 0, first
    assert first["salvaged_from"]["reused"] is False
    code, second = cli_json("resume", thread, "--home", home, "--salvage")
    assert code == 0, second
    assert second["thread"] == first["thread"]
    assert second["salvaged_from"]["reused"] is True and second["repaired"] is False
    with open_store(home) as store:
        assert len(store.thread_ids()) == 2  # the damaged thread and one salvage copy


@pytest.mark.parametrize("how", ["parked", "mid-tool"])
def test_a_clean_close_is_never_followed_by_a_process_stopped_recovery(
    home: str, workspace: Path, how: str
) -> None:
    started = asyncio.Event()

    async def slow(ctx: ToolContext, args: dict[str, Any]) -> Any:
        started.set()
        await asyncio.sleep(30)
        return "slow"

    tools = [
        Tool("slow", "waits", {"type": "object"}, "idempotent", slow),
        Tool("pay", "pays", {"type": "object"}, "non_idempotent", slow),
    ]

    async def first() -> str:
        name = "pay" if how == "parked" else "slow"
        model = ScriptedModel([Reply("", [ToolCallSpec(name)])])
        async with Runtime(home, model=model, tools=tools) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("go")
            if how == "parked":
                await session.wait_idle(10)
                assert session.waiting_for_human
            else:
                await asyncio.wait_for(started.wait(), 10)
            return session.thread_id  # closed cleanly here

    thread = run(first())
    count = len(types(home, thread))
    code, report = cli_json("resume", thread, "--home", home)
    assert code == 0, report
    assert report["repaired"] is False and len(types(home, thread)) == count

    async def second() -> None:
        async with Runtime(home, model=ScriptedModel([Reply("ok")]), tools=tools) as runtime:
            session = await runtime.resume(thread)
            await session.wait_idle(10)

    run(second())
    with open_store(home) as store:
        records = store.read(thread)
    for r in records:
        assert not (r.type == "turn.ended" and r.data["outcome"] == "interrupted")
        assert "process" not in str(r.data.get("reason", ""))
        if r.type == "thread.resumed":
            kinds = {x["kind"] for x in r.data["repairs"]}
            assert not kinds & {"turn_interrupted", "step_interrupted", "rerun", "outcome_unknown"}


# -- point 7: offline commands ---------------------------------------------------------------


def test_input_sent_while_no_session_is_live_starts_a_turn_on_open(
    home: str, workspace: Path
) -> None:
    async def create() -> str:
        async with Runtime(home, model=ScriptedModel([])) as runtime:
            return (await runtime.create("u", cwd=str(workspace))).thread_id

    thread = run(create())
    code, sent = cli_json("send", thread, "hello there", "--home", home)
    assert code == 0 and sent["type"] == "input.queued"

    async def agent() -> tuple[list[str], str]:
        async with Runtime(home, model=ScriptedModel([Reply("hi!")])) as runtime:
            session = await runtime.open(thread)
            await session.wait_idle(10)
            (turn,) = session.state.turns.values()
            return [t.status for t in session.state.turns.values()], turn.input

    statuses, text = run(agent())
    assert statuses == ["completed"] and text == "hello there"


def test_a_command_left_in_the_mailbox_is_applied_when_the_thread_opens(
    home: str, workspace: Path
) -> None:
    """A live session died before applying a message: the next open applies it."""
    with open_store(home) as store:
        thread = store.create_thread("u", cwd=str(workspace))
        assert isinstance(store, Mailbox)
        store.post(thread, Submit(text="from the mailbox"))

    async def agent() -> list[str]:
        async with Runtime(home, model=ScriptedModel([Reply("done")])) as runtime:
            session = await runtime.open(thread)
            inputs = [t.input for t in session.state.turns.values()]  # applied before open returns
            await session.wait_idle(10)
            return inputs

    assert run(agent()) == ["from the mailbox"]
    with open_store(home) as store:
        assert isinstance(store, Mailbox)
        assert store.pending(thread) == []


def _parked(home: str, workspace: Path, tool: Tool) -> tuple[str, str]:
    async def main() -> tuple[str, str]:
        model = ScriptedModel([Reply("", [ToolCallSpec(tool.name)])])
        async with Runtime(home, model=model, tools=[tool]) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("go")
            await session.wait_idle(10)
            (call,) = session.state.tool_calls.values()
            return session.thread_id, call.call_id

    return run(main())  # type: ignore[no-any-return]


def test_decisions_that_do_not_fit_fail_offline(home: str, workspace: Path) -> None:
    tool = effect_tool("pay", "non_idempotent", workspace / "effects.txt")
    thread, call_id = _parked(home, workspace, tool)
    count = len(types(home, thread))
    for args, message in [
        (["approve", thread, "nope"], "no tool call 'nope'"),
        (["resolve", thread, call_id, "--as", "done"], "not waiting for a resolution"),
    ]:
        result = CliRunner().invoke(cli, [*args, "--home", home])
        assert result.exit_code == 2 and message in result.output, result.output
    assert len(types(home, thread)) == count
    result = CliRunner().invoke(cli, ["deny", thread, call_id, "--home", home])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli, ["approve", thread, call_id, "--home", home])
    assert result.exit_code == 2 and "is denied, not waiting for a decision" in result.output


def test_decisions_that_do_not_fit_a_live_session_are_not_posted(
    home: str, workspace: Path
) -> None:
    """With a live session holding the thread, the CLI checks the command against the log
    before posting: an unknown or settled call fails, and nothing reaches the mailbox."""
    tool = effect_tool("pay", "non_idempotent", workspace / "effects.txt")

    async def main() -> list[tuple[int, str]]:
        model = ScriptedModel([Reply("", [ToolCallSpec("pay")]), Reply("ok")])
        async with Runtime(home, model=model, tools=[tool]) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("go")
            await session.wait_idle(10)
            thread = session.thread_id
            (call,) = session.state.tool_calls.values()
            outcomes = []
            for args in (
                ["approve", thread, "nope"],
                ["resolve", thread, call.call_id, "--as", "done"],
            ):
                result = await asyncio.to_thread(CliRunner().invoke, cli, [*args, "--home", home])
                outcomes.append((result.exit_code, result.output))
            store = runtime.store
            assert isinstance(store, Mailbox)
            assert store.pending(thread) == []
            return outcomes

    for code, output in run(main()):
        assert code == 2, output
        assert "sent to its inbox" not in output


def test_cancel_with_nothing_running_fails(home: str, workspace: Path) -> None:
    async def create() -> str:
        async with Runtime(home, model=ScriptedModel([])) as runtime:
            return (await runtime.create("u", cwd=str(workspace))).thread_id

    thread = run(create())
    result = CliRunner().invoke(cli, ["cancel", thread, "--home", home])
    assert result.exit_code == 2 and "nothing to cancel" in result.output
    with open_store(home) as store:
        assert isinstance(store, Mailbox)
        assert store.pending(thread) == []


def test_a_stale_cancel_never_aborts_a_later_turn(home: str, workspace: Path) -> None:
    """A cancel for a turn that has ended (sent while it ran, applied later) is ignored."""
    with open_store(home) as store:
        thread = store.create_thread("u", cwd=str(workspace))
        assert isinstance(store, Mailbox)
        store.post(thread, Cancel(turn_id="00000000-0000-7000-8000-000000000001"))

    async def agent() -> list[str]:
        async with Runtime(home, model=ScriptedModel([Reply("hello")])) as runtime:
            session = await runtime.open(thread)
            await session.submit("hi")
            await session.wait_idle(10)
            await asyncio.sleep(0.3)  # the watcher had its chances
            return [t.status for t in session.state.turns.values()]

    assert run(agent()) == ["completed"]


def test_cancel_with_no_live_session_ends_the_turn_and_its_pending_calls(
    home: str, workspace: Path
) -> None:
    tool = effect_tool("pay", "non_idempotent", workspace / "effects.txt")
    thread, call_id = _parked(home, workspace, tool)  # closed while parked: it survives
    result = CliRunner().invoke(cli, ["cancel", thread, "--home", home])
    assert result.exit_code == 0, result.output
    with open_store(home) as store:
        state = store.state(thread)
    assert state.active_turn is None
    assert [t.status for t in state.turns.values()] == ["aborted"]
    assert state.tool_calls[call_id].status == "cancelled"
    assert not (workspace / "effects.txt").exists()


def pay_model() -> ScriptedModel:
    """Pay once (a non-idempotent call: it asks a human by default), then answer."""

    def reply(request: Any, step: int) -> Reply:
        if any(m.get("role") == "tool" for m in request.messages):
            return Reply("paid")
        return Reply("", [ToolCallSpec("pay", {}, id="pay-1")])

    return ScriptedModel(reply)


def pay_tools(paid: list[str]) -> list[Tool]:
    async def pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
        paid.append(ctx.call_id)
        return "ok"

    return [Tool("pay", "pays", {"type": "object"}, "non_idempotent", pay)]


@pytest.mark.parametrize("how", ["open", "resume", "threadlog resume"])
def test_a_decision_made_after_a_clean_close_lets_the_turn_go_on_uninterrupted(
    home: str, workspace: Path, how: str
) -> None:
    """A turn parked on a human when its session closed, then approved with the CLI while
    no session was live: the next session drives it on as it is. Before, the open (or
    resume) recorded a "process stopped" recovery (``thread.resumed`` with
    ``turn_interrupted``, the turn ended ``interrupted``, a continuation), which a clean close
    never warrants."""
    paid: list[str] = []

    async def first() -> str:
        async with Runtime(home, model=pay_model(), tools=pay_tools(paid)) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("pay")
            await session.wait_idle(10)
            assert session.waiting_for_human
            return session.thread_id  # closed cleanly, parked

    thread = run(first())
    code, approved = cli_json("approve", thread, "pay-1", "--home", home)
    assert code == 0 and approved["applied"] is True, approved
    count = len(types(home, thread))
    with open_store(home) as store:  # a program's own thread (sdk): no worker drives it on
        assert waiting_threads(store) == []

    if how == "threadlog resume":
        code, report = cli_json("resume", thread, "--home", home)
        assert code == 0 and report["repaired"] is False, report
        assert len(types(home, thread)) == count  # nothing to repair, nothing written

    async def second() -> None:
        async with Runtime(home, model=pay_model(), tools=pay_tools(paid)) as runtime:
            session = await (runtime.resume(thread) if how == "resume" else runtime.open(thread))
            await session.wait_idle(10)

    run(second())
    after = types(home, thread)[count:]
    assert "turn_interrupted" not in str(after) and after.count("turn.started") == 0
    with open_store(home) as store:
        state = store.state(thread)
        records = store.read(thread)
    assert [t.status for t in state.turns.values()] == ["completed"]
    assert paid == ["pay-1"]
    resumed = [r.data["repairs"] for r in records if r.type == "thread.resumed"]
    assert all(r["kind"] != "turn_interrupted" for repairs in resumed for r in repairs)


def test_a_copy_cut_between_a_response_and_its_proposals_is_recovered_not_driven(
    home: str, workspace: Path
) -> None:
    """A store-level copy (`Store.fork` at any record, as ``threadlog resume --salvage``
    makes) may end between a model response and the proposals of its tool calls, with no
    session open: the turn is not one a clean close left (no session of the copy started it),
    so opening the copy recovers it and proposes the response's calls, rather than driving
    the turn on, which would end it ``completed`` without them."""
    paid: list[str] = []

    def reply(request: Any, step: int) -> Reply:
        if any(m.get("role") == "tool" for m in request.messages):
            return Reply("paid")
        return Reply("", [ToolCallSpec("pay", {}, id="pay-1")])

    async def first() -> str:
        model = ScriptedModel(reply)
        policy = {"non_idempotent": "auto"}
        async with Runtime(home, model=model, tools=pay_tools(paid)) as runtime:
            session = await runtime.create("u", cwd=str(workspace), approval_policy=policy)
            await session.submit("pay")
            await session.wait_idle(10)
            return session.thread_id

    thread = run(first())
    assert paid == ["pay-1"]
    with open_store(home) as store:
        responded = next(r.ord for r in store.read(thread) if r.type == "model.responded")
        copy = store.fork(thread, responded, kind="salvage")
        assert store.state(copy).active_turn is not None

    async def second() -> None:
        async with Runtime(home, model=ScriptedModel(reply), tools=pay_tools(paid)) as runtime:
            session = await runtime.open(copy)
            await session.wait_idle(10)

    run(second())
    with open_store(home) as store:
        state = store.state(copy)
    assert "pay-1" in state.tool_calls  # proposed from the response, not dropped
    assert [t.status for t in state.turns.values()][0] == "interrupted"
