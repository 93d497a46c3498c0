"""Benchmark the embedded store's tail operations on long threads: costs must follow the work.

For each size (10k, 100k, 1M events of 500-byte payloads by default) it builds one thread
(buffered appends), closes the store (which checkpoints the thread), then measures, each in a
fresh child process so that the peak RSS is that operation's alone:

* ``open+append``: open the store and make one durable append (opening the thread for
  writing: checkpoint check, tail scan, admission state);
* ``last 5``: open the store and read the thread's last five records
  (``read(before=..., limit=5)``);
* ``show``: ``threadlog show THREAD --last 5`` (state, index rows, the tail read);
* ``verify``: ``store.verify(thread)`` (the whole log, streamed).

With ``--baseline`` it also measures open+append with the checkpoint removed from the index
(the full-scan fallback a store without one takes).

Usage::

    python benchmarks/bench_tail.py                      # 10k, 100k, 1M
    python benchmarks/bench_tail.py --events 10000 --events 100000
    python benchmarks/bench_tail.py --quick              # 2k and 20k, a smoke test

Prints a Markdown table (``--json``: the figures as JSON). Times are the best of
``--rounds`` child runs; RSS is the child's own peak (``VmHWM`` from ``/proc``, which, unlike
``ru_maxrss``, does not count the pages of the parent it was forked from), in MB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from threadlog.store.embedded import EmbeddedStore

PAYLOAD = {"text": "x" * 480, "n": 1}  # 500 bytes of event data

_CHILD = """
import json, resource, sys, time
from threadlog.store.embedded import EmbeddedStore
home, thread, what = sys.argv[1], sys.argv[2], sys.argv[3]
start = time.perf_counter()
if what == "append":
    with EmbeddedStore(home) as store:
        opened = time.perf_counter()
        store.append(thread, "custom.bench", {"text": "y", "n": 2}, durable=True)
        took = time.perf_counter() - opened
elif what == "append-nockpt":
    with EmbeddedStore(home) as store:
        store.index.run("DELETE FROM checkpoints WHERE thread_id = ?", (thread,))
        opened = time.perf_counter()
        store.append(thread, "custom.bench", {"text": "y", "n": 2}, durable=True)
        took = time.perf_counter() - opened
elif what == "last5":
    with EmbeddedStore(home) as store:
        opened = time.perf_counter()
        records = store.read(thread, before=2**62, limit=5)
        took = time.perf_counter() - opened
        assert len(records) == 5
elif what == "show":
    from click.testing import CliRunner
    from threadlog.cli import cli
    opened = time.perf_counter()
    result = CliRunner().invoke(cli, ["show", thread, "--home", home, "--last", "5"])
    took = time.perf_counter() - opened
    assert result.exit_code == 0, result.output
elif what == "verify":
    with EmbeddedStore(home) as store:
        opened = time.perf_counter()
        report = store.verify(thread)
        took = time.perf_counter() - opened
        assert report.ok, report
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
try:  # this process's own peak: ru_maxrss also counts the parent's pages it forked with
    with open("/proc/self/status") as status:
        for row in status:
            if row.startswith("VmHWM:"):
                rss = int(row.split()[1]) / 1024
except OSError:
    pass
print(json.dumps({"seconds": took, "rss_mb": rss}))
"""


def build(home: str, events: int) -> str:
    """One thread of ``events`` records (buffered appends), the store closed after."""
    with EmbeddedStore(home) as store:
        thread = store.create_thread("bench")
        for _ in range(events - 1):
            store.append(thread, "custom.bench", PAYLOAD, durable=False)
    return thread


def child(home: str, thread: str, what: str) -> dict[str, float]:
    """Run one measurement in a fresh interpreter."""
    env = dict(os.environ)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, home, thread, what],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def measure(events: int, rounds: int, baseline: bool, heavy_rounds: int) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix="tl-bench-tail-")
    home = os.path.join(root, "home")
    try:
        start = time.perf_counter()
        thread = build(home, events)
        figures: dict[str, Any] = {
            "events": events,
            "build_s": time.perf_counter() - start,
            "bytes": os.path.getsize(EmbeddedStore(home).path_of(thread)),
        }
        whats = ["append", "last5", "show", "verify"] + (["append-nockpt"] if baseline else [])
        for what in whats:
            n = heavy_rounds if what in ("verify", "append-nockpt") else rounds
            runs = [child(home, thread, what) for _ in range(n)]
            figures[what] = {
                "seconds": min(r["seconds"] for r in runs),
                "rss_mb": max(r["rss_mb"] for r in runs),
            }
        return figures
    finally:
        shutil.rmtree(root, ignore_errors=True)


def table(results: list[dict[str, Any]]) -> str:
    names = {
        "append": "open + first append",
        "last5": "read last 5",
        "show": "threadlog show --last 5",
        "verify": "verify (streamed)",
        "append-nockpt": "open + first append, no checkpoint",
    }
    head = "| operation | " + " | ".join(f"{r['events']:,} events" for r in results) + " |"
    lines = [head, "|---|" + "---|" * len(results)]
    for key, name in names.items():
        if key not in results[0]:
            continue
        cells = [f"{r[key]['seconds'] * 1000:,.1f} ms, {r[key]['rss_mb']:.0f} MB" for r in results]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, action="append", help="thread size (repeatable)")
    parser.add_argument("--rounds", type=int, default=3, help="child runs per fast operation")
    parser.add_argument("--heavy-rounds", type=int, default=1, help="runs of verify/baseline")
    parser.add_argument("--baseline", action="store_true", help="also open without checkpoint")
    parser.add_argument("--quick", action="store_true", help="2k and 20k events")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    sizes = args.events or ([2000, 20_000] if args.quick else [10_000, 100_000, 1_000_000])
    results = []
    for events in sizes:
        results.append(measure(events, args.rounds, args.baseline, args.heavy_rounds))
        print(f"# {events:,} events done", file=sys.stderr)
    print(json.dumps(results, indent=2) if args.json else table(results))


if __name__ == "__main__":
    main()
