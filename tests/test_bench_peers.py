"""A smoke run of ``benchmarks/peers.py --quick``: correctness only, never timings.

The benchmark reads every session back after each workload and fails the run (a non-zero exit,
the error in the report) unless it holds exactly the events appended; this test checks that
every store took part in every workload that applies to it, and that every cold load returned
all of its events. A peer that is not installed fails the test under ``CI=true`` (the run
itself exits non-zero then) and skips it elsewhere, naming the missing package.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import peer_adapters  # noqa: E402
import peers  # noqa: E402


def test_every_peer_writes_and_reads_back_what_it_was_given(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "peers.py"),
            "--quick",
            "--json",
            "--rounds",
            "1",
            "--chart",
            str(tmp_path / "peers.png"),
            "--dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    ci = os.environ.get("CI", "").lower() == "true"
    figures = json.loads(done.stdout) if done.stdout.strip() else None
    assert figures is not None, done.stderr[-2000:]
    rows = {row["name"]: row for row in figures["rows"]}
    assert list(rows) == [a.name for a in peer_adapters.ADAPTERS]  # every row, in order
    missing = {name: row["missing"] for name, row in rows.items() if row["missing"]}
    failed = {name: row["errors"] for name, row in rows.items() if row["errors"]}
    assert not failed, failed
    assert done.returncode == (1 if ci and missing else 0), done.stderr[-2000:]
    quick = peers.QUICK
    for adapter in peer_adapters.ADAPTERS:
        row = rows[adapter.name]
        if row["missing"]:
            continue
        for workload in peers.WORKLOADS:  # each applicable workload ran, every event counted
            if peers.api_of(adapter, workload) is None:
                assert workload not in row["runs"]
                continue
            (run,) = row["runs"][workload]
            each = quick.single if workload.startswith("single") else quick.per_writer
            sessions = 1 if workload.startswith("single") else quick.writers
            assert run["events"] == each * sessions, (adapter.name, workload)
        if adapter.durable:  # the cold load read back the whole session, in a fresh process
            ((load,),) = [row["loads"]]
            assert load["events"] == quick.load and row["bytes_per_event"] > 0
        else:
            assert row["loads"] == []
    assert (tmp_path / "peers.png").stat().st_size > 0
    if missing:
        assert not ci, missing
        pytest.skip(f"peers not installed (pip install 'threadlog[bench]'): {missing}")


@pytest.mark.parametrize("ci", ["true", ""])
def test_a_missing_peer_is_reported_and_fails_the_run_under_ci(tmp_path: Path, ci: str) -> None:
    shadow = tmp_path / "shadow" / "eventsourcing"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not here')\n")
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "peers.py"),
            "--quick",
            "--only",
            "EventSourcing",
            "--no-chart",
            "--dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "PYTHONPATH": f"{tmp_path / 'shadow'}{os.pathsep}{ROOT / 'src'}",
            "CI": ci,
        },
    )
    assert "| eventsourcing SQLite recorder | — | not installed |" in done.stdout, done.stderr
    assert "pip install 'threadlog[bench]'" in done.stdout
    assert "| raw JSONL, fsync per record | sync |" in done.stdout  # the others still ran
    assert done.returncode == (1 if ci else 0), done.stderr[-2000:]
