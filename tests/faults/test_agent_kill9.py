"""SIGKILL the agent workload anywhere, resume it, and check that nothing was lost or repeated.

The short version of ``scripts/agent_crash_loop.py``: 25 trials of a two-goal workload (read,
write, a non-idempotent ``charge``, steering, approvals), each killed two to four times at
seeded random points (mostly just after a random acknowledgement; some during start-up and
recovery; some at a record type that resume writes) before a last run completes the work.
Every trial checks: no acknowledged record lost, the log verifies, zero duplicate charges,
every finished charge has its effect, every goal's turn completed
(`tests.harness.agent_crashloop`). Set ``THREADLOG_CRASH_SEED`` to vary the seeds.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.harness.agent_crashloop import AgentTrial, run_agent_trial
from tests.harness.agent_workload import WorkloadPlan

BASE_SEED = int(os.environ.get("THREADLOG_CRASH_SEED", "20250101"))
TRIALS = 25


def _assert_clean(result: AgentTrial) -> None:
    assert not result.violations, result.describe()
    assert not result.check.duplicates and not result.check.losses, result.describe()


@pytest.mark.parametrize("trial", range(TRIALS))
def test_agent_survives_kill9(tmp_path: Path, trial: int) -> None:
    seed = BASE_SEED + trial
    result = run_agent_trial(str(tmp_path), seed, turns=2, kills=2 + trial % 3)
    _assert_clean(result)
    # the final run acknowledged the whole log, so every record was checked
    assert result.check.acked_checked == result.check.records > 0, result.describe()
    assert result.check.charges == 2, result.describe()
    assert result.children[-1].mode == "final" and result.children[-1].done


@pytest.mark.parametrize("seed", [2, 4, 7])  # 4, 7: charge under "ask"; 7: blind reconcile
@pytest.mark.parametrize("die", ["before", "after"])
def test_a_charge_cut_off_by_a_crash_is_settled_once(tmp_path: Path, die: str, seed: int) -> None:
    """Deterministic unknowns: the child dies inside its first charge, before or after the
    effect; the next run finds the call unknown and settles it (by the reconcile hook, or —
    when the hook cannot tell — by the workload looking at charges.txt) without charging
    twice."""
    from tests.harness.agent_crashloop import check_agent_home, run_agent_child

    home, workspace = str(tmp_path / "home"), str(tmp_path / "ws")
    os.makedirs(workspace)
    dying = run_agent_child(home, workspace, seed, 2, mode="crash_at", die_in_charge=die)
    assert dying.killed and dying.returncode == 137 and not dying.problems, dying.stderr
    final = run_agent_child(home, workspace, seed, 2, mode="final")
    assert final.done and not final.problems, final.stderr
    check = check_agent_home(home, workspace, seed, 2, dict(final.acks))
    assert not check.violations, check.violations
    assert check.unknowns == 1 and check.charges == 2
    expected = "done" if die == "after" else "retry"
    who = "workload" if WorkloadPlan(seed, 2).reconcile_blind("g1-charge") else "reconcile"
    assert check.resolved == {f"{who}:{expected}": 1}, check.resolved


def test_checker_reports_a_duplicate_charge_and_a_lost_record(tmp_path: Path) -> None:
    """The checker itself: a charge line written twice and a record cut off after it was
    acknowledged are both reported."""
    from tests.harness.agent_crashloop import check_agent_home, run_agent_child
    from tests.harness.agent_workload import CHARGES_FILE

    home, workspace = str(tmp_path / "home"), str(tmp_path / "ws")
    os.makedirs(workspace)
    child = run_agent_child(home, workspace, 3, 2, mode="final")
    assert child.done and not child.problems, child.stderr
    acked = dict(child.acks)
    clean = check_agent_home(home, workspace, 3, 2, acked)
    assert not clean.violations and clean.acked_checked == len(acked)

    charges = Path(workspace) / CHARGES_FILE
    first = charges.read_text().splitlines()[0]
    charges.write_text(charges.read_text() + first + "\n")
    rollout = next((tmp_path / "home" / "threads").glob("*/*/*.jsonl"))
    lines = rollout.read_bytes().splitlines(keepends=True)
    rollout.write_bytes(b"".join(lines[:-1]))
    # the index knows the cut record was acknowledged, so the store refuses the log itself
    assert check_agent_home(home, workspace, 3, 2, acked).verify_failures
    for index in (tmp_path / "home").glob("index.sqlite3*"):
        index.unlink()  # without it, the checker's own accounting must find the loss
    broken = check_agent_home(home, workspace, 3, 2, acked)
    assert any(first in d for d in broken.duplicates), broken.violations
    assert any("acknowledged, but the log ends" in loss for loss in broken.losses)
