"""A command's processes do not outlive an agent killed with SIGKILL (`threadlog.runtime.procs`).

A real agent runs in a child process: its scripted model calls ``run_command`` with a command
that keeps appending to marker files in the workspace. The test kills the agent with SIGKILL
while the command runs and checks that the command's processes end — the direct child by the
parent-death signal at once, the processes it started in the background when the thread is
resumed — and that the resume recorded it where the human deciding "retry or not" looks.

The command's processes are found by their working directory (the test's own workspace), so
that the test sees them whether or not threadlog recorded them; the cleanup kills only those.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from threadlog import open_store
from threadlog.runtime import RecoveryReport, Runtime, ScriptedModel

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")

AGENT = """
import asyncio, sys
from threadlog.runtime import Reply, Runtime, ScriptedModel, ToolCallSpec

async def main(home, ws, command):
    model = ScriptedModel([Reply(tool_calls=[ToolCallSpec("run_command", {"command": command})])])
    async with Runtime(home, model=model) as runtime:
        session = await runtime.create(
            "u", cwd=ws, approval_policy={"non_idempotent": "auto"}
        )
        print(session.thread_id, flush=True)
        await session.submit("go")
        await asyncio.sleep(600)  # killed long before

asyncio.run(main(*sys.argv[1:4]))
"""

LOOP = "while true; do echo x >> {marker}; sleep 0.02; done"


def in_workspace(ws: Path) -> list[int]:
    """Live (not zombie) processes whose working directory is ``ws``."""
    real = os.path.realpath(ws)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/cwd") != real:
                continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def wait_until(predicate: Any, what: str) -> None:
    """Poll ``predicate`` (a bound for a broken build, not a timing check)."""
    for _ in range(1000):
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"gave up waiting: {what}")


def growing(path: Path) -> bool:
    return path.exists() and path.stat().st_size > 8


def settled(path: Path) -> bool:
    """The marker does not grow any more (its writers are gone: checked first)."""
    size = path.stat().st_size
    time.sleep(0.1)
    return path.stat().st_size == size


def kill_leftovers(ws: Path) -> None:
    for pid in in_workspace(ws):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_and_kill_agent(home: Path, ws: Path, command: str, markers: list[Path]) -> str:
    """Start the agent, wait until its command writes every marker, SIGKILL the agent."""
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT, str(home), str(ws), command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with agent:
        try:
            assert agent.stdout is not None
            thread_id = agent.stdout.readline().strip()
            wait_until(lambda: all(growing(m) for m in markers), "the command to start")
        finally:
            agent.kill()
            _, stderr = agent.communicate()
    assert agent.returncode == -signal.SIGKILL, stderr
    return thread_id


def test_the_direct_child_dies_with_the_agent(tmp_path: Path) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    marker = ws / "marker"
    try:
        run_and_kill_agent(home, ws, LOOP.format(marker="marker"), [marker])
        # the loop runs in the command's shell itself: the parent-death signal ends it
        wait_until(lambda: not in_workspace(ws), "the command to die with the agent")
        assert settled(marker)
    finally:
        kill_leftovers(ws)


def test_resume_kills_what_the_command_left_running_and_records_it(tmp_path: Path) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    # Two background writers the parent-death signal does not reach: one carries the run's
    # token in its environment, one cleared its environment and is found by its group.
    command = (
        f"({LOOP.format(marker='tagged')}) & "
        f"env -i /bin/sh -c '{LOOP.format(marker='untagged')}' & wait"
    )
    markers = [ws / "tagged", ws / "untagged"]
    try:
        thread_id = run_and_kill_agent(home, ws, command, markers)
        from threadlog.runtime.procs import RUNS_DIR

        (record,) = (home / RUNS_DIR).glob("*.json")
        wait_until(lambda: len(in_workspace(ws)) >= 2, "the background writers to show")

        async def resume() -> RecoveryReport:
            async with Runtime(str(home), model=ScriptedModel([])) as runtime:
                session = await runtime.resume(thread_id, continue_work=False)
                assert session.recovery is not None
                return session.recovery

        recovery = asyncio.run(resume())
        assert in_workspace(ws) == []  # gone by the time resume returns
        assert all(settled(m) for m in markers)
        assert not record.exists()

        (repair,) = [r for r in recovery.repairs if r["kind"] == "orphan_processes"]
        assert len(repair["killed"]) >= 2 and repair["survivors"] == []
        assert "killed on resume" in repair["note"]
        with open_store(str(home)) as store:
            records = store.read(thread_id)
        (resumed,) = [r for r in records if r.type == "thread.resumed"]
        assert repair in resumed.data["repairs"]
        (unknown,) = [r for r in records if r.type == "tool_call.unknown"]
        assert unknown.data["call_id"] == repair["call_id"]
        assert "killed on resume" in unknown.data["reason"]
        assert recovery.waiting_for_human == (repair["call_id"],)
    finally:
        kill_leftovers(ws)


def test_reaping_never_touches_a_process_that_is_not_the_runs(tmp_path: Path) -> None:
    """A record whose group id and start time name a stranger (the pid was reused after the
    command's group ended) kills nothing: the stranger neither carries the token nor has the
    leader's start time."""
    from threadlog.runtime import procs

    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        run = procs.begin(str(tmp_path / "runs"), "t", "c", 1)
        run = procs.started(run, stranger.pid)  # as if the stranger were the leader...
        real_start = run.start
        assert real_start is not None
        from dataclasses import replace

        reused = replace(run, start=real_start - 1)  # ...but it started at another time
        assert procs.reap(reused).killed == []
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_cancelling_run_command_while_it_spawns_ends_the_command(tmp_path: Path) -> None:
    """A cancel that lands while the command is being set up (its cwd walked, its record
    written, asyncio between the fork and the pipes being connected) ends the whole command
    promptly — not leaving asyncio waiting for a leader it only signalled (CPython 3.11 can
    hang there) — and leaks no fd."""
    from threadlog.runtime.tools import ToolContext, run_command

    ws = tmp_path / "ws"
    ws.mkdir()
    ctx = ToolContext("thread", "call", 1, "key", ws)

    async def cancel_after(ticks: int) -> bool:
        task = asyncio.create_task(
            run_command.run(ctx, {"command": "sleep 300 & sleep 300; wait", "timeout": 600})
        )
        for _ in range(ticks):
            await asyncio.sleep(0)
        task.cancel()
        try:
            await asyncio.wait_for(task, 5)  # a bound for a hang, not a timing check
        except asyncio.CancelledError:
            return True
        except TimeoutError:
            return False
        return True  # finished before the cancel could land: fine too

    fds = len(os.listdir("/proc/self/fd"))
    try:
        hung = [ticks for ticks in list(range(12)) * 2 if not asyncio.run(cancel_after(ticks))]
        assert hung == []
        wait_until(lambda: not in_workspace(ws), "the cancelled commands to end")
        assert len(os.listdir("/proc/self/fd")) == fds  # no directory fd left open
    finally:
        kill_leftovers(ws)
