"""The agent kill -9 loop: crash the agent workload anywhere, resume it, check everything.

A *trial* runs the agent workload (`tests.harness.agent_workload`) as a child process on a
fresh home and workspace, and kills it at a seeded random point, several times in a row on the
same home — each child resumes what the one before left — and then runs one last child to
completion. A kill is one of:

* ``ack``: SIGKILL a random 0-12 ms after the child's n-th acknowledgement of a *new* record
  (n drawn from the seed), so that kills land anywhere in the agent's work;
* ``spawn``: SIGKILL a random 0-250 ms after the child says it has started (``STARTED``, once
  its imports are done: the store's open, and above all the recovery that ``Runtime.resume``
  runs before the child acknowledges anything; timed from the process's start instead, the
  kill landed in the interpreter's imports, which take longer than that on a slow VM);
* ``crash_at``: run the child with ``THREADLOG_CRASH_AT`` set to a record type that resume
  writes (``thread.resumed``, ``tool_call.unknown``, ``operation.started`` …), so that it dies
  in the middle of a recovery (recovery of recovery); it exits 137 by itself.

The parent drains the acknowledgements already in the pipe (a partial last line does not
count), and `check_agent_home` then checks with a fresh store:

* every acknowledged record is present with the same hash at the same ordinal (no loss), and
  no ordinal was acknowledged with two different hashes;
* the log verifies (`EmbeddedStore.verify`), and so does every other thread of the home;
* ``charges.txt`` has no line twice (**zero duplicate non-idempotent effects**), no line for a
  call the log does not know, a line for every ``charge`` call that finished ok or was resolved
  ``done``, and exactly one charge per goal;
* every goal's turn ended ``completed`` and no turn or tool call is left open;
* the ``tool_call.unknown`` records surfaced, and how each was resolved (by the tool's
  reconcile hook or by the workload; ``done`` or ``retry``).

Used by ``tests/faults/test_agent_kill9.py`` and ``scripts/agent_crash_loop.py``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tests.harness import Findings, child_command, child_env
from tests.harness.agent_workload import (
    RESOLVER,
    WorkloadPlan,
    charged,
    find_thread,
    goal_text,
)
from threadlog.errors import ThreadlogError
from threadlog.model.reducer import replay
from threadlog.store.embedded import EmbeddedStore

if TYPE_CHECKING:
    from threadlog.model.envelope import Record
    from threadlog.model.state import ThreadState

__all__ = [
    "RESUME_CRASH_TYPES",
    "AgentCheck",
    "AgentChild",
    "AgentTrial",
    "check_agent_home",
    "run_agent_child",
    "run_agent_trial",
]

RESUME_CRASH_TYPES: tuple[str, ...] = (
    "thread.resumed",
    "tool_call.unknown",
    "operation.started",
    "operation.finished",
    "tool_call.resolved",
    "turn.ended",
    "turn.started",
)
"""Types a ``crash_at`` kill may stop at (the first of them the child writes, so mostly the
records a resume writes)."""

FINAL_TIMEOUT = 120.0
"""How long the last, unkilled child may take."""


@dataclass
class AgentChild:
    """One workload child: what it acknowledged and how it ended."""

    mode: str
    """``ack``, ``spawn``, ``crash_at`` or ``final`` (not killed)."""
    detail: str
    thread: str | None = None
    acks: list[tuple[int, str]] = field(default_factory=list)
    returncode: int | None = None
    killed: bool = False
    """Whether it died by our hand (SIGKILL, or exit 137 at its crash point)."""
    done: bool = False
    stderr: str = ""
    problems: list[str] = field(default_factory=list)


@dataclass
class AgentCheck(Findings):
    """What `check_agent_home` found."""

    thread: str | None = None
    records: int = 0
    charges: int = 0


@dataclass
class AgentTrial:
    """One trial: its children and the check that followed them."""

    seed: int
    home: str
    workspace: str
    turns: int
    children: list[AgentChild]
    check: AgentCheck

    @property
    def kills(self) -> int:
        return sum(child.killed for child in self.children)

    @property
    def acked_before_kills(self) -> int:
        """Distinct ordinals acknowledged by the children that were killed."""
        return len({o for c in self.children if c.killed for o, _ in c.acks})

    @property
    def violations(self) -> list[str]:
        found = [f"CHILD {c.mode}: {p}" for c in self.children for p in c.problems]
        return found + self.check.violations

    def describe(self) -> str:
        plan = ", ".join(
            f"{c.mode}({c.detail}; {len(c.acks)} acks, rc {c.returncode})" for c in self.children
        )
        lines = [
            f"agent trial seed {self.seed}, {self.turns} turns, home {self.home}, workspace "
            f"{self.workspace}: {plan}; {self.check.acked_checked} acked records checked, "
            f"{self.check.unknowns} unknowns {dict(self.check.resolved)}",
            *(f"  {v}" for v in self.violations),
        ]
        for child in self.children:
            if child.problems and child.stderr:
                lines.append(f"  {child.mode} child stderr:\n{child.stderr[-3000:]}")
        return "\n".join(lines)


def _child_env(crash_at: str | None) -> dict[str, str]:
    env = child_env()
    env.pop("THREADLOG_CRASH_AT", None)
    if crash_at is not None:
        env["THREADLOG_CRASH_AT"] = crash_at
    return env


def run_agent_child(
    home: str,
    workspace: str,
    seed: int,
    turns: int,
    *,
    mode: str,
    after_acks: int = 0,
    delay: float = 0.0,
    crash_at: str | None = None,
    die_in_charge: str | None = None,
    known_ord: int = 0,
    all_types: bool = False,
    python: str = sys.executable,
) -> AgentChild:
    """Run the workload once on ``home`` and stop it per ``mode`` (see the module docstring):
    ``ack`` kills ``delay`` s after the ``after_acks``-th acknowledgement of an ordinal above
    ``known_ord``; ``spawn`` kills ``delay`` s after the child says it started (its imports
    done: the kill lands in the store's open, the recovery or the first steps); ``crash_at``
    (with ``crash_at`` or ``die_in_charge``, which the child passes on to the workload) and
    ``final`` let the child end by itself."""
    cmd = [*child_command("tests.harness.agent_workload", python), "--home", home]
    cmd += ["--workspace", workspace, "--seed", str(seed), "--turns", str(turns)]
    if die_in_charge is not None:
        cmd += ["--die-in-charge", die_in_charge]
    if all_types:
        cmd.append("--all-types")
    detail = {
        "ack": f"{after_acks} new acks + {delay * 1000:.1f} ms",
        "spawn": f"{delay * 1000:.0f} ms after start-up",
        "crash_at": str(crash_at or f"die {die_in_charge} the charge"),
        "final": "",
    }[mode]
    child = AgentChild(mode, detail)
    cond = threading.Condition()
    new_acks = [0]
    eof = [False]
    started = [False]
    with (
        tempfile.TemporaryFile() as err,
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=_child_env(crash_at)) as proc,
    ):
        assert proc.stdout is not None
        stdout = proc.stdout

        def read() -> None:
            for line in stdout:
                if not line.endswith(b"\n"):
                    break  # cut short by the kill: never acknowledged
                parts = line.split()
                if len(parts) == 3 and parts[0] == b"ACK" and parts[1].isdigit():
                    ord_ = int(parts[1])
                    child.acks.append((ord_, parts[2].decode("ascii")))
                    if ord_ > known_ord:
                        with cond:
                            new_acks[0] += 1
                            cond.notify_all()
                elif parts == [b"STARTED"]:
                    with cond:
                        started[0] = True
                        cond.notify_all()
                elif len(parts) == 2 and parts[0] == b"THREAD":
                    child.thread = parts[1].decode("ascii")
                elif parts == [b"DONE"]:
                    child.done = True
                else:
                    child.problems.append(f"unexpected output line {line[:200]!r}")
            with cond:
                eof[0] = True
                cond.notify_all()

        reader = threading.Thread(target=read, name="agent-ack-reader", daemon=True)
        reader.start()
        if mode == "ack":
            with cond:
                cond.wait_for(lambda: new_acks[0] >= after_acks or eof[0], FINAL_TIMEOUT)
            _wait_then_kill(proc, delay, child)
        elif mode == "spawn":
            with cond:
                cond.wait_for(lambda: started[0] or eof[0], FINAL_TIMEOUT)
            _wait_then_kill(proc, delay, child)
        try:
            child.returncode = proc.wait(timeout=FINAL_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            child.returncode = proc.wait()
            child.problems.append(f"the child did not finish within {FINAL_TIMEOUT:.0f}s")
        reader.join()  # EOF once the pipe's buffered lines are read
        err.seek(0)
        child.stderr = err.read().decode("utf-8", "replace")
    rc = child.returncode
    sent = child.killed  # a SIGKILL was sent; the child may have finished just before it
    child.killed = (sent and rc == -signal.SIGKILL) or (mode == "crash_at" and rc == 137)
    if not child.killed and (rc != 0 or not child.done):
        child.problems.append(f"child ended with exit code {rc}, done={child.done}")
    return child


def _wait_then_kill(proc: subprocess.Popen[bytes], delay: float, child: AgentChild) -> None:
    try:
        proc.wait(timeout=max(delay, 0.0))
    except subprocess.TimeoutExpired:
        pass
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        child.killed = True


def check_agent_home(
    home: str,
    workspace: str,
    seed: int,
    turns: int,
    acked: dict[int, str],
    *,
    conflicts: list[str] | None = None,
    thread_ids: set[str] | None = None,
    all_types: bool = False,
) -> AgentCheck:
    """Reopen the store at ``home`` and check the workload's thread and effects against the
    acknowledgements ``acked`` (ord → hash); see the module docstring. With ``all_types``,
    the flaky goal (see `WorkloadPlan.flaky`) must have failed and charged nothing."""
    check = AgentCheck()
    check.losses.extend(conflicts or ())
    plan = WorkloadPlan(seed, turns, all_types)
    try:
        store = EmbeddedStore(home)
    except ThreadlogError as exc:
        check.other.append(f"the store does not open: {exc!r}")
        return check
    with store:
        thread = find_thread(store, home)
        check.thread = thread
        if thread is None:
            check.other.append("the workload's thread is not in the store")
            if acked:
                check.losses.append(f"{len(acked)} records acknowledged, no thread")
            return check
        if thread_ids and thread_ids != {thread}:
            check.other.append(f"children worked on threads {sorted(thread_ids)}, not {thread}")
        for other in store.thread_ids():
            if other == thread:
                continue
            try:
                if store.read(other, limit=1) and not store.verify(other).ok:
                    check.verify_failures.append(f"thread {other}: {store.verify(other)}")
            except ThreadlogError:
                pass  # an empty rollout: create_thread died before thread.created
        try:
            records = store.read(thread)
        except ThreadlogError as exc:
            check.verify_failures.append(f"thread {thread}: read failed: {exc!r}")
            return check
        report = store.verify(thread)
    if not report.ok:
        check.verify_failures.append(f"thread {thread}: {report.to_dict()}")
    check.records = len(records)
    check.check_acks("", sorted(acked.items()), records)
    try:
        state = replay(records)
    except ThreadlogError as exc:
        check.verify_failures.append(f"thread {thread}: replay failed: {exc!r}")
        return check
    _check_effects(check, state, workspace, plan)
    _check_goals(check, state, plan)
    _count_unknowns(check, records)
    return check


def _check_effects(
    check: AgentCheck, state: ThreadState, workspace: str, plan: WorkloadPlan
) -> None:
    lines = charged(workspace)
    check.charges = len(lines)
    for line, count in Counter(lines).items():
        if count > 1:
            check.duplicates.append(f"charge {line!r} appears {count} times in charges.txt")
    calls = {c.call_id: c for c in state.tool_calls.values() if c.tool == "charge"}
    present = set(lines)
    for line in present - set(calls):
        check.other.append(f"charges.txt has {line!r}, which is no charge call of the log")
    by_goal: Counter[object] = Counter()
    for call in calls.values():
        by_goal[call.args.get("goal")] += 1
        if call.status in ("finished", "done") and call.call_id not in present:
            what = "finished" if call.status == "finished" else "was resolved done"
            check.other.append(f"charge {call.call_id} {what}, but charges.txt has no line")
        if call.status == "finished" and not call.ok:
            check.other.append(f"charge {call.call_id} failed: {call.error}")
        if call.status not in ("finished", "done"):
            check.other.append(f"charge {call.call_id} is left {call.status}")
    for goal in range(1, plan.turns + 1):
        expected = 0 if plan.flaky(goal) else 1
        if by_goal[goal] > expected:
            check.duplicates.append(f"goal {goal} has {by_goal[goal]} charge calls")
        elif by_goal[goal] < expected:
            check.other.append(f"goal {goal} has no charge call")


def _check_goals(check: AgentCheck, state: ThreadState, plan: WorkloadPlan) -> None:
    if state.active_turn is not None:
        check.other.append(f"turn {state.active_turn} is still running")
    for goal in range(1, plan.turns + 1):
        text = goal_text(goal)
        outcomes = [t.status for t in state.turns.values() if t.input == text]
        if plan.flaky(goal):
            if "failed" not in outcomes or "completed" in outcomes:
                check.other.append(f"flaky goal {goal}'s turns ended {outcomes}, not failed")
            continue
        if "completed" not in outcomes:
            check.other.append(f"goal {goal} never completed (turn outcomes {outcomes})")
        if "failed" in outcomes or "aborted" in outcomes:
            check.other.append(f"goal {goal} has turns that ended {outcomes}")
    for call in state.tool_calls.values():
        if call.status in ("proposed", "approved", "running", "unknown"):
            check.other.append(f"tool call {call.call_id} is left {call.status}")


def _count_unknowns(check: AgentCheck, records: list[Record]) -> None:
    for call_id in sorted(check.count_unknowns(records)):
        check.other.append(f"call {call_id} was marked unknown and never resolved")
    for key in check.resolved:
        who = key.rpartition(":")[0]
        if who not in ("reconcile", RESOLVER):
            check.other.append(f"a call was resolved by {who!r}")


def run_agent_trial(
    root: str,
    seed: int,
    *,
    turns: int = 2,
    kills: int | None = None,
    python: str = sys.executable,
) -> AgentTrial:
    """One trial in the directory ``root`` (its ``home`` and ``ws``): ``kills`` killed
    children (default: 1-4, from the seed), one child run to completion, then the check."""
    rng = random.Random(f"threadlog-agent-crashloop/{seed}")
    home = os.path.join(root, "home")
    workspace = os.path.join(root, "ws")
    os.makedirs(workspace, exist_ok=True)
    kills = kills if kills is not None else rng.randint(1, 4)
    acked: dict[int, str] = {}
    conflicts: list[str] = []
    threads: set[str] = set()
    children: list[AgentChild] = []
    expected = 28 * turns  # roughly the records of a run without crashes
    for _ in range(kills + 1):
        final = len(children) == kills
        known = max(acked, default=0)
        roll = rng.random()
        if final:
            child = run_agent_child(home, workspace, seed, turns, mode="final", python=python)
        elif roll < 0.6:
            child = run_agent_child(
                home,
                workspace,
                seed,
                turns,
                mode="ack",
                after_acks=rng.randint(0, max(expected - known, 8)),
                delay=rng.uniform(0.0, 0.012),
                known_ord=known,
                python=python,
            )
        elif roll < 0.85:
            child = run_agent_child(
                home,
                workspace,
                seed,
                turns,
                mode="spawn",
                delay=rng.uniform(0.0, 0.25),
                python=python,
            )
        else:
            crash_at = f"{rng.choice(RESUME_CRASH_TYPES)}:{rng.randint(1, 2)}"
            child = run_agent_child(
                home, workspace, seed, turns, mode="crash_at", crash_at=crash_at, python=python
            )
        children.append(child)
        if child.thread is not None:
            threads.add(child.thread)
        for ord_, digest in child.acks:
            known_digest = acked.setdefault(ord_, digest)
            if known_digest != digest:
                conflicts.append(
                    f"ord {ord_}: acknowledged as {known_digest[:12]}… and later as "
                    f"{digest[:12]}… (an acknowledged record was lost and its ordinal reused)"
                )
    check = check_agent_home(
        home, workspace, seed, turns, acked, conflicts=conflicts, thread_ids=threads
    )
    return AgentTrial(seed, home, workspace, turns, children, check)
