"""The kill -9 crash loop (RELIABILITY D1): one trial, its checker, and their results.

A *trial* runs the workload (`tests.harness.workload`) as a child process on a store home,
kills it with SIGKILL at a seeded random instant, and collects the ``ACK`` lines it wrote
before it died. A trial may run several children in a row on the same home before checking,
each one killed in turn, so that a child can be killed while it is itself recovering the
journal of the one before (recovery of recovery). Then `check_home` reopens the store in
this process and checks the invariants of RELIABILITY section 3:

* INV-1 every acknowledged ``(thread, ord, hash)`` is present with the same hash, and every
  workload record holds exactly the data the workload derives from its seed;
* INV-2/3 ordinals are gap-free ``1..n`` and no event id appears twice;
* INV-4 `EmbeddedStore.verify` is ok for every thread, and the file ends with a full line;
* INV-6 a new append gets ``ord = n + 1``;
* INV-7 the index agrees on the last ordinal;
* after the store is closed no ``*.wal`` journal remains (recovery deletes dead journals), and
  INV-5: opening and closing it again changes no byte of any rollout.

The acknowledgements of every child and every check are kept in a `History`, which can be
carried over to later trials on the same home. Used by ``tests/store/test_kill9.py`` and
``scripts/crash_loop.py``.
"""

from __future__ import annotations

import glob
import hashlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from tests.harness import Findings, child_command, child_env
from tests.harness.workload import WORKLOAD_TYPE, payload
from threadlog.errors import ThreadlogError
from threadlog.store.embedded import EmbeddedStore

__all__ = [
    "CHECK_TYPE",
    "Ack",
    "CheckResult",
    "ChildResult",
    "History",
    "TrialResult",
    "check_home",
    "run_child",
    "run_trial",
]

CHECK_TYPE = "custom.crashloop.check"
"""The event type of the record the checker appends to every thread (INV-6)."""

ACK_TIMEOUT = 30.0
"""How long a child may take to acknowledge its first record."""


@dataclass(frozen=True, slots=True)
class Ack:
    """One acknowledged record: the append returned with this ordinal and hash."""

    thread: str
    ord: int
    hash: str


@dataclass
class History:
    """Everything acknowledged on one home so far, across children, checks and trials."""

    acked: dict[tuple[str, int], str] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)
    """Two acknowledgements of the same (thread, ord) with different hashes: the first record
    was lost and its ordinal reused."""

    def add(self, ack: Ack) -> None:
        key = (ack.thread, ack.ord)
        known = self.acked.get(key)
        if known is not None and known != ack.hash:
            self.conflicts.append(
                f"thread {ack.thread} ord {ack.ord}: acknowledged as {known[:12]}… and later "
                f"as {ack.hash[:12]}… (an acknowledged record was lost and its ordinal reused)"
            )
            return
        self.acked[key] = ack.hash

    def threads(self) -> set[str]:
        return {thread for thread, _ in self.acked}

    def of(self, thread_id: str) -> list[tuple[int, str]]:
        return sorted((o, h) for (t, o), h in self.acked.items() if t == thread_id)


@dataclass
class ChildResult:
    """One workload child: what it acknowledged and how it ended."""

    seed: int
    async_mode: bool
    kill_from: str
    """``"spawn"`` (the delay ran from process start: the kill may hit start-up or recovery)
    or ``"ack"`` (from the first acknowledgement)."""
    delay: float
    acks: list[Ack]
    returncode: int | None
    killed: bool
    stderr: str
    problems: list[str] = field(default_factory=list)


@dataclass
class CheckResult(Findings):
    """What `check_home` found."""

    threads: int = 0
    records: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass
class TrialResult:
    """One trial: its children and the check that followed them."""

    seed: int
    home: str
    async_mode: bool
    children: list[ChildResult]
    check: CheckResult

    @property
    def violations(self) -> list[str]:
        found = [f"CHILD: {p}" for child in self.children for p in child.problems]
        return found + self.check.violations

    def describe(self) -> str:
        kills = ", ".join(
            f"{c.kill_from}+{c.delay * 1000:.0f}ms ({len(c.acks)} acks, rc {c.returncode})"
            for c in self.children
        )
        lines = [
            f"trial seed {self.seed} ({'async' if self.async_mode else 'sync'}) on {self.home}: "
            f"{kills}; {self.check.acked_checked} acked records checked in "
            f"{self.check.threads} threads",
            *(f"  {v}" for v in self.violations),
            *(f"  note: {n}" for n in self.check.notes),
        ]
        for child in self.children:
            if child.problems and child.stderr:
                lines.append("  child stderr:\n" + child.stderr[-3000:])
        return "\n".join(lines)


def _child_env() -> dict[str, str]:
    env = child_env()
    env.pop("THREADLOG_CRASH_AT", None)
    return env


def _parse_ack(line: bytes) -> Ack | None:
    parts = line.split()
    if len(parts) != 4 or parts[0] != b"ACK" or not parts[2].isdigit():
        return None
    return Ack(parts[1].decode("ascii"), int(parts[2]), parts[3].decode("ascii"))


def run_child(
    home: str,
    seed: int,
    *,
    async_mode: bool,
    kill_from: str,
    delay: float,
    threads: int = 3,
    events: int | None = None,
    python: str = sys.executable,
) -> ChildResult:
    """Run the workload on ``home`` and SIGKILL it ``delay`` seconds after its start
    (``kill_from="spawn"``) or after its first acknowledgement (``"ack"``). Returns the
    acknowledgements that reached the pipe; a partial last line does not count."""
    cmd = [*child_command("tests.harness.workload", python), "--home", home, "--seed", str(seed)]
    cmd += ["--threads", str(threads)]
    if events is not None:
        cmd += ["--events", str(events)]
    if async_mode:
        cmd.append("--async")
    acks: list[Ack] = []
    problems: list[str] = []
    first_ack = threading.Event()
    with (
        tempfile.TemporaryFile() as err,
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=_child_env()) as proc,
    ):
        assert proc.stdout is not None
        stdout = proc.stdout

        def read_acks() -> None:
            for line in stdout:
                if not line.endswith(b"\n"):
                    break  # cut short by the kill: never acknowledged
                ack = _parse_ack(line)
                if ack is not None:
                    acks.append(ack)
                    first_ack.set()
                elif line.strip() != b"DONE":
                    problems.append(f"unexpected output line {line[:200]!r}")
            first_ack.set()  # EOF: stop waiting

        reader = threading.Thread(target=read_acks, name="ack-reader", daemon=True)
        reader.start()
        started = time.monotonic()
        if kill_from == "ack":
            if not first_ack.wait(ACK_TIMEOUT):
                problems.append(f"no acknowledgement within {ACK_TIMEOUT:.0f}s")
            started = time.monotonic()
        remaining = delay - (time.monotonic() - started)
        try:
            proc.wait(timeout=max(remaining, 0.0))
        except subprocess.TimeoutExpired:
            pass
        killed = proc.poll() is None
        if killed:
            proc.send_signal(signal.SIGKILL)
        returncode = proc.wait()
        reader.join()  # the pipe's writer is dead: EOF comes once the buffered acks are read
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
    if killed and returncode != -signal.SIGKILL:
        problems.append(f"child exited with {returncode} while being killed")
    if not killed and returncode != 0:
        problems.append(f"child failed on its own with exit code {returncode}")
    if not killed and events is None:
        problems.append("child exited before it was killed")
    return ChildResult(
        seed, async_mode, kill_from, delay, acks, returncode, killed, stderr, problems
    )


def _rollout_digests(home: str) -> dict[str, str]:
    digests = {}
    for path in glob.glob(os.path.join(home, "threads", "*", "*", "*.jsonl")):
        with open(path, "rb") as f:
            digests[os.path.basename(path)] = hashlib.sha256(f.read()).hexdigest()
    return digests


def _wal_files(home: str) -> list[str]:
    return sorted(glob.glob(os.path.join(home, "journal", "*.wal")))


def check_home(home: str, history: History, *, label: str = "check") -> CheckResult:
    """Reopen the store at ``home`` (running recovery) and check it against ``history``.

    Appends one ``CHECK_TYPE`` record to every thread (recorded in ``history``), closes the
    store, and checks that no journal remains and that a second open changes nothing.
    """
    result = CheckResult()
    result.losses.extend(history.conflicts)
    history.conflicts.clear()
    acked_threads = history.threads()
    try:
        store = EmbeddedStore(home)
    except ThreadlogError as exc:
        result.other.append(f"the store does not open: {exc!r}")
        return result
    with store:
        present = set(store.thread_ids())
        for thread_id in sorted(acked_threads - present):
            result.losses.append(f"thread {thread_id}: acknowledged, but its rollout is gone")
        for thread_id in sorted(present):
            _check_thread(store, thread_id, history, result, label)
        result.threads = len(present)
    leftover = _wal_files(home)
    if leftover:
        result.other.append(f"journals left after close: {leftover}")
    temporary = sorted(glob.glob(os.path.join(home, "journal", ".*.tmp")))
    if temporary:
        result.notes.append(f"temporary journal files left behind: {temporary}")
    before = _rollout_digests(home)
    try:
        EmbeddedStore(home).close()
    except ThreadlogError as exc:
        result.other.append(f"the store does not reopen after the check: {exc!r}")
        return result
    after = _rollout_digests(home)
    if before != after:
        changed = sorted(t for t in after if before.get(t) != after[t])
        result.other.append(f"reopening changed rollouts (recovery is not idempotent): {changed}")
    if _wal_files(home):
        result.other.append(f"journals left after a clean reopen: {_wal_files(home)}")
    return result


def _check_thread(
    store: EmbeddedStore, thread_id: str, history: History, result: CheckResult, label: str
) -> None:
    acks = history.of(thread_id)
    path = store.path_of(thread_id)
    if os.path.getsize(path) == 0 and not acks:
        # create_thread died between creating the file and journaling thread.created: the
        # documented "no thread at all" state (RELIABILITY A3).
        result.notes.append(f"thread {thread_id}: empty rollout of an unacknowledged thread")
        return
    try:
        records = store.read(thread_id)
    except ThreadlogError as exc:
        result.verify_failures.append(f"thread {thread_id}: read failed: {exc!r}")
        result.losses.extend(f"thread {thread_id} ord {o}: unreadable" for o, _ in acks)
        return
    n = len(records)
    result.records += n
    ords = [r.ord for r in records]
    if ords != list(range(1, n + 1)):
        result.other.append(f"thread {thread_id}: ordinals are not 1..{n}: {ords[:20]}…")
    if len({r.id for r in records}) != n:
        result.other.append(f"thread {thread_id}: an event id appears twice")
    for record in records:
        if record.type == WORKLOAD_TYPE:
            data = record.data
            ok = isinstance(data, dict) and isinstance(data.get("seed"), int)
            if not ok or data != payload(data["seed"], thread_id, data.get("n", -1)):
                result.other.append(
                    f"thread {thread_id} ord {record.ord}: data is not what the workload wrote"
                )
    result.check_acks(f"thread {thread_id} ", acks, records)
    report = store.verify(thread_id)
    if not report.ok:
        result.verify_failures.append(f"thread {thread_id}: {report.to_dict()}")
        return
    if report.records != n or report.last_ord != n:
        result.other.append(f"thread {thread_id}: verify saw {report.records} records, read {n}")
    try:
        record = store.append(thread_id, CHECK_TYPE, {"check": label}, durable=True)
    except ThreadlogError as exc:
        result.other.append(f"thread {thread_id}: append after recovery failed: {exc!r}")
        return
    history.add(Ack(thread_id, record.ord, record.hash))
    if record.ord != n + 1:
        result.other.append(f"thread {thread_id}: new append got ord {record.ord}, not {n + 1}")
    info = store.thread_info(thread_id)
    if info.last_ord != record.ord or info.last_hash != record.hash:
        result.other.append(
            f"thread {thread_id}: the index says last ord {info.last_ord}, the log {record.ord}"
        )
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) != b"\n":
            result.other.append(f"thread {thread_id}: the rollout does not end with a newline")


def run_trial(
    home: str,
    seed: int,
    *,
    async_mode: bool,
    children: int = 1,
    history: History | None = None,
    threads: int = 3,
    python: str = sys.executable,
) -> TrialResult:
    """Run ``children`` workload children on ``home`` one after another, each SIGKILLed at a
    random instant drawn from ``seed``, then `check_home`. Pass the ``history`` of earlier
    trials on the same home to check their acknowledgements too (it is updated)."""
    history = history if history is not None else History()
    rng = random.Random(seed)
    results: list[ChildResult] = []
    for k in range(children):
        if rng.random() < 0.25:
            kill_from, delay = "spawn", rng.uniform(0.0, 0.5)
        else:
            kill_from, delay = "ack", rng.uniform(0.0, 0.3)
        child = run_child(
            home,
            seed * 100 + k,
            async_mode=async_mode,
            kill_from=kill_from,
            delay=delay,
            threads=threads,
            python=python,
        )
        results.append(child)
        for ack in child.acks:
            history.add(ack)
    check = check_home(home, history, label=f"trial {seed}")
    return TrialResult(seed, home, async_mode, results, check)
