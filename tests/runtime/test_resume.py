"""Resume: the three classes of unfinished tool calls, reports, versions, damage, salvage, fork."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from threadlog import IntegrityError, open_store
from threadlog.cli import cli
from threadlog.cli import live as _live  # noqa: F401 - registers the commands
from threadlog.model import codec
from threadlog.model.envelope import encode_record
from threadlog.model.reducer import replay
from threadlog.model.stepcontext import step_context
from threadlog.runtime import (
    RecoveryReport,
    Reply,
    Runtime,
    ScriptedModel,
    Tool,
    ToolCallSpec,
    ToolContext,
)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def effect_tool(name: str, side_effect: str, log: Path, *, reconcile: bool = False) -> Tool:
    """A tool that appends its call id to a file: its effects can be counted."""

    async def body(ctx: ToolContext, args: dict[str, Any]) -> Any:
        with open(log, "a") as f:
            f.write(ctx.call_id + "\n")
        return "done"

    async def check(key: str) -> bool | None:
        lines = log.read_text().split() if log.exists() else []
        return key in {f"k:{c}" for c in lines}

    return Tool(
        name,
        f"{name} (test)",
        {"type": "object"},
        side_effect,
        body,  # type: ignore[arg-type]
        idempotency_key=(lambda ctx, args: f"k:{ctx.call_id}") if reconcile else None,
        reconcile=check if reconcile else None,
    )


def crashed_log(
    home: str, workspace: Path, tool: Tool, *, until: str, args: dict[str, Any] | None = None
) -> str:
    """A thread whose process 'died' right after the first ``until`` record: the live records
    are copied to a fresh home, as a kill -9 would leave them."""

    async def main() -> str:
        model = ScriptedModel([Reply("", [ToolCallSpec(tool.name, args or {})]), Reply("finished")])
        async with Runtime(home, model=model, tools=[tool]) as runtime:
            session = await runtime.create(
                "u", cwd=str(workspace), approval_policy={"non_idempotent": "auto"}
            )
            await session.submit("do it")
            await session.wait_idle(10)
            return session.thread_id

    thread = run(main())
    with open_store(home) as store:
        records = store.read(thread)
    cut = next(r.ord for r in records if r.type == until)
    crashed = home + "-crashed"
    # the rollouts only: the index of the finished run knows records a process killed at the
    # cut had not written yet (a real kill leaves an index that knows at most the cut)
    shutil.copytree(home, crashed, ignore=shutil.ignore_patterns("index.sqlite3*"))
    path = next(Path(crashed, "threads").glob(f"*/*/{thread}.jsonl"))
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:cut]))
    return crashed


def resume(home: str, thread: str, tool: Tool, replies: list[Reply], **kw: Any) -> RecoveryReport:
    async def main() -> RecoveryReport:
        async with Runtime(home, model=ScriptedModel(replies), tools=[tool]) as runtime:
            session = await runtime.resume(thread, **kw)
            await session.wait_idle(10)
            assert session.recovery is not None
            return session.recovery

    return run(main())  # type: ignore[no-any-return]


def thread_of(home: str) -> str:
    with open_store(home) as store:
        (thread,) = store.thread_ids()
        return thread


def test_class_1_a_durable_result_is_reused(home: str, workspace: Path) -> None:
    log = workspace / "effects.txt"
    tool = effect_tool("charge", "non_idempotent", log)
    crashed = crashed_log(home, workspace, tool, until="tool_call.finished")
    log.write_text(log.read_text())  # the effect happened once, before the "crash"
    thread = thread_of(crashed)
    report = resume(crashed, thread, tool, [Reply("all done")])
    assert log.read_text().count("\n") == 1
    assert {"kind": "result_reused", "call_id": "call_1_0"} in report.repairs
    with open_store(crashed) as store:
        state = store.state(thread)
        assert state.active_turn is None
        outcomes = [t.status for t in state.turns.values()]
        assert outcomes == ["interrupted", "completed"]  # the continuation finished the task
        assert store.verify(thread).ok


def test_class_2_not_started_calls_run_once(home: str, workspace: Path) -> None:
    log = workspace / "effects.txt"
    tool = effect_tool("charge", "non_idempotent", log)
    crashed = crashed_log(home, workspace, tool, until="tool_call.approved")
    log.unlink()  # the crash came before the tool ran
    thread = thread_of(crashed)
    report = resume(crashed, thread, tool, [Reply("all done")])
    assert log.read_text().split() == ["call_1_0"]
    assert {"kind": "not_started", "call_id": "call_1_0"} in report.repairs
    with open_store(crashed) as store:
        state = store.state(thread)
        assert state.tool_calls["call_1_0"].status == "finished"
        assert state.tool_calls["call_1_0"].attempt == 1


@pytest.mark.parametrize("side_effect", ["read_only", "idempotent"])
def test_class_3_safe_tools_run_again(home: str, workspace: Path, side_effect: str) -> None:
    log = workspace / "effects.txt"
    tool = effect_tool("fetch", side_effect, log)
    crashed = crashed_log(home, workspace, tool, until="tool_call.started")
    thread = thread_of(crashed)
    report = resume(crashed, thread, tool, [Reply("all done")])
    assert {"kind": "rerun", "call_id": "call_1_0"} in report.repairs
    with open_store(crashed) as store:
        call = store.state(thread).tool_calls["call_1_0"]
        assert call.status == "finished" and call.attempt == 2


def test_class_3_non_idempotent_becomes_unknown_and_waits(home: str, workspace: Path) -> None:
    log = workspace / "effects.txt"
    tool = effect_tool("charge", "non_idempotent", log)
    crashed = crashed_log(home, workspace, tool, until="tool_call.started")
    thread = thread_of(crashed)
    before = log.read_text()
    report = resume(crashed, thread, tool, [Reply("all done")])
    assert log.read_text() == before  # never re-run on a guess
    assert report.waiting_for_human == ("call_1_0",)
    assert {"kind": "outcome_unknown", "call_id": "call_1_0"} in report.repairs
    with open_store(crashed) as store:
        state = store.state(thread)
        assert state.tool_calls["call_1_0"].status == "unknown"
        assert state.active_turn is not None  # the continuation turn waits for a human

    # a human says it happened: the turn goes on without running it again
    code = CliRunner().invoke(
        cli, ["resolve", thread, "call_1_0", "--as", "done", "--home", crashed, "--note", "seen"]
    )
    assert code.exit_code == 0, code.output

    async def finish() -> None:
        async with Runtime(crashed, model=ScriptedModel([Reply("ok")]), tools=[tool]) as runtime:
            session = await runtime.open(thread)
            await session.wait_idle(10)

    run(finish())
    assert log.read_text() == before
    with open_store(crashed) as store:
        state = store.state(thread)
        assert state.tool_calls["call_1_0"].status == "done"
        assert state.active_turn is None


def test_the_recovery_report_is_a_typed_value(home: str, workspace: Path) -> None:
    """``session.recovery`` is a frozen `RecoveryReport`: each field typed, matching the log's
    ``thread.resumed``, and its ``to_data`` is what ``threadlog resume --json`` prints."""
    tool = effect_tool("charge", "non_idempotent", workspace / "effects.txt")
    crashed = crashed_log(home, workspace, tool, until="tool_call.started")
    thread = thread_of(crashed)
    report = resume(crashed, thread, tool, [Reply("all done")], continue_work=True)
    assert isinstance(report, RecoveryReport)
    with open_store(crashed) as store:
        records = store.read(thread)
        state = store.state(thread)
    (resumed,) = [r for r in records if r.type == "thread.resumed"]
    (interrupted,) = [t for t in state.turns.values() if t.status == "interrupted"]
    (continued,) = [
        r.data["turn_id"]
        for r in records
        if r.type == "turn.started" and r.data.get("resumes") == interrupted.turn_id
    ]
    assert report.thread_id == thread
    assert report.resumed_ord == resumed.ord
    assert report.repairs == tuple(resumed.data["repairs"])
    assert report.reconciled == {"call_1_0": "unknown"}  # no reconcile hook: a human decides
    assert report.interrupted_turn == interrupted.turn_id
    assert report.continued_by == continued
    assert report.waiting_for_human == ("call_1_0",)
    with pytest.raises(AttributeError):
        report.resumed_ord = 0  # type: ignore[misc]
    assert report.to_data() == {
        "thread": thread,
        "resumed_ord": resumed.ord,
        "repairs": resumed.data["repairs"],
        "reconciled": {"call_1_0": "unknown"},
        "interrupted_turn": interrupted.turn_id,
        "continued_by": continued,
        "waiting_for_human": ["call_1_0"],
        "damaged_artifacts": [],
    }
    json.dumps(report.to_data())  # plain JSON


@pytest.mark.parametrize(("happened", "decision", "runs"), [(True, "done", 1), (False, "retry", 1)])
def test_class_3_reconcile_asks_the_downstream_system(
    home: str, workspace: Path, happened: bool, decision: str, runs: int
) -> None:
    log = workspace / "effects.txt"
    tool = effect_tool("charge", "non_idempotent", log, reconcile=True)
    crashed = crashed_log(home, workspace, tool, until="tool_call.started")
    thread = thread_of(crashed)
    if not happened:
        log.unlink()
    report = resume(crashed, thread, tool, [Reply("all done")])
    assert report.reconciled == {"call_1_0": decision}
    assert log.read_text().split() == ["call_1_0"] * runs
    with open_store(crashed) as store:
        state = store.state(thread)
        call = state.tool_calls["call_1_0"]
        assert call.decided_by == "reconcile:charge"
        assert call.status == ("done" if happened else "finished")
        assert state.active_turn is None


def test_an_interrupted_model_call_is_recorded_and_issued_again(home: str, workspace: Path) -> None:
    log = workspace / "effects.txt"
    tool = effect_tool("charge", "read_only", log)
    crashed = crashed_log(home, workspace, tool, until="provider.started")
    thread = thread_of(crashed)
    model_replies = [Reply("the answer")]
    report = resume(crashed, thread, tool, model_replies)
    step = next(r for r in report.repairs if r["kind"] == "step_interrupted")
    with open_store(crashed) as store:
        records = store.read(thread)
        interrupted = [r for r in records if r.type == "provider.interrupted"]
        assert [r.data["step_id"] for r in interrupted] == [step["step_id"]]
        started = [r for r in records if r.type == "step.started"]
        # the re-issued call starts from the same conversation (plus the resume note)
        first, again = (
            step_context(records, started[0].data["step_id"])["messages"],  # type: ignore[index]
            step_context(records, started[-1].data["step_id"])["messages"],  # type: ignore[index]
        )
        assert "delta" in started[-1].data  # by reference, across the resume
        assert again[: len(first)] == first
        assert again[-1]["role"] == "system"
        assert store.state(thread).active_turn is None


def test_resume_of_a_clean_thread_reports_nothing_to_repair(home: str, workspace: Path) -> None:
    async def main() -> str:
        async with Runtime(home, model=ScriptedModel([Reply("hi")])) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("hello")
            await session.wait_idle(10)
            return session.thread_id

    thread = run(main())
    result = CliRunner().invoke(cli, ["resume", thread, "--home", home, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["repairs"] == [] and report["interrupted_turn"] is None
    assert report["repaired"] is False and report["resumed_ord"] is None
    with open_store(home) as store:
        types = [r.type for r in store.read(thread)]
        assert "thread.resumed" not in types and types[-1] == "session.closed"  # nothing written


def test_cli_resume_reports_a_torn_tail_and_unknown_calls(home: str, workspace: Path) -> None:
    log = workspace / "effects.txt"
    tool = effect_tool("append_file", "non_idempotent", log)
    crashed = crashed_log(home, workspace, tool, until="tool_call.started")
    thread = thread_of(crashed)
    path = next(Path(crashed, "threads").glob(f"*/*/{thread}.jsonl"))
    with open(path, "ab") as f:
        f.write(b'{"v":1,"id":"half a rec')  # a crash mid-write
    result = CliRunner().invoke(cli, ["resume", thread, "--home", crashed])
    assert result.exit_code == 0, result.output
    assert "torn_tail_removed" in result.output and "outcome_unknown" in result.output
    assert f"threadlog resolve {thread} call_1_0" in result.output
    with open_store(crashed) as store:
        assert store.verify(thread).ok


def test_damage_in_the_middle_stops_resume_and_salvage_keeps_the_prefix(
    home: str, workspace: Path
) -> None:
    async def main() -> str:
        async with Runtime(home, model=ScriptedModel([Reply("a"), Reply("b")])) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            for text in ("one", "two"):
                await session.submit(text)
                await session.wait_idle(10)
            return session.thread_id

    thread = run(main())
    with open_store(home) as store:
        prefix = [(r.id, r.type, r.data) for r in store.read(thread, limit=5)]
    path = next(Path(home, "threads").glob(f"*/*/{thread}.jsonl"))
    lines = path.read_bytes().splitlines(keepends=True)
    offset = sum(len(x) for x in lines[:5])
    lines[5] = lines[5].replace(b'"turn_id":"', b'"turn_id":"X', 1)
    path.write_bytes(b"".join(lines))
    before = path.read_bytes()

    async def try_resume() -> None:
        async with Runtime(home) as runtime:
            await runtime.resume(thread)

    with pytest.raises(IntegrityError) as info:
        run(try_resume())
    assert info.value.ord == 6 and info.value.offset == offset
    result = CliRunner().invoke(cli, ["resume", thread, "--home", home])
    assert result.exit_code == 3
    assert "damaged at ord 6, byte" in result.stderr and "--salvage" in result.stderr
    assert path.read_bytes() == before  # nothing truncated
    result = CliRunner().invoke(cli, ["resume", thread, "--home", home, "--salvage", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    salvaged = report["thread"]
    assert report["salvaged_from"]["ord"] == 5
    with open_store(home) as store:
        state = store.state(salvaged)
        assert state.lineage is not None
        assert state.lineage == {**state.lineage, "thread": thread, "ord": 5, "kind": "salvage"}
        assert store.verify(salvaged).ok
        copied = [(r.id, r.type, r.data) for r in store.read(salvaged, limit=5)]
        assert copied[1:] == prefix[1:]  # ord 1 is the salvage's own thread.created
    assert path.read_bytes() == before


def test_an_older_format_is_upcast_not_refused(home: str, tmp_path: Path) -> None:
    thread = "01a22a49-510c-7584-9d29-5f2f1ad5387a"
    rows: list[tuple[str, dict[str, Any]]] = [
        ("thread.created", {"format": 0, "principal": "old", "config": {}}),
        ("turn.started", {"turn_id": "t", "input": "hi"}),
        (
            "tool_call.proposed",
            {
                "turn_id": "t",
                "call_id": "c",
                "tool": "read_file",
                "args": {},
                "side_effect": "read_only",
            },
        ),
        ("tool_call.approved", {"call_id": "c", "by": "policy"}),
        ("tool_call.started", {"call_id": "c"}),
        ("tool_call.result", {"call_id": "c", "output": "text"}),  # format 0
        ("turn.ended", {"turn_id": "t", "outcome": "completed"}),
    ]
    lines, prev = [], None
    for i, (type_, data) in enumerate(rows, start=1):
        line, prev = encode_record(
            id=f"01a22a49-510c-7584-9d29-5f2f1ad5{i:04d}",
            thread=thread,
            ord=i,
            parent=None,
            ts="2025-01-01T00:00:00.000000Z",
            type=type_,
            data_json=codec.canonical(data),
            prev=prev,
            v=0,
        )
        lines.append(line)
    with open_store(home) as store:
        path = Path(store.path_of(thread))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(lines))
    with open_store(home) as store:
        assert store.verify(thread).ok
        call = store.state(thread).tool_calls["c"]
        assert (call.status, call.ok, call.result) == ("finished", True, "text")
        store.append(thread, "custom.note", {"now": "v1"})
        records = store.read(thread)
        assert [r.v for r in records] == [0] * 7 + [1]
        assert replay(records).last_ord == 8
        assert store.index.tool_calls(thread)[0]["status"] == "finished"


def test_a_newer_format_is_refused_clearly(home: str) -> None:
    thread = "01a22a49-510c-7584-9d29-5f2f1ad5387b"
    line, _ = encode_record(
        id="01a22a49-510c-7584-9d29-5f2f1ad50001",
        thread=thread,
        ord=1,
        parent=None,
        ts="2030-01-01T00:00:00.000000Z",
        type="thread.created",
        data_json=codec.canonical({"format": 9, "principal": "p", "config": {}}),
        prev=None,
        v=9,
    )
    with open_store(home) as store:
        path = Path(store.path_of(thread))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(line)
    with open_store(home) as store:
        report = store.verify(thread)
        assert not report.ok and "newer threadlog" in str(report.error)


FORK_CHILD = """
import sys, threadlog
with threadlog.open_store(sys.argv[1]) as store:
    store.fork(sys.argv[2], 4, changes={"model": "other"})
"""


@pytest.mark.parametrize("point", ["fork.copied", None])
def test_a_fork_is_whole_or_absent_after_a_crash(home: str, point: str | None) -> None:
    with open_store(home) as store:
        thread = store.create_thread("u", model="m")
        for i in range(6):
            store.append(thread, "custom.x", {"i": i})
    env = dict(os.environ)
    if point:
        env["THREADLOG_CRASH_AT"] = point
    proc = subprocess.run(
        [sys.executable, "-c", FORK_CHILD, home, thread], env=env, capture_output=True, timeout=60
    )
    assert proc.returncode == (137 if point else 0), proc.stderr
    with open_store(home) as store:
        others = [t for t in store.thread_ids() if t != thread]
        if point:
            assert others == []  # none of it
            assert not list(Path(home, "threads").glob("*/*/*.tmp"))  # the orphan was cleaned
        else:
            (child,) = others
            state = store.state(child)
            assert state.config == {"model": "other"} and state.last_ord == 5
            assert state.lineage is not None and state.lineage["ord"] == 4
            assert store.verify(child).ok


def test_fork_keeps_ords_ids_and_unknown_states(home: str, workspace: Path) -> None:
    log = workspace / "effects.txt"
    tool = effect_tool("charge", "non_idempotent", log)
    crashed = crashed_log(home, workspace, tool, until="tool_call.started")
    thread = thread_of(crashed)
    resume(crashed, thread, tool, [Reply("x")], continue_work=False)
    with open_store(crashed) as store:
        child = store.fork(thread)
        source, copy = store.read(thread), store.read(child)
        assert [(r.ord, r.id, r.type, r.data) for r in copy[1:]] == [
            (r.ord, r.id, r.type, r.data) for r in source[1:]
        ]
        assert store.state(child).tool_calls["call_1_0"].status == "unknown"  # not a guess
        assert store.verify(child).ok
