"""SIGKILL ``threadlog worker`` processes anywhere, and check every thread they shared.

The short version of ``scripts/worker_crash_loop.py``: a few trials with fixed seeds, on the
embedded store and on PostgreSQL. Each queues 6-10 jobs (a read, two non-idempotent
``charge`` calls, a ``write_file``), runs two workers and kills one or both one to four times
at seeded random moments (some restarted armed to die inside a takeover), then lets the last
workers settle every job. Every trial checks (`tests.harness.worker_crashloop`): every log
verifies and is one gap-free chain, no acknowledged record lost, no charge made twice, every
job's task ended with one completed turn or waits for a human on a charge of unknown outcome,
no turn left running. Set ``THREADLOG_CRASH_SEED`` to vary the seeds.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.harness.worker_crashloop import WorkerTrial, run_worker_trial
from tests.postgres.server import Schemas, pg_schemas, pg_server  # noqa: F401 - fixtures
from threadlog import open_store

BASE_SEED = int(os.environ.get("THREADLOG_CRASH_SEED", "20260101"))
TRIALS = 3


def _assert_clean(result: WorkerTrial) -> None:
    assert not result.violations, result.describe()
    check = result.check
    assert check.completed + len(check.waiting) == len(result.jobs), result.describe()
    # every session acknowledges its log from its first record, so every record was checked
    # but those at the end of a log whose writer died before acknowledging them and that no
    # later session opened (its turn over, or given back to wait for a human)
    assert check.acked_checked > 0, result.describe()
    assert check.acked_checked + check.unacked_tail == check.records, result.describe()


def _completed(target: str, thread: str) -> bool:
    with open_store(target) as store:
        state = store.state(thread, history=False)
    return state.active_turn is None and list(state.turns.values())[-1].status == "completed"


@pytest.fixture(params=["embedded", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "embedded":
        return str(tmp_path / "home")
    schemas: Schemas = request.getfixturevalue("pg_schemas")
    return schemas.new()


@pytest.mark.parametrize("trial", range(TRIALS))
def test_workers_survive_kill9(tmp_path: Path, target: str, trial: int) -> None:
    result = run_worker_trial(str(tmp_path / "trial"), BASE_SEED + trial, target, kills=1 + trial)
    _assert_clean(result)
    assert result.kills >= 1, result.describe()


def test_checker_reports_a_duplicate_charge_a_lost_record_and_a_turn_left_running(
    tmp_path: Path,
) -> None:
    """The checker itself: a charge line written twice, and a log cut before its turn's end
    (acknowledged records lost, the turn left running), are reported."""
    from tests.harness.worker_crashloop import check_worker_store

    root = tmp_path / "trial"
    result = run_worker_trial(str(root), BASE_SEED, kills=0, jobs=2)
    _assert_clean(result)
    assert result.kills == 0
    acks = [a for c in result.children for a in c.acks]
    charges = root / "charges.txt"
    first = charges.read_text().splitlines()[0]
    charges.write_text(charges.read_text() + first + "\n")
    thread = result.jobs[1]
    rollout = next((root / "home" / "threads").glob(f"*/*/{thread}.jsonl"))
    lines = rollout.read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if b'"turn.ended"' in line)
    rollout.write_bytes(b"".join(lines[:cut]))  # the job's turn left running, acks lost
    for index in (root / "home").glob("index.sqlite3*"):
        index.unlink()
    broken = check_worker_store(str(root / "home"), str(root), result.jobs, acks)
    assert any(first in d for d in broken.duplicates), broken.violations
    assert any("acknowledged" in loss for loss in broken.losses), broken.violations
    assert any("is left running" in o for o in broken.other), broken.violations


def test_a_takeover_killed_before_its_continuation_is_taken_over_again(
    tmp_path: Path, target: str
) -> None:
    """A worker dies mid-turn; the worker that takes the thread over dies right after the
    interrupted turn's ``turn.ended``, before the continuation's ``turn.started``; a third
    worker finds the thread (status ``interrupted``, its session never closed) and finishes
    the task (`tests/runtime/test_resume_cut_short.py`, through worker processes)."""
    from tests.harness.worker_crashloop import (
        WorkerChild,
        check_worker_store,
        start_worker,
        stop_worker,
    )
    from tests.harness.worker_workload import WorkerPlan, queue_jobs

    root = tmp_path / "trial"
    charges = str(root / "charges.txt")
    jobs = queue_jobs(target, WorkerPlan(BASE_SEED), [1], str(root / "ws"))
    (thread,) = jobs.values()
    first = start_worker(WorkerChild("first"), target, charges, BASE_SEED)
    deadline = time.monotonic() + 60
    while not any(a[3] == "tool_call.finished" for a in first.acks):
        assert time.monotonic() < deadline, "the first worker finished no call"
        time.sleep(0.005)
    stop_worker(first, signal.SIGKILL, "SIGKILL after a call")
    second = WorkerChild("second", crash_at="turn.ended:1")
    start_worker(second, target, charges, BASE_SEED)
    assert second.proc is not None
    second.proc.wait(60)
    stop_worker(second, None, "")
    assert second.killed and second.resumed == [], second.stderr  # died inside its takeover
    last = start_worker(WorkerChild("last"), target, charges, BASE_SEED)
    deadline = time.monotonic() + 60
    while not _completed(target, thread):
        assert time.monotonic() < deadline, "the task was not finished"
        time.sleep(0.1)
    stop_worker(last, signal.SIGTERM, "SIGTERM at the end")
    assert last.resumed == [thread] and not first.problems + second.problems + last.problems
    acks = first.acks + second.acks + last.acks
    check = check_worker_store(target, str(root), jobs, acks)
    assert not check.violations, check.violations
    assert check.completed == 1 and check.resumes == 2
