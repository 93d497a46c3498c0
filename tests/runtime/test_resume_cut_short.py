"""A resume that dies between ending the running turn ``interrupted`` and starting the turn
that carries on with its task: the next resume (or open, or ``threadlog resume``) starts that
continuation, and steering queued for the task is consumed by it, never started as a turn of
its own.

The rare failure of ``tests/faults/test_agent_kill9.py``: a kill while goal 2's steering was queued,
then a kill right after the resume's ``turn.ended`` (``THREADLOG_CRASH_AT=turn.ended``), and
the run after that started "steer 2: keep the report short" as a turn by itself
(`Session.start_queued`), dropping the goal's task.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.test_handover import cli_json
from threadlog import open_store
from threadlog.model.envelope import Record
from threadlog.runtime import ModelRequest, Reply, Runtime, ScriptedModel, Tool, ToolCallSpec
from threadlog.runtime.takeover import interrupted_threads, take_over

TASK = "look it up and report"
STEER = "steer: keep it short"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def lookup_tool(gate: asyncio.Event | None = None) -> Tool:
    """A read-only tool that waits at ``gate`` (if any) before it answers."""

    async def body(ctx: Any, args: dict[str, Any]) -> Any:
        if gate is not None:
            await gate.wait()
        return "looked"

    return Tool("lookup", "lookup (test)", {"type": "object"}, "read_only", body)


def reply(request: ModelRequest, step: int) -> Reply:
    """Look it up once, then answer (a function of the request: it makes sense after a crash)."""
    if any(m.get("role") == "tool" for m in request.messages):
        return Reply("done")
    return Reply("", [ToolCallSpec("lookup", {}, id="lookup-1")])


def records_of(home: str, thread: str) -> list[Record]:
    with open_store(home) as store:
        return store.read(thread)


def crash_copy(home: str, thread: str, last_ord: int, to: str) -> str:
    """The home as a kill -9 right after record ``last_ord`` leaves it (rollouts only: the
    index of the run that went on knows records the killed process never wrote)."""
    shutil.copytree(home, to, ignore=shutil.ignore_patterns("index.sqlite3*"))
    path = next(Path(to, "threads").glob(f"*/*/{thread}.jsonl"))
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:last_ord]))
    return to


def steered_run(home: str, workspace: Path) -> str:
    """A thread whose turn was steered while its tool ran (to completion)."""

    async def main() -> str:
        gate = asyncio.Event()
        async with Runtime(home, model=ScriptedModel(reply), tools=[lookup_tool(gate)]) as rt:
            session = await rt.create("u", cwd=str(workspace))
            await session.submit(TASK)
            while not any(c.status == "running" for c in session.state.tool_calls.values()):
                await asyncio.sleep(0.001)
            await session.submit(STEER)  # queued: the turn runs
            gate.set()
            await session.wait_idle(10)
            return session.thread_id

    return str(run(main()))


def resume_cut_short(
    home: str, workspace: Path, tmp_path: Path, *, steer: bool, source: str = "sdk"
) -> tuple[str, str]:
    """A thread whose first process died with its turn running (with steering queued for it,
    or a tool call started), then whose resume (its session opened by ``source``) died right
    after its ``turn.ended`` (``interrupted``), before the continuation's ``turn.started``.
    Returns (home, thread)."""
    thread = steered_run(home, workspace)
    first = "input.queued" if steer else "tool_call.started"
    cut = next(r.ord for r in records_of(home, thread) if r.type == first)
    crashed = crash_copy(home, thread, cut, str(tmp_path / "crashed"))

    async def resume() -> None:
        model = ScriptedModel(reply)
        async with Runtime(crashed, model=model, tools=[lookup_tool()], source=source) as rt:
            session = await rt.resume(thread)
            await session.wait_idle(10)

    run(resume())  # what the resume writes, to its end; then cut after its turn.ended
    records = records_of(crashed, thread)
    ended = next(
        r.ord
        for r in records
        if r.ord > cut and r.type == "turn.ended" and r.data["outcome"] == "interrupted"
    )
    assert records[ended].type == "turn.started" and records[ended].data["resumes"]
    return crash_copy(crashed, thread, ended, str(tmp_path / "cut-short")), thread


@pytest.mark.parametrize("steer", [True, False], ids=["steered", "plain"])
@pytest.mark.parametrize("how", ["resume", "open"])
def test_a_continuation_cut_off_by_a_crash_is_started_by_the_next_resume(
    home: str, workspace: Path, tmp_path: Path, how: str, steer: bool
) -> None:
    cut_short, thread = resume_cut_short(home, workspace, tmp_path, steer=steer)
    before = records_of(cut_short, thread)
    with open_store(cut_short) as store:
        state = store.state(thread)
    (interrupted,) = state.turns
    assert state.active_turn is None and state.turns[interrupted].status == "interrupted"
    assert [i.text for i in state.pending_inputs] == ([STEER] if steer else [])

    async def again() -> Any:
        async with Runtime(cut_short, model=ScriptedModel(reply), tools=[lookup_tool()]) as rt:
            session = await (rt.resume(thread) if how == "resume" else rt.open(thread))
            await session.wait_idle(10)
            return session.recovery

    report = run(again())
    with open_store(cut_short) as store:
        state = store.state(thread)
        assert store.verify(thread).ok
    after = records_of(cut_short, thread)[len(before) :]
    # the task goes on in a continuation of the interrupted turn, and nothing else runs
    assert state.active_turn is None
    (continued,) = (t for t in state.turns if t != interrupted)
    turn = state.turns[continued]
    assert (turn.input, turn.status) == (TASK, "completed")
    assert [r.data.get("resumes") for r in after if r.type == "turn.started"] == [interrupted]
    assert report is not None and report.continued_by == continued
    # steering queued for the task is consumed by it, not started as a turn of its own
    assert not state.pending_inputs
    assert [state.inputs[i].text for i in turn.inputs] == ([STEER] if steer else [])
    # the cut-off tool call was settled once (run again: read-only), not left open
    assert state.tool_calls["lookup-1"].status == "finished"


def test_cli_resume_starts_a_continuation_cut_off_by_a_crash(
    home: str, workspace: Path, tmp_path: Path
) -> None:
    """``threadlog resume`` on such a thread leaves the continuation running for the next
    session (it said "nothing to repair" and wrote nothing)."""
    cut_short, thread = resume_cut_short(home, workspace, tmp_path, steer=True)
    interrupted = next(
        r.data["turn_id"] for r in records_of(cut_short, thread) if r.type == "turn.started"
    )
    code, report = cli_json("resume", thread, "--home", cut_short)
    assert code == 0, report
    assert report["repaired"] is True and report["continued_by"] is not None
    with open_store(cut_short) as store:
        state = store.state(thread)
    running = state.turns[report["continued_by"]]
    assert state.active_turn == running.turn_id and running.input == TASK
    started = [r for r in records_of(cut_short, thread) if r.type == "turn.started"]
    assert [r.data.get("resumes") for r in started] == [None, interrupted]


def test_a_turn_left_interrupted_by_a_clean_close_is_not_continued_later(
    home: str, workspace: Path, tmp_path: Path
) -> None:
    """``resume(continue_work=False)`` that closes cleanly chose not to go on: a later open
    or resume does not start the task again on its own."""
    thread = steered_run(home, workspace)
    cut = next(r.ord for r in records_of(home, thread) if r.type == "tool_call.started")
    crashed = crash_copy(home, thread, cut, str(tmp_path / "crashed"))

    async def main() -> None:
        async with Runtime(crashed, model=ScriptedModel(reply), tools=[lookup_tool()]) as rt:
            session = await rt.resume(thread, continue_work=False)
            await session.wait_idle(10)
        for reopen in ("open", "resume"):
            async with Runtime(crashed, model=ScriptedModel(reply), tools=[lookup_tool()]) as rt:
                session = await (rt.open(thread) if reopen == "open" else rt.resume(thread))
                await session.wait_idle(10)

    run(main())
    with open_store(crashed) as store:
        state = store.state(thread)
    assert [t.status for t in state.turns.values()] == ["interrupted"]


def test_a_service_takes_over_a_continuation_cut_off_by_a_crash(
    home: str, workspace: Path, tmp_path: Path
) -> None:
    """A server or worker that died in the middle of its takeover of a thread (between the
    turn's ``turn.ended`` and the continuation's ``turn.started``) leaves no turn running: the
    next service still finds the thread (`interrupted_threads`: its catalog status is
    ``interrupted`` and the session never closed), and its takeover carries on with the task.
    Before, only threads with a running turn were looked at, and the task sat dropped."""
    cut_short, thread = resume_cut_short(home, workspace, tmp_path, steer=False, source="api")
    with open_store(cut_short) as store:  # (its index rebuilt from the rollouts)
        assert store.thread_info(thread).status == "interrupted"
        # (what opened the open session, from the state: no log is read back to its record)
        assert store.state(thread, history=False).session_source == "api"
        assert interrupted_threads(store) == [thread]
        assert interrupted_threads(store, sources=("sdk",)) == []  # a user's program's own

    async def take() -> None:
        model = ScriptedModel(reply)
        async with Runtime(cut_short, model=model, tools=[lookup_tool()], source="api") as rt:
            session = await take_over(rt, thread)
            assert session is not None
            await session.wait_idle(10)

    run(take())
    with open_store(cut_short) as store:
        state = store.state(thread)
        assert store.thread_info(thread).status == "idle"
        assert interrupted_threads(store) == []
    assert [(t.input, t.status) for t in state.turns.values()] == [
        (TASK, "interrupted"),
        (TASK, "completed"),
    ]


def test_a_service_leaves_a_turn_a_clean_resume_chose_not_to_continue(
    home: str, workspace: Path, tmp_path: Path
) -> None:
    """A service's resume with ``continue_work=False`` that closed cleanly leaves the thread
    ``interrupted`` in the catalog, but no later service takes it over."""
    thread = steered_run(home, workspace)
    cut = next(r.ord for r in records_of(home, thread) if r.type == "tool_call.started")
    crashed = crash_copy(home, thread, cut, str(tmp_path / "crashed"))

    async def main() -> None:
        model = ScriptedModel(reply)
        async with Runtime(crashed, model=model, tools=[lookup_tool()], source="api") as rt:
            session = await rt.resume(thread, continue_work=False)
            await session.wait_idle(10)

    run(main())
    with open_store(crashed) as store:
        assert store.thread_info(thread).status == "interrupted"
        assert interrupted_threads(store) == []
        # a worker that polls (``checked``) reads such a thread once, not at every poll
        checked: dict[str, int] = {}
        assert interrupted_threads(store, checked=checked) == [] and thread in checked
        reads: list[str] = []
        state = store.state
        store.state = lambda t, **kw: reads.append(t) or state(t, **kw)  # type: ignore[method-assign]
        assert interrupted_threads(store, checked=checked) == [] and reads == []
        store.append(thread, "custom.note", {"n": 1})  # its log grew: read again
        assert interrupted_threads(store, checked=checked) == [] and reads == [thread]
