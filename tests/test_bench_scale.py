"""A smoke run of ``benchmarks/scale.py --quick``: the operations succeed and report sane
numbers (no timing is asserted; the figures are the benchmark's, in docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_scale_benchmark_runs_and_resumes_from_a_snapshot() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "scale.py"), "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["events"] > 10_000
    # the killed session had saved a snapshot while it ran; resume reduced only the tail
    resumed = row["runtime_resume"]
    assert resumed["base_ord"] == row["snapshot_ord"] > 0
    assert 0 < resumed["replayed"] <= row["events"] - row["snapshot_ord"]
    assert "step_interrupted" in row["resume_repairs"]  # killed in the middle of a model call
    for key in (
        "threadlog_resume",
        "runtime_resume",
        "first_append",
        "read_last_5",
        "follow_last_5",
        "explicit_new",
        "explicit_replay",
    ):
        assert row[key]["seconds"] > 0 and row[key]["rss_mb"] > 0, key
    assert row["threadlog_verify"]["seconds"] > 0
