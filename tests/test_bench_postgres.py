"""A smoke run of ``benchmarks/bench_postgres.py --quick`` (the benchmark itself is a script)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.postgres.server import pg_server  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[1]


def test_the_postgres_benchmark_runs(pg_server: str) -> None:  # noqa: F811
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_postgres.py"),
            "--quick",
            "--writers",
            "4",
            "--dsn",
            pg_server,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "| baseline | " in done.stdout and "| threadlog | " in done.stdout
