"""Crash right after every kind of record, resume, and finish the work correctly.

For every type of the event catalogue, a child process runs the agent workload with
``--all-types`` (`tests.harness.agent_workload`: three goals that between them write every
type a run can write: tool calls of the three side-effect classes, a denial by policy, an
approval by the workload, steering, a config change, a plan version, a label, a memory written
and revoked, an artifact, a compaction, a branch summary, a leaf move, a sub-agent, and a model
call that fails mid-stream) with ``THREADLOG_CRASH_AT=<type>``: it exits 137 right after the
first record of that type is durable. The test process then resumes the thread with the same
workload code (``Runtime.resume``, approving and resolving what waits for a human) and drives
it to its end, and checks (`tests.harness.agent_crashloop.check_agent_home`): every record
the child acknowledged is still there, every log verifies, goals 1 and 3 completed and goal 2
failed (as scripted), nothing is left open, and each ``charge`` (non-idempotent) took effect at
most once — exactly once for the calls that finished ok or were resolved done.

Three types are written only when a thread is *resumed* after a crash: ``thread.resumed``,
``tool_call.unknown`` and ``tool_call.resolved``. For those, a first child dies inside its
first ``charge`` (``--die-in-charge before|after``: the effect has not / has happened), and the
crashing child is the one that resumes it: it crashes in the middle of the recovery, and the
test process recovers the recovery.
"""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path

import pytest

from tests.harness.agent_crashloop import check_agent_home, run_agent_child
from tests.harness.agent_workload import find_thread, run_workload
from threadlog import open_store
from threadlog.model.events import CATALOGUE
from threadlog.runtime.resume import RecoveryReport

SEED = 5
TURNS = 3

RESUME_ONLY: dict[str, str] = {
    "thread.resumed": "written by Runtime.resume",
    "tool_call.unknown": "a call that started in a process that died (resume marks it)",
    "tool_call.resolved": "the reconcile hook's (or a human's) decision on an unknown call",
}
"""Types only a resume after a crash writes: the crashing child resumes a dead run."""

UNPRODUCIBLE: dict[str, str] = {
    "thread.archived": "written by Lifecycle.archive_thread between sessions, never by a running "
    "session; archiving is one durable append (tests/store contract, retention)",
    "tool_call.cancelled": "written only when a turn is cancelled or closed mid-turn, which the "
    "crash workload never does; a crash right after it is covered by tests/runtime/"
    "test_cancellation.py::test_a_crash_in_the_middle_of_an_abort_finishes_the_abort",
}
"""Catalogued types the crash workload does not write, with the reason."""

FRESH = [
    "thread.created",  # the workload creates its thread
    "config.changed",  # the policy and instructions change before goal 2
    "turn.started",
    "input.queued",  # steering during goal 1
    "input.consumed",
    "step.started",
    "provider.started",
    "provider.interrupted",  # goal 2's model call fails mid-stream
    "model.responded",
    "tool_call.proposed",
    "tool_call.approved",
    "tool_call.denied",  # list_dir, denied by the policy
    "tool_call.started",
    "tool_call.finished",
    "turn.ended",
    "plan.versioned",  # plan.versioned … leaf.moved: appended between goals 1 and 2
    "label.set",
    "memory.written",
    "memory.revoked",
    "artifact.stored",
    "compaction",
    "branch.summarized",
    "leaf.moved",
    "operation.started",  # the sub-agent spawned after goal 1
    "operation.finished",
    "session.opened",  # before the session's first record
    "session.closed",  # the run's last record, as its session closes
]
"""Types a fresh ``--all-types`` run writes: the child crashes at the first of them."""

EXTRA_POINTS = [
    "tool_call.approved:3",  # the workload's own approval of goal 1's charge ("ask")
    "tool_call.started:3",  # goal 1's charge started, no effect yet: unknown, then retry
    "tool_call.finished:3",  # goal 1's charge finished: its result is reused
    "turn.ended:2",  # goal 2's failed turn
    "provider.started:5",  # goal 1's final model call
    "operation.finished:1",  # the sub-agent exists
]
"""Further crash points (``<type>:<n>``: after the n-th record of the type)."""


def test_every_catalogued_type_is_covered() -> None:
    """A type added to the catalogue must be produced here, or listed with a reason."""
    handled = set(FRESH) | set(RESUME_ONLY) | set(UNPRODUCIBLE)
    assert handled == set(CATALOGUE), (
        f"not handled: {sorted(set(CATALOGUE) - handled)}; "
        f"not catalogued: {sorted(handled - set(CATALOGUE))}"
    )
    assert len(FRESH) + len(RESUME_ONLY) + len(UNPRODUCIBLE) == len(handled)


def _parse_acks(text: str) -> dict[int, str]:
    acks = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "ACK":
            acks[int(parts[1])] = parts[2]
    return acks


def _crash_then_finish(tmp_path: Path, crash_at: str, die_in_charge: str | None) -> None:
    home, workspace = str(tmp_path / "home"), str(tmp_path / "ws")
    os.makedirs(workspace)
    acked: dict[int, str] = {}
    if die_in_charge is not None:
        dying = run_agent_child(
            home,
            workspace,
            SEED,
            TURNS,
            mode="crash_at",
            die_in_charge=die_in_charge,
            all_types=True,
        )
        assert dying.returncode == 137 and not dying.problems, dying.stderr
        acked.update(dying.acks)
    child = run_agent_child(
        home, workspace, SEED, TURNS, mode="crash_at", crash_at=crash_at, all_types=True
    )
    assert child.returncode == 137, (child.returncode, child.stderr)
    type_ = crash_at.partition(":")[0]
    assert f"exiting after durable {type_}" in child.stderr, child.stderr
    acked.update(child.acks)

    # resume in this process, with the same workload code, and drive the thread to its end
    out = io.StringIO()
    result = asyncio.run(run_workload(home, workspace, SEED, TURNS, all_types=True, out=out))
    assert result.resumed, "the thread the child created was not found again"
    assert "\nDONE" not in out.getvalue()
    for ord_, digest in _parse_acks(out.getvalue()).items():
        assert acked.setdefault(ord_, digest) == digest, f"ord {ord_} changed"

    check = check_agent_home(home, workspace, SEED, TURNS, acked, all_types=True)
    assert not check.violations, "\n".join(check.violations)
    assert check.acked_checked == len(acked) == check.records
    assert check.charges == 2  # goals 1 and 3; goal 2 fails before its tools
    with open_store(home) as store:
        thread = find_thread(store, home)
        assert thread is not None
        types = [r.type for r in store.read(thread)]
    assert type_ in types
    if die_in_charge is not None:
        assert check.unknowns == 1
        decision = "done" if die_in_charge == "after" else "retry"
        assert sum(n for how, n in check.resolved.items() if how.endswith(decision)) == 1

    # a further resume finds nothing to do and changes no effect
    again = asyncio.run(run_workload(home, workspace, SEED, TURNS, all_types=True))
    assert again.recovery is not None and again.recovery.interrupted_turn is None
    assert check_agent_home(home, workspace, SEED, TURNS, {}, all_types=True).charges == 2


@pytest.mark.parametrize("crash_at", FRESH + EXTRA_POINTS)
def test_crash_right_after(tmp_path: Path, crash_at: str) -> None:
    _crash_then_finish(tmp_path, crash_at, None)


@pytest.mark.parametrize("die_in_charge", ["before", "after"])
@pytest.mark.parametrize("crash_at", sorted(RESUME_ONLY))
def test_crash_in_the_middle_of_a_resume(tmp_path: Path, crash_at: str, die_in_charge: str) -> None:
    _crash_then_finish(tmp_path, crash_at, die_in_charge)


def test_a_recovery_cut_short_asks_the_reconcile_hook_again(tmp_path: Path) -> None:
    """A crash between ``tool_call.unknown`` and the reconcile hook's answer (in the middle of
    a resume) must not turn a question the hook can answer into one for a human: the next
    resume should ask the hook again."""
    from tests.harness.agent_workload import WorkloadPlan, charge_tool
    from threadlog.runtime import Runtime, ScriptedModel
    from threadlog.runtime.tools import read_file, write_file

    home, workspace = str(tmp_path / "home"), str(tmp_path / "ws")
    os.makedirs(workspace)
    plan = WorkloadPlan(SEED, 1)
    assert not plan.reconcile_blind("g1-charge")  # the hook can tell for this call
    dying = run_agent_child(home, workspace, SEED, 1, mode="crash_at", die_in_charge="after")
    assert dying.returncode == 137, dying.stderr
    # the next run resumes, marks the charge unknown, and dies before asking the hook
    child = run_agent_child(home, workspace, SEED, 1, mode="crash_at", crash_at="tool_call.unknown")
    assert child.returncode == 137, child.stderr

    async def resume() -> tuple[str, RecoveryReport | None]:
        tools = [read_file, write_file, charge_tool(workspace, plan)]
        async with Runtime(home, model=ScriptedModel(plan.reply), tools=tools) as runtime:
            thread = find_thread(runtime.store, home)
            assert thread is not None
            session = await runtime.resume(thread)
            return session.state.tool_calls["g1-charge"].status, session.recovery

    status, recovery = asyncio.run(resume())
    # charges.txt has the line: the hook would answer "done"
    assert status == "done", recovery
