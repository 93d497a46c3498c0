"""The worker kill -9 loop: kill ``threadlog worker`` processes anywhere, check every thread.

A *trial* queues 6-10 jobs (`tests.harness.worker_workload`: a read, two non-idempotent
``charge`` calls whose effects go to a shared ``charges.txt``, a ``write_file``), one thread
each, some before the workers start and the rest while they run; starts two worker processes
on the store (embedded, or a PostgreSQL schema); then, one to four times (from the seed),
SIGKILLs one or both of them and starts them again. A kill lands:

* ``ack``: a random 0-20 ms after the n-th record the workers acknowledged since the round
  began (n drawn from the seed), so that kills land anywhere in the turns and takeovers;
* ``time``: a random 0-1.2 s after the round's workers said they were running, so that kills
  land in a worker's first steps: the scan, the lease, the recovery of a takeover;
* and a restarted worker may be *armed* with ``--crash-at`` at a record type a
  takeover writes (``thread.resumed``, ``turn.ended``, ``turn.started``, ``tool_call.unknown``
  …), so that it dies in the middle of a takeover by itself (exit 137): recovery of recovery.

Then the workers left (any that died is started again, unarmed) run until every job is
settled, and are stopped with SIGTERM. `check_worker_store` then checks with a fresh store:

* every thread's log verifies (`Store.verify`) and is one gap-free chain (`check_chain`);
* every acknowledged record is there with the same hash at the same ordinal, and no ordinal
  was acknowledged with two hashes (by different workers);
* ``charges.txt`` has no line twice (**no non-idempotent effect performed twice**), no line
  for a call the log does not know, a line for every ``charge`` that finished or was resolved
  ``done``, and no job has two calls for the same charge;
* every job's task ended with one completed turn (the turns before it ended ``interrupted``;
  none failed or aborted), no turn is left running, no call left open, and the report was
  written; **or** the thread waits for a human: a ``charge`` of unknown outcome that the
  reconcile hook could not settle parks the turn (correct: counted apart, never a failure).

Used by ``tests/faults/test_worker_kill9.py`` and ``scripts/worker_crash_loop.py``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from tests.harness import Findings, child_command, child_env
from tests.harness.worker_workload import (
    CHARGES,
    INPUTS_FILE,
    REPORT_FILE,
    WorkerPlan,
    charge_key,
    charged,
    expected_report,
    job_text,
    queue_jobs,
)
from threadlog.errors import ThreadlogError
from threadlog.model.reducer import replay
from threadlog.model.turns import AwaitResolution, next_action
from threadlog.store.open import open_store
from threadlog.testing.contract import check_chain

if TYPE_CHECKING:
    from threadlog.model.envelope import Record
    from threadlog.model.state import ThreadState

__all__ = [
    "TAKEOVER_CRASH_TYPES",
    "WorkerCheck",
    "WorkerChild",
    "WorkerTrial",
    "check_worker_store",
    "run_worker_trial",
    "start_worker",
    "stop_worker",
]

TAKEOVER_CRASH_TYPES: tuple[str, ...] = (
    "session.opened",
    "thread.resumed",
    "provider.interrupted",
    "tool_call.unknown",
    "tool_call.resolved",
    "turn.ended",
    "turn.started",
    "tool_call.started",
    "tool_call.finished",
)
"""Types an armed worker may stop at (``--crash-at <type>:<n>``, n 1-3: the n-th such record
the worker makes durable, in any of its threads)."""

SETTLE_TIMEOUT = 120.0
"""How long the last workers may take to settle every job."""

START_TIMEOUT = 60.0

ACKS_PER_ROUND = 150
"""An ``ack`` kill comes after 0 to this many acknowledgements since its round began (the
workers acknowledge a thread's log from ordinal 1 each time they open it)."""

QUIET = 1.5
"""An ``ack`` kill comes anyway once the workers have acknowledged nothing for this long
(every job done, or waiting)."""

PG_LEASE = 5.0
"""The workers' lease on PostgreSQL: a killed worker's threads are free when the server ends
its connection; this bounds the wait when it does not notice at once, and is long enough that
a live worker on a loaded machine renews in time."""


@dataclass
class WorkerChild:
    """One worker process: what it acknowledged and how it ended."""

    name: str
    crash_at: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    acks: list[tuple[str, int, str, str]] = field(default_factory=list)
    """(thread, ord, hash, type)."""
    resumed: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    running: threading.Event = field(default_factory=threading.Event)
    returncode: int | None = None
    killed: bool = False
    """Whether it died by our hand (SIGKILL) or at its crash point (exit 137)."""
    how: str = ""
    stderr: str = ""
    problems: list[str] = field(default_factory=list)
    _err: IO[bytes] | None = None
    _reader: threading.Thread | None = None


@dataclass
class WorkerCheck(Findings):
    """What `check_worker_store` found."""

    threads: int = 0
    records: int = 0
    charges: int = 0
    completed: int = 0
    waiting: list[str] = field(default_factory=list)
    """Threads left waiting for a human (a charge of unknown outcome reconcile cannot tell)."""
    resumes: int = 0
    """``thread.resumed`` records over all threads (takeovers and their recoveries)."""
    unacked_tail: int = 0
    """Records at the end of a log that no worker acknowledged: the worker that wrote them
    died between their being durable and its ACK lines (a kill, a crash point right after
    a turn's ``turn.ended``), and no later session opened the thread, which had nothing
    left to do (its turn ended, or parked on a human and given back). A later session
    would have acknowledged them: each acknowledges its thread from ordinal 1."""
    unacked: list[str] = field(default_factory=list)
    """Records no worker acknowledged although a later record was (none should be)."""

    @property
    def violations(self) -> list[str]:
        return super().violations + [f"UNACKNOWLEDGED: {m}" for m in self.unacked]


@dataclass
class WorkerTrial:
    """One trial: its workers and the check that followed them."""

    seed: int
    target: str
    root: str
    jobs: dict[int, str]
    children: list[WorkerChild]
    check: WorkerCheck
    problems: list[str] = field(default_factory=list)

    @property
    def kills(self) -> int:
        return sum(child.killed for child in self.children)

    @property
    def violations(self) -> list[str]:
        found = [f"WORKER {c.name}: {p}" for c in self.children for p in c.problems]
        return found + [f"TRIAL: {p}" for p in self.problems] + self.check.violations

    def describe(self) -> str:
        plan = ", ".join(
            f"{c.name}[{c.how or 'final'}{'; armed ' + c.crash_at if c.crash_at else ''}; "
            f"{len(c.acks)} acks, rc {c.returncode}]"
            for c in self.children
        )
        lines = [
            f"worker trial seed {self.seed}, store {self.target}, directory {self.root}: "
            f"{len(self.jobs)} jobs; {plan}; {self.check.acked_checked} acked records checked "
            f"of {self.check.records} ({self.check.unacked_tail} at the end of a log no later "
            "session opened), "
            f"{self.check.unknowns} unknowns {dict(self.check.resolved)}, "
            f"{len(self.check.waiting)} waiting for a human",
            *(f"  {v}" for v in self.violations),
        ]
        if self.violations:
            for child in self.children:
                notable = [
                    line
                    for line in child.stderr.splitlines()
                    if "Traceback" in line or "Error" in line or "not taken over" in line
                ]
                if notable:
                    lines.append(f"  {child.name} stderr (notable lines):")
                    lines += [f"    {line}" for line in notable[-20:]]
        return "\n".join(lines)


# -- the worker processes --------------------------------------------------------------------


def start_worker(
    child: WorkerChild, target: str, charges: str, seed: int, python: str = sys.executable
) -> WorkerChild:
    """Start ``child`` (armed if its ``crash_at`` is set) on ``target``; its output is read
    by a thread (``acks``, ``resumed``, ``started``; ``running`` is set once it runs)."""
    cmd = [*child_command("tests.harness.worker_workload", python), "--store", target]
    cmd += ["--charges", charges, "--seed", str(seed)]
    if target.startswith("postgres"):
        cmd += ["--lease", str(PG_LEASE)]
    if child.crash_at is not None:
        cmd += ["--crash-at", child.crash_at]
    env = child_env()
    env.pop("THREADLOG_CRASH_AT", None)
    err = tempfile.TemporaryFile()
    child._err = err
    child.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env)
    assert child.proc.stdout is not None
    stdout = child.proc.stdout

    def read() -> None:
        import orjson

        for line in stdout:
            if not line.endswith(b"\n"):
                break  # cut short by the kill: never acknowledged
            parts = line.split()
            if len(parts) == 5 and parts[0] == b"ACK" and parts[2].isdigit():
                thread, ord_, digest, type_ = (p.decode("ascii") for p in parts[1:])
                child.acks.append((thread, int(ord_), digest, type_))
            elif parts and parts[0] == b"STEP":
                doc = orjson.loads(line[5:])
                child.resumed += doc["resumed"]
                child.started += doc["started"]
            elif parts == [b"RUNNING"]:
                child.running.set()
            elif parts != [b"STARTED"]:
                child.problems.append(f"unexpected output line {line[:200]!r}")
        child.running.set()  # (or it died first)

    child._reader = threading.Thread(target=read, name=f"{child.name} reader", daemon=True)
    child._reader.start()
    return child


def stop_worker(child: WorkerChild, sig: int | None, how: str) -> None:
    """Send ``sig`` (if the process still runs) and collect the process."""
    proc = child.proc
    assert proc is not None
    if sig is not None and proc.poll() is None:
        proc.send_signal(sig)
        child.how = how
    try:
        child.returncode = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        child.returncode = proc.wait()
        child.problems.append("did not stop within 60 s of " + (how or "its end"))
    if child._reader is not None:
        child._reader.join(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()
    err = child._err
    assert err is not None
    err.seek(0)
    child.stderr = err.read().decode("utf-8", "replace")
    err.close()
    rc = child.returncode
    if rc == -signal.SIGKILL and sig == signal.SIGKILL:
        child.killed = True
    elif rc == 137 and child.crash_at is not None:
        child.killed = True
        child.how = f"crashed at {child.crash_at}"
    elif sig != signal.SIGTERM or rc != 0:
        if sig == signal.SIGKILL and rc == 0:
            pass  # it had finished just before the kill (cannot happen: a worker runs on)
        else:
            child.problems.append(f"ended with exit code {rc} ({how or 'unasked'})")


def _acked_total(children: list[WorkerChild]) -> int:
    return sum(len(c.acks) for c in children)


# -- settling and checking -------------------------------------------------------------------


def _settled(target: str, jobs: dict[int, str]) -> bool:
    """Whether every job's thread has its task completed or waits for a human."""
    try:
        with open_store(target) as store:
            for thread in jobs.values():
                state = store.state(thread, history=False)
                if state.pending_inputs:
                    return False
                if state.active_turn is not None:
                    if not isinstance(next_action(state), AwaitResolution):
                        return False
                elif not state.turns or next(reversed(state.turns.values())).status != (
                    "completed"
                ):
                    return False
    except ThreadlogError:
        return False
    return True


def check_worker_store(
    target: str,
    root: str,
    jobs: dict[int, str],
    acks: list[tuple[str, int, str, str]],
) -> WorkerCheck:
    """Open the store at ``target`` afresh and check every thread, the acknowledgements
    ``acks`` and the charges file of the trial in ``root`` (see the module docstring)."""
    check = WorkerCheck()
    acked: dict[tuple[str, int], str] = {}
    for thread, ord_, digest, _type in acks:
        known = acked.setdefault((thread, ord_), digest)
        if known != digest:
            check.losses.append(
                f"thread {thread} ord {ord_}: acknowledged as {known[:12]}… and as "
                f"{digest[:12]}… (a record was lost and its ordinal reused)"
            )
    by_thread = {thread: job for job, thread in jobs.items()}
    charges_path = os.path.join(root, "charges.txt")
    lines = charged(charges_path)
    check.charges = len(lines)
    for line, count in Counter(lines).items():
        if count > 1:
            check.duplicates.append(f"charge {line!r} appears {count} times in charges.txt")
    present = set(lines)
    known_keys: set[str] = set()
    try:
        store = open_store(target)
    except ThreadlogError as exc:
        check.other.append(f"the store does not open: {exc!r}")
        return check
    with store:
        all_threads = store.thread_ids()
        missing = set(jobs.values()) - set(all_threads)
        for thread in sorted(missing):
            check.losses.append(f"job {by_thread[thread]}'s thread {thread} is not in the store")
        for thread in sorted(all_threads):
            try:
                records = store.read(thread)
                report = store.verify(thread)
            except ThreadlogError as exc:
                check.verify_failures.append(f"thread {thread}: {exc!r}")
                continue
            if not report.ok:
                check.verify_failures.append(f"thread {thread}: {report.to_dict()}")
            try:
                check_chain(records)
            except AssertionError as exc:
                check.verify_failures.append(f"thread {thread}: not one chain: {exc}")
            except ThreadlogError as exc:
                check.verify_failures.append(f"thread {thread}: replay failed: {exc!r}")
            check.threads += 1
            check.records += len(records)
            check.check_acks(
                f"thread {thread} ",
                [(o, digest) for (t, o), digest in sorted(acked.items()) if t == thread],
                records,
            )
            last_acked = max((o for (t, o) in acked if t == thread), default=0)
            check.unacked_tail += len(records) - min(last_acked, len(records))
            check.unacked += [
                f"thread {thread} ord {r.ord} {r.type}"
                for r in records[:last_acked]
                if (thread, r.ord) not in acked
            ]
            if thread not in by_thread:
                check.other.append(f"thread {thread} is no job's thread")
                continue
            try:
                state = replay(records)
            except ThreadlogError:
                continue  # reported above
            job = by_thread[thread]
            check.resumes += sum(r.type == "thread.resumed" for r in records)
            _check_job(check, job, thread, state, records, root, present, known_keys)
    for line in sorted(present - known_keys):
        check.other.append(f"charges.txt has {line!r}, which is no charge call of a job's log")
    for thread, ord_, _digest, _type in acks:
        if thread not in jobs.values():
            check.other.append(f"a worker acknowledged ord {ord_} of thread {thread}, no job")
            break
    return check


def _check_job(
    check: WorkerCheck,
    job: int,
    thread: str,
    state: ThreadState,
    records: list[Record],
    root: str,
    present: set[str],
    known_keys: set[str],
) -> None:
    where = f"job {job} (thread {thread})"
    waiting = state.active_turn is not None and isinstance(next_action(state), AwaitResolution)
    if waiting:
        check.waiting.append(thread)
    elif state.active_turn is not None:
        check.other.append(f"{where}: turn {state.active_turn} is left running")
    turns = list(state.turns.values())
    if not turns or turns[0].input != job_text(job):
        check.other.append(f"{where}: its first turn is not the job's ({[t.input for t in turns]})")
    outcomes = [t.status for t in turns]
    if waiting:
        if outcomes[-1] != "running" or any(o != "interrupted" for o in outcomes[:-1]):
            check.other.append(f"{where}: waits for a human, turns {outcomes}")
    elif outcomes[-1:] != ["completed"] or any(o != "interrupted" for o in outcomes[:-1]):
        check.other.append(f"{where}: the task did not end with one completed turn: {outcomes}")
    else:
        check.completed += 1
    if state.pending_inputs:
        check.other.append(f"{where}: input left queued: {[i.text for i in state.pending_inputs]}")
    # the calls: none left open but a charge waiting for a human
    for call in state.tool_calls.values():
        if call.status in ("proposed", "approved", "running"):
            check.other.append(f"{where}: call {call.call_id} is left {call.status}")
        elif call.status == "unknown" and not waiting:
            check.other.append(f"{where}: call {call.call_id} is unknown, nobody asked")
        elif call.status == "cancelled" or (call.status == "finished" and not call.ok):
            check.other.append(f"{where}: call {call.call_id} {call.status}: {call.error}")
    charges = [c for c in state.tool_calls.values() if c.tool == "charge"]
    per_charge = Counter(c.args.get("n") for c in charges)
    if any(count > 1 for count in per_charge.values()):
        check.duplicates.append(f"{where}: two calls for one charge: {dict(per_charge)}")
    for call in charges:
        key = charge_key(thread, call.call_id)
        known_keys.add(key)
        if call.status in ("finished", "done") and key not in present:
            what = "finished" if call.status == "finished" else "was resolved done"
            check.other.append(
                f"{where}: charge {call.call_id} {what}, but charges.txt has no line"
            )
    if not waiting and len(charges) != CHARGES:
        check.other.append(f"{where}: {len(charges)} charge calls, not {CHARGES}")
    if not waiting:
        cwd = Path(root, "ws", str(job))
        try:
            report = (cwd / REPORT_FILE).read_text(encoding="utf-8")
            inputs = (cwd / INPUTS_FILE).read_text(encoding="utf-8")
        except OSError as exc:
            check.other.append(f"{where}: no report: {exc}")
        else:
            if report != expected_report(inputs):
                check.other.append(f"{where}: the report is not the expected text")
    pending = check.count_unknowns(records)
    if pending and not waiting:
        check.other.append(f"{where}: calls {sorted(pending)} marked unknown, never resolved")


# -- a trial ---------------------------------------------------------------------------------


def run_worker_trial(
    root: str,
    seed: int,
    target: str | None = None,
    *,
    kills: int | None = None,
    jobs: int | None = None,
    python: str = sys.executable,
) -> WorkerTrial:
    """One trial in the directory ``root`` (the store's ``home`` unless ``target`` names
    another, e.g. a PostgreSQL schema; the jobs' ``ws``; ``charges.txt``): ``kills`` rounds
    (default 1-4 from the seed), then the last workers settle every job, then the check."""
    rng = random.Random(f"threadlog-worker-crashloop/{seed}")
    os.makedirs(root, exist_ok=True)
    target = target or os.path.join(root, "home")
    charges = os.path.join(root, "charges.txt")
    workspaces = os.path.join(root, "ws")
    plan = WorkerPlan(seed)
    n_jobs = jobs if jobs is not None else rng.randint(6, 10)
    kills = kills if kills is not None else rng.randint(1, 4)
    early = rng.randint(1, n_jobs)
    all_children: list[WorkerChild] = []
    problems: list[str] = []
    serial = [0]

    def spawn(crash_at: str | None = None) -> WorkerChild:
        serial[0] += 1
        child = WorkerChild(f"w{serial[0]}", crash_at=crash_at)
        all_children.append(child)
        return start_worker(child, target, charges, seed, python)

    job_threads = queue_jobs(target, plan, range(1, early + 1), workspaces)
    live = [spawn(), spawn()]
    for child in live:
        child.running.wait(START_TIMEOUT)
    job_threads.update(queue_jobs(target, plan, range(early + 1, n_jobs + 1), workspaces))
    try:
        for _ in range(kills):
            # any worker that died at its crash point is replaced first (unarmed)
            for i, child in enumerate(live):
                if child.proc is not None and child.proc.poll() is not None:
                    stop_worker(child, None, "")
                    live[i] = spawn()
            for child in live:
                child.running.wait(START_TIMEOUT)
            victims = rng.choice([[0], [1], [0, 1]])
            if rng.random() < 0.6:
                base = seen = _acked_total(all_children)
                after = rng.randint(0, ACKS_PER_ROUND)
                quiet = time.monotonic() + QUIET
                while seen - base < after and time.monotonic() < quiet:
                    time.sleep(0.001)
                    if _acked_total(all_children) != seen:
                        seen = _acked_total(all_children)
                        quiet = time.monotonic() + QUIET
                time.sleep(rng.uniform(0.0, 0.02))
                how = f"SIGKILL after {after} acks"
            else:
                delay = rng.uniform(0.0, 1.2)
                time.sleep(delay)
                how = f"SIGKILL {delay * 1000:.0f} ms into the round"
            for i in victims:
                stop_worker(live[i], signal.SIGKILL, how)
            for i in victims:
                crash_at = None
                if rng.random() < 0.35:
                    crash_at = f"{rng.choice(TAKEOVER_CRASH_TYPES)}:{rng.randint(1, 3)}"
                live[i] = spawn(crash_at)
        # the last workers settle every job; one that dies at its crash point is replaced
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            for i, child in enumerate(live):
                if child.proc is not None and child.proc.poll() is not None:
                    stop_worker(child, None, "")
                    live[i] = spawn()
            for child in live:
                child.running.wait(START_TIMEOUT)  # (a SIGTERM before its handler kills it)
            if _settled(target, job_threads):
                break
            if time.monotonic() > deadline:
                problems.append(f"the jobs were not settled within {SETTLE_TIMEOUT:.0f} s")
                break
            time.sleep(0.2)
    finally:
        for child in live:
            if child.proc is not None and child.returncode is None:
                stop_worker(child, signal.SIGTERM, "SIGTERM at the end")
    acks = [a for c in all_children for a in c.acks]
    check = check_worker_store(target, root, job_threads, acks)
    return WorkerTrial(seed, target, root, job_threads, all_children, check, problems)
