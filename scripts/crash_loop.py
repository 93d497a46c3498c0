#!/usr/bin/env python3
"""The kill -9 crash loop, RELIABILITY D1 nightly tier: ``--trials 1000 --seed S``.

Each trial runs the workload child(ren) on a store home, SIGKILLs them at seeded random
instants and checks every acknowledged record on reopen (`tests.harness.crashloop`; the
test suite runs 20 of the same trials in ``tests/store/test_kill9.py``). Trials alternate at
random between sync and async writers, run one to three children before checking, and about
a third of them continue on the previous trial's home instead of a fresh one.

Trial ``i`` uses seed ``S + i``; ``--trials 1 --seed <that seed>`` replays its kill plan on a
fresh home. A failing trial's home is kept and its path printed; exit status 1 on any
violation.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

# The harness lives in the test suite (tests/harness), not in the package: put the project
# root on the import path, found from this file so that the script runs from any directory.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.harness.crashloop import History, run_trial


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000, help="trials to run (default 1000)")
    parser.add_argument("--seed", type=int, default=None, help="base seed (default: random)")
    parser.add_argument("--threads", type=int, default=3, help="threads per workload child")
    parser.add_argument("--workdir", default=None, help="where to put the homes (default: tmp)")
    parser.add_argument("--max-reuse", type=int, default=5, help="trials per home at most")
    parser.add_argument("--fail-fast", action="store_true", help="stop at the first violation")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    workdir = args.workdir or tempfile.mkdtemp(prefix="threadlog-crash-loop-")
    os.makedirs(workdir, exist_ok=True)
    print(f"crash loop: {args.trials} trials, seed {seed}, homes under {workdir}", flush=True)

    started = time.monotonic()
    acked = losses = verify_failures = other = kills = failed_trials = notes = 0
    home: str | None = None
    history = History()
    uses = 0
    for i in range(args.trials):
        trial_seed = seed + i
        rng = random.Random(trial_seed)
        async_mode = rng.random() < 0.5
        children = rng.choice((1, 1, 2, 3))
        if home is None or uses >= args.max_reuse or rng.random() < 0.65:
            if home is not None:
                shutil.rmtree(home, ignore_errors=True)
            home = os.path.join(workdir, f"home-{trial_seed}")
            history, uses = History(), 0
        uses += 1
        result = run_trial(
            home,
            trial_seed,
            async_mode=async_mode,
            children=children,
            history=history,
            threads=args.threads,
        )
        kills += sum(child.killed for child in result.children)
        acked += result.check.acked_checked
        losses += len(result.check.losses)
        verify_failures += len(result.check.verify_failures)
        other += len(result.check.other) + sum(len(c.problems) for c in result.children)
        notes += len(result.check.notes)
        for note in result.check.notes:
            print(f"note (trial seed {trial_seed}): {note}", flush=True)
        if result.violations:
            failed_trials += 1
            print(f"\nFAILED (seed {seed}, trial {i}, trial seed {trial_seed}; home kept):")
            print(result.describe(), flush=True)
            home = None  # keep it
            if args.fail_fast:
                break
        if (i + 1) % 50 == 0:
            elapsed = time.monotonic() - started
            print(
                f"[{i + 1}/{args.trials}] {elapsed:.0f}s, {kills} kills, {acked} acked records "
                f"checked, {losses} losses, {verify_failures} verify failures, "
                f"{failed_trials} failed trials",
                flush=True,
            )
    if home is not None:
        shutil.rmtree(home, ignore_errors=True)
    elapsed = time.monotonic() - started
    print(
        f"\nsummary: seed {seed}, {i + 1 if args.trials else 0} trials, {kills} kills, "
        f"{acked} acked records checked, {losses} losses, {verify_failures} verify failures, "
        f"{other} other violations, {failed_trials} failed trials, {notes} notes, {elapsed:.0f}s"
    )
    if failed_trials:
        print(f"FAILED: rerun with --seed {seed}; failing homes are kept under {workdir}")
        return 1
    if not os.listdir(workdir) and args.workdir is None:
        os.rmdir(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
