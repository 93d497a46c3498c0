#!/usr/bin/env python3
"""The agent kill -9 loop: ``--trials 1000 --seed S``.

Each trial runs the agent workload (`tests.harness.agent_workload`: read, write, a
non-idempotent ``charge``, steering, approvals) as a child on a fresh home, kills it at seeded
random points one to four times in a row — each child resuming the work of the one before —
runs it once more to completion, and checks the result with a fresh store
(`tests.harness.agent_crashloop`): no acknowledged record lost, the log verifies, no
charge made twice, every finished charge has its effect, every turn ended. The test suite runs
a short version in ``tests/faults/test_agent_kill9.py``.

Trial ``i`` uses seed ``S + i``; ``--trials 1 --seed <that seed>`` replays its kill plan (the
kill instants still depend on timing). A failing trial's home is kept and its path and seed
printed; exit status 1 on any violation.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter

# The harness lives in the test suite (tests/harness), not in the package: put the project
# root on the import path, found from this file so that the script runs from any directory.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.harness.agent_crashloop import run_agent_trial


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000, help="trials to run (default 1000)")
    parser.add_argument("--seed", type=int, default=None, help="base seed (default: random)")
    parser.add_argument("--turns", type=int, default=2, help="goals (turns) per workload")
    parser.add_argument("--kills", type=int, default=None, help="kills per trial (default 1-4)")
    parser.add_argument("--workdir", default=None, help="where to put the homes (default: tmp)")
    parser.add_argument("--fail-fast", action="store_true", help="stop at the first violation")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    workdir = args.workdir or tempfile.mkdtemp(prefix="threadlog-agent-crash-loop-")
    os.makedirs(workdir, exist_ok=True)
    print(
        f"agent crash loop: {args.trials} trials of {args.turns} turns, seed {seed}, "
        f"homes under {workdir}",
        flush=True,
    )

    started = time.monotonic()
    trials = kills = acked = killed_acks = records = losses = duplicates = verify = other = (
        failed
    ) = 0
    unknowns = 0
    resolved: Counter[str] = Counter()
    modes: Counter[str] = Counter()
    for i in range(args.trials):
        trial_seed = seed + i
        root = os.path.join(workdir, f"trial-{trial_seed}")
        result = run_agent_trial(root, trial_seed, turns=args.turns, kills=args.kills)
        trials += 1
        kills += result.kills
        modes.update(c.mode for c in result.children if c.killed)
        check = result.check
        acked += check.acked_checked
        killed_acks += result.acked_before_kills
        records += check.records
        losses += len(check.losses)
        duplicates += len(check.duplicates)
        verify += len(check.verify_failures)
        other += len(check.other) + sum(len(c.problems) for c in result.children)
        unknowns += check.unknowns
        resolved.update(check.resolved)
        if result.violations:
            failed += 1
            print(f"\nFAILED (seed {seed}, trial {i}, trial seed {trial_seed}; home kept):")
            print(result.describe(), flush=True)
            if args.fail_fast:
                break
        else:
            shutil.rmtree(root, ignore_errors=True)
        if (i + 1) % 50 == 0:
            elapsed = time.monotonic() - started
            print(
                f"[{i + 1}/{args.trials}] {elapsed:.0f}s, {kills} kills, {acked} acked records "
                f"checked, {losses} lost, {duplicates} duplicate effects, {unknowns} unknowns, "
                f"{failed} failed trials",
                flush=True,
            )
    elapsed = time.monotonic() - started
    by_reconcile = resolved["reconcile:done"] + resolved["reconcile:retry"]
    print(
        f"\nsummary: seed {seed}, {trials} trials, {kills} kills "
        f"({', '.join(f'{m} {n}' for m, n in sorted(modes.items()))}), "
        f"{acked} acked records checked ({killed_acks} acked by killed children; {records} "
        f"records in the final logs), "
        f"{losses} lost records, {duplicates} duplicate effects, {verify} verify failures, "
        f"{other} other violations, {unknowns} unknowns surfaced (resolved done "
        f"{resolved['workload:done']} / retry {resolved['workload:retry']} by the workload, "
        f"{by_reconcile} by reconcile: done {resolved['reconcile:done']} / retry "
        f"{resolved['reconcile:retry']}), {failed} failed trials, {elapsed:.0f}s"
    )
    if failed:
        print(f"FAILED: rerun with --seed {seed}; failing homes are kept under {workdir}")
        return 1
    if args.workdir is None and not os.listdir(workdir):
        os.rmdir(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
