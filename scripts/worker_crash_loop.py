#!/usr/bin/env python3
"""The worker kill -9 loop: ``--trials 100 --seed S [--store embedded|postgres]``.

Each trial queues 6-10 jobs, one thread each (a read, two non-idempotent ``charge`` calls
whose effects go to a shared ``charges.txt``, a ``write_file``), starts two worker processes
(`tests.harness.worker_workload`: ``threadlog worker`` with the workload's model and tools),
SIGKILLs one or both of them at seeded random moments one to four times, starting them again
(some armed to die by themselves inside a takeover, ``--crash-at``), lets the last
workers settle every job, and checks the result with a fresh store
(`tests.harness.worker_crashloop`): every log verifies and is one gap-free chain, no
acknowledged record lost, no charge made twice, every job's task ended with one completed turn
(or waits for a human on a charge of unknown outcome: counted apart, not a failure), no turn
left running. The test suite runs a short version in ``tests/faults/test_worker_kill9.py``.

Trial ``i`` uses seed ``S + i``; ``--trials 1 --seed <that seed>`` replays its kill plan (the
kill instants still depend on timing). On PostgreSQL each trial gets a fresh schema on the
server ``--pg-url`` (default ``$THREADLOG_TEST_PG``, else the test suite's server), dropped
after a clean trial. A failing trial's directory (and schema) is kept and its seed printed;
exit status 1 on any violation.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import shutil
import sys
import tempfile
import time
from collections import Counter

# The harness lives in the test suite (tests/harness), not in the package: put the project
# root on the import path, found from this file so that the script runs from any directory.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.harness.worker_crashloop import run_worker_trial
from tests.postgres.server import DEFAULT_URL, with_schema


def _drop_schema(server: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=100, help="trials to run (default 100)")
    parser.add_argument("--seed", type=int, default=None, help="base seed (default: random)")
    parser.add_argument("--store", choices=("embedded", "postgres"), default="embedded")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("THREADLOG_TEST_PG", DEFAULT_URL),
        help="PostgreSQL server for --store postgres (a schema per trial is made on it)",
    )
    parser.add_argument("--kills", type=int, default=None, help="kill rounds (default 1-4)")
    parser.add_argument("--jobs", type=int, default=None, help="jobs per trial (default 6-10)")
    parser.add_argument("--workdir", default=None, help="where to put the trials (default: tmp)")
    parser.add_argument("--fail-fast", action="store_true", help="stop at the first violation")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    workdir = args.workdir or tempfile.mkdtemp(prefix="threadlog-worker-crash-loop-")
    os.makedirs(workdir, exist_ok=True)
    print(
        f"worker crash loop: {args.trials} trials on the {args.store} store, seed {seed}, "
        f"trials under {workdir}",
        flush=True,
    )

    started = time.monotonic()
    trials = kills = crashed = acked = records = resumes = jobs = completed = waiting = 0
    tails = 0  # records at the end of a log whose writer died before acknowledging them
    losses = duplicates = verify = other = failed = unknowns = 0
    resolved: Counter[str] = Counter()
    for i in range(args.trials):
        trial_seed = seed + i
        root = os.path.join(workdir, f"trial-{trial_seed}")
        target = None
        schema = None
        if args.store == "postgres":
            schema = f"tl_wcl_{trial_seed}_{secrets.token_hex(3)}"
            target = with_schema(args.pg_url, schema)
        result = run_worker_trial(root, trial_seed, target, kills=args.kills, jobs=args.jobs)
        trials += 1
        kills += result.kills
        crashed += sum(1 for c in result.children if c.killed and c.how.startswith("crashed"))
        check = result.check
        acked += check.acked_checked
        tails += check.unacked_tail
        records += check.records
        resumes += check.resumes
        jobs += len(result.jobs)
        completed += check.completed
        waiting += len(check.waiting)
        losses += len(check.losses)
        duplicates += len(check.duplicates)
        verify += len(check.verify_failures)
        other += len(check.other) + len(result.problems)
        other += sum(len(c.problems) for c in result.children)
        unknowns += check.unknowns
        resolved.update(check.resolved)
        if result.violations:
            failed += 1
            kept = f" and schema {schema}" if schema else ""
            print(
                f"\nFAILED (seed {seed}, trial {i}, trial seed {trial_seed}; directory{kept} kept):"
            )
            print(result.describe(), flush=True)
            if args.fail_fast:
                break
        else:
            shutil.rmtree(root, ignore_errors=True)
            if schema is not None:
                _drop_schema(args.pg_url, schema)
        if (i + 1) % 10 == 0:
            elapsed = time.monotonic() - started
            print(
                f"[{i + 1}/{args.trials}] {elapsed:.0f}s, {kills} kills, {resumes} resumes, "
                f"{acked} acked records checked, {losses} lost, {duplicates} duplicate effects, "
                f"{completed}/{jobs} jobs completed, {waiting} waiting for a human, "
                f"{failed} failed trials",
                flush=True,
            )
    elapsed = time.monotonic() - started
    print(
        f"\nsummary: seed {seed}, store {args.store}, {trials} trials, {kills} kills "
        f"({crashed} at a crash point inside a takeover), {resumes} thread.resumed records, "
        f"{acked} acked records checked ({records} records in the final logs; {tails} at the "
        "end of a log whose writer died before acknowledging them), "
        f"{losses} lost records, {duplicates} duplicate effects, {verify} verify failures, "
        f"{other} other violations; {jobs} jobs: {completed} completed, {waiting} waiting for a "
        f"human; {unknowns} unknowns surfaced (resolved by reconcile: done "
        f"{resolved['reconcile:done']} / retry {resolved['reconcile:retry']}), "
        f"{failed} failed trials, {elapsed:.0f}s"
    )
    if failed:
        print(f"FAILED: rerun with --seed {seed}; failing trials are kept under {workdir}")
        return 1
    if args.workdir is None and not os.listdir(workdir):
        os.rmdir(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
