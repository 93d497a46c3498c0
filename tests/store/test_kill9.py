"""RELIABILITY D1: SIGKILL the workload at random instants, then check INV-1..7 on reopen.

20 trials: 10 on fresh homes (5 sync, 5 async) and 10 on two reused homes (5 sync, 5 async),
where each trial starts from the state the previous one left and some trials kill two
children in a row before checking (the second child recovers the first one's journal and may
be killed while doing so). Set ``THREADLOG_CRASH_SEED`` to vary the seeds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.harness.crashloop import History, TrialResult, run_trial

from threadlog import EmbeddedStore

BASE_SEED = int(os.environ.get("THREADLOG_CRASH_SEED", "20250101"))


def _assert_clean(result: TrialResult) -> None:
    assert not result.violations, result.describe()
    assert not any(child.problems for child in result.children), result.describe()


@pytest.mark.parametrize("async_mode", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("trial", range(5))
def test_kill9_fresh_home(tmp_path: Path, trial: int, async_mode: bool) -> None:
    seed = BASE_SEED + trial * 2 + int(async_mode)
    result = run_trial(str(tmp_path / "home"), seed, async_mode=async_mode)
    _assert_clean(result)
    assert result.check.threads >= 1 or not any(c.acks for c in result.children)


@pytest.mark.parametrize("async_mode", [False, True], ids=["sync", "async"])
def test_kill9_reused_home(tmp_path: Path, async_mode: bool) -> None:
    home = str(tmp_path / "home")
    history = History()
    checked = 0
    for trial in range(5):
        seed = BASE_SEED + 1000 + trial * 2 + int(async_mode)
        result = run_trial(
            home, seed, async_mode=async_mode, children=1 + trial % 2, history=history
        )
        _assert_clean(result)
        # Every earlier acknowledgement is checked again: nothing acknowledged in an earlier
        # trial may disappear later.
        assert result.check.acked_checked >= checked, result.describe()
        checked = result.check.acked_checked
    assert checked > 0


def test_checker_reports_a_lost_acknowledged_record(tmp_path: Path) -> None:
    """The checker itself: a record removed after it was acknowledged is reported as a loss."""
    from tests.harness.crashloop import check_home, run_child

    home = str(tmp_path / "home")
    child = run_child(home, 7, async_mode=False, kill_from="spawn", delay=60.0, threads=1, events=5)
    assert not child.problems and not child.killed and len(child.acks) == 6, child.stderr
    history = History()
    for ack in child.acks:
        history.add(ack)
    rollout = next((tmp_path / "home" / "threads").glob("*/*/*.jsonl"))
    lines = rollout.read_bytes().splitlines(keepends=True)
    rollout.write_bytes(b"".join(lines[:-1]))  # a clean file, one acknowledged record short
    result = check_home(home, history)
    # the store itself now refuses the short log (its index knew ord 6 was acknowledged), so
    # the checker finds the record unreadable rather than missing
    assert any("ord 6: unreadable" in v for v in result.losses), result.losses
    assert any("1 acknowledged record(s) missing" in v for v in result.verify_failures)


DIE_IN_CREATE_THREAD = """
import os, sys
from threadlog import EmbeddedStore
from threadlog.store._fileops import FileOps

class DieAfterRolloutCreated(FileOps):
    created = False

    def open(self, path, flags, mode=0o600):
        fd = super().open(path, flags, mode)
        self.created = self.created or (path.endswith(".jsonl") and bool(flags & os.O_CREAT))
        return fd

    def fsync_dir(self, path):
        super().fsync_dir(path)
        if self.created:
            os._exit(137)  # kill -9 between the rollout's creation and thread.created

store = EmbeddedStore(sys.argv[1], fops=DieAfterRolloutCreated())
store.create_thread("a")
print("NOT REACHED", flush=True)
"""


def test_a_kill_inside_create_thread_leaves_no_damaged_thread(tmp_path: Path) -> None:
    """A kill between create_thread's file creation and its journal commit leaves an empty
    rollout: "no thread at all" (store/embedded/writers.py, OpenLogs.create). It must not
    turn into a thread that every later `verify` (and ``threadlog verify``) reports as
    damaged."""
    home = str(tmp_path / "home")
    child = subprocess.run(
        [sys.executable, "-c", DIE_IN_CREATE_THREAD, home], capture_output=True, text=True
    )
    assert child.returncode == 137, child.stderr
    assert "NOT REACHED" not in child.stdout
    (empty,) = (tmp_path / "home" / "threads").glob("*/*/*.jsonl")
    assert empty.stat().st_size == 0
    with EmbeddedStore(home) as store:
        thread = store.create_thread("b")  # the store stays usable
        reports = [store.verify(t) for t in store.thread_ids()]
        assert thread in store.thread_ids()
    bad = [r.to_dict() for r in reports if not r.ok]
    assert not bad, f"an unacknowledged, never-created thread is reported as damaged: {bad}"
