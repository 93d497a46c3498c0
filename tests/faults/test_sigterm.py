"""SIGTERM runs the close protocol: the child exits promptly and leaves a clean, free thread.

The runtime has no signal helper, so the child does what an application would: it installs
``loop.add_signal_handler(SIGTERM, main_task.cancel)``, and cancelling the main task makes
``async with Runtime(...)`` close (session close protocol: stop submissions, cancel the turn,
flush, release the lease). The parent waits until the turn is in the state under test, sends
SIGTERM, and checks: the child exits (within 10 s), the log verifies, the turn ended
``aborted`` — or, when it was parked on a human decision, still waits for it — and the lease
is free (the parent can append, and reopen the thread to finish the work).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import threadlog
from threadlog import open_store
from threadlog.model.turns import is_parked
from threadlog.runtime import Reply, Runtime, ScriptedModel, Tool, ToolContext

CHILD = r"""
import asyncio, signal, sys
from threadlog.runtime import Reply, Runtime, ScriptedModel, Tool, ToolCallSpec

home, workspace, case = sys.argv[1], sys.argv[2], sys.argv[3]

running, streaming = [], []

async def slow(ctx, args):
    running.append(ctx.call_id)  # the start intent is durable: the tool really runs
    await asyncio.sleep(600)
    return "late"

side_effect = "non_idempotent" if case in ("non_idempotent_tool", "approval") else "read_only"
tool = Tool("slow", "a slow tool", {"type": "object"}, side_effect, slow)
if case == "model":
    replies = [Reply(" ".join(["word"] * 1000))]
else:
    replies = [Reply("working", [ToolCallSpec("slow")]), Reply("done")]
policy = {"non_idempotent": "ask" if case == "approval" else "auto"}

class Streaming:
    # the scripted model, noting when a response is streaming (the request has left)
    provider, name = "scripted", "scripted"

    def __init__(self, inner):
        self.inner = inner

    async def stream(self, request):
        async for event in self.inner.stream(request):
            streaming.append(True)
            yield event

def ready(session):
    if case == "model":
        return bool(streaming)
    if case == "approval":
        return session.waiting_for_human
    return bool(running)

async def main():
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    model = Streaming(ScriptedModel(replies, delay=0.05))
    async with Runtime(home, model=model, tools=[tool]) as runtime:
        session = await runtime.create("u", cwd=workspace, approval_policy=policy)
        print("THREAD", session.thread_id, flush=True)
        await session.submit("do the slow thing")
        while not ready(session):
            await asyncio.sleep(0.01)
        print("READY", flush=True)
        await asyncio.sleep(3600)

try:
    asyncio.run(main())
except asyncio.CancelledError:
    print("CLOSED", flush=True)
    sys.exit(0)
"""

CASES = ["read_only_tool", "model", "non_idempotent_tool", "approval"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("THREADLOG_CRASH_AT", None)
    src = os.path.dirname(os.path.dirname(os.path.abspath(threadlog.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env


@pytest.mark.parametrize("case", CASES)
def test_sigterm_closes_cleanly(tmp_path: Path, case: str) -> None:
    home, workspace = str(tmp_path / "home"), tmp_path / "ws"
    workspace.mkdir()
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, home, str(workspace), case],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        try:
            thread = proc.stdout.readline().split()[1]
            assert proc.stdout.readline().strip() == "READY"
        except Exception:
            proc.kill()
            raise AssertionError(proc.stderr.read()) from None
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"the child ignored SIGTERM: {proc.stderr.read()}") from None
        out, err = proc.stdout.read(), proc.stderr.read()
    assert proc.returncode == 0 and "CLOSED" in out, err

    with open_store(home) as store:
        assert store.verify(thread).ok
        state = store.state(thread)
        (turn,) = state.turns.values()
        if case in ("read_only_tool", "model"):
            assert turn.status == "aborted" and state.active_turn is None
            if case == "model":
                types = [r.type for r in store.read(thread)]
                assert "provider.interrupted" in types
            else:
                (call,) = state.tool_calls.values()
                assert call.status == "finished" and call.error == "cancelled"
        else:
            # parked on a human: the approval, or the resolution of a call that may have
            # had its effect; the wait is durable
            assert turn.status == "running" and state.active_turn == turn.turn_id
            assert is_parked(state)
            (call,) = state.tool_calls.values()
            assert call.status == ("proposed" if case == "approval" else "unknown")
        # the lease is free: this process can write to the thread
        store.append(thread, "custom.after_sigterm", {"case": case})
        assert store.verify(thread).ok

    if case in ("non_idempotent_tool", "approval"):
        _finish_parked_turn(home, thread, case)


def _finish_parked_turn(home: str, thread: str, case: str) -> None:
    """The parked turn can be picked up by another process and finished."""
    ran: list[str] = []

    async def fast(ctx: ToolContext, args: dict[str, object]) -> str:
        ran.append(ctx.call_id)
        return "ok"

    tool = Tool("slow", "now fast", {"type": "object"}, "non_idempotent", fast)

    async def main() -> str:
        async with Runtime(home, model=ScriptedModel([Reply("done")]), tools=[tool]) as runtime:
            session = await runtime.open(thread)
            await session.wait_idle(10)
            assert session.waiting_for_human
            (call,) = session.state.tool_calls.values()
            if case == "approval":
                await session.approve(call.call_id)
            else:
                await session.resolve(call.call_id, "abort", note="never mind")
            await session.wait_idle(10)
            assert session.state.active_turn is None
            return next(iter(session.state.turns.values())).status

    assert asyncio.run(main()) == "completed"
    # the approved call runs once; the aborted one (its effect may have happened) never again
    assert len(ran) == (1 if case == "approval" else 0)


def test_a_model_call_cancelled_as_it_starts_is_recorded_interrupted(home: str) -> None:
    """Cancelling the turn while ``provider.started`` is becoming durable (what SIGTERM does
    at that instant) must still give the model call an outcome, as it does for a tool call
    cancelled while ``tool_call.started`` becomes durable ("cancelled before it ran")."""

    async def main() -> str:
        async with Runtime(home, model=ScriptedModel([Reply("hello there")])) as runtime:
            session = await runtime.create("u")

            async def cancel_at_provider_started() -> None:
                # woken by the state change, while the turn awaits the record's durability
                while not any(s.status == "provider_started" for s in session.state.steps.values()):
                    session._changed.clear()
                    await session._changed.wait()
                await session.cancel()

            watcher = asyncio.create_task(cancel_at_provider_started())
            await session.submit("hi")
            await asyncio.wait_for(watcher, 10)
            return session.thread_id

    thread = asyncio.run(main())
    with open_store(home) as store:
        types = [r.type for r in store.read(thread)]
        state = store.state(thread)
    assert types[-2:] == ["turn.ended", "session.closed"] and "provider.started" in types
    assert {s.status for s in state.steps.values()} == {"interrupted"}, types
