"""Benchmark the event log against the raw limit of this machine, in one run.

Measures, side by side:

* raw: a JSONL append + fsync per record (same record size), 1 writer and 64 threads each
  appending to its own file;
* threadlog critical appends (durable before return): 1 writer; 64 writers on 64 threads
  (conversations); 64 writers on ONE thread (group commit). Writers are asyncio tasks (how the
  runtime appends); OS-thread writers are shown too, for reference;
* threadlog buffered appends;
* reading and verifying a 100,000-event thread; ``threadlog ls --json`` over 10,000 threads;
  rebuilding the index.

Usage::

    .venv/bin/python benchmarks/bench_log.py            # full run (about a minute)
    .venv/bin/python benchmarks/bench_log.py --quick    # tiny sizes, a smoke test

Prints a Markdown table; ``--json`` prints the figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from threadlog import open_store

if TYPE_CHECKING:
    from collections.abc import Callable

    from threadlog.store.embedded import EmbeddedStore

PAYLOAD = {"text": "x" * 480, "n": 1}  # 500 bytes of event data


@dataclass
class Sizes:
    single: int = 3000
    per_writer: int = 200
    writers: int = 64
    buffered: int = 100_000
    big_thread: int = 100_000
    ls_threads: int = 10_000


QUICK = Sizes(single=200, per_writer=20, writers=8, buffered=2000, big_thread=2000, ls_threads=200)


def record_line(store_dir: str) -> bytes:
    """A line of exactly the size threadlog writes for PAYLOAD (for the raw baseline)."""
    with open_store(store_dir) as store:
        thread = store.create_thread("bench")
        store.append(thread, "custom.bench", PAYLOAD)
        size = len(open(store.path_of(thread), "rb").read().splitlines(keepends=True)[-1])
    return b"x" * (size - 1) + b"\n"


def raw_single(directory: str, line: bytes, n: int) -> float:
    fd = os.open(
        os.path.join(directory, "raw.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
    )
    start = time.perf_counter()
    for _ in range(n):
        os.write(fd, line)
        os.fsync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return n / elapsed


def raw_threads(directory: str, line: bytes, writers: int, per_writer: int) -> float:
    def work(i: int) -> None:
        fd = os.open(
            os.path.join(directory, f"raw{i}.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
        )
        for _ in range(per_writer):
            os.write(fd, line)
            os.fsync(fd)
        os.close(fd)

    return _run_threads(work, writers, per_writer)


def _run_threads(work: Callable[[int], None], writers: int, per_writer: int) -> float:
    threads = [threading.Thread(target=work, args=(i,)) for i in range(writers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return writers * per_writer / (time.perf_counter() - start)


def tl_single(store: EmbeddedStore, n: int) -> float:
    thread = store.create_thread("bench")
    start = time.perf_counter()
    for _ in range(n):
        store.append(thread, "custom.bench", PAYLOAD, durable=True)
    return n / (time.perf_counter() - start)


def tl_tasks(store: EmbeddedStore, thread_ids: list[str], per_writer: int) -> float:
    async def writer(thread: str) -> None:
        for _ in range(per_writer):
            await store.aappend(thread, "custom.bench", PAYLOAD, durable=True)

    async def main() -> None:
        await asyncio.gather(*(writer(t) for t in thread_ids))

    start = time.perf_counter()
    asyncio.run(main())
    return len(thread_ids) * per_writer / (time.perf_counter() - start)


def tl_threads(store: EmbeddedStore, thread_ids: list[str], per_writer: int) -> float:
    def work(i: int) -> None:
        for _ in range(per_writer):
            store.append(thread_ids[i], "custom.bench", PAYLOAD, durable=True)

    return _run_threads(work, len(thread_ids), per_writer)


def tl_buffered(store: EmbeddedStore, n: int) -> float:
    thread = store.create_thread("bench")
    start = time.perf_counter()
    for _ in range(n):
        store.append(thread, "custom.bench", PAYLOAD, durable=False)
    store.flush()
    return n / (time.perf_counter() - start)


def best(fn: Callable[[], float], runs: int = 3) -> float:
    """Best of a few runs (fsync latency on a shared VM is noisy)."""
    return max(fn() for _ in range(runs))


def run(sizes: Sizes, workdir: str) -> dict[str, Any]:
    figures: dict[str, Any] = {"sizes": sizes.__dict__}
    line = record_line(os.path.join(workdir, "probe"))
    figures["record_bytes"] = len(line)
    raw_dir = os.path.join(workdir, "raw")
    os.mkdir(raw_dir)
    home = os.path.join(workdir, "store")
    w, per = sizes.writers, sizes.per_writer
    with open_store(home) as store:
        many = [store.create_thread("bench") for _ in range(w)]
        one = store.create_thread("bench")
        # Interleave raw and threadlog runs so that disk noise hits both alike.
        figures["raw_1"] = best(lambda: raw_single(raw_dir, line, sizes.single))
        figures["tl_1"] = best(lambda: tl_single(store, sizes.single))
        figures["raw_64"] = best(lambda: raw_threads(raw_dir, line, w, per))
        figures["tl_64_tasks"] = best(lambda: tl_tasks(store, many, per))
        figures["tl_64_threads"] = best(lambda: tl_threads(store, many, per))
        figures["tl_one_tasks"] = best(lambda: tl_tasks(store, [one] * w, per))
        figures["tl_one_threads"] = best(lambda: tl_threads(store, [one] * w, per))
        figures["tl_buffered"] = best(lambda: tl_buffered(store, sizes.buffered), runs=2)
        big = store.create_thread("bench")
        for _ in range(sizes.big_thread - 1):
            store.append(big, "custom.bench", PAYLOAD, durable=False)
        store.flush()
    with open_store(home) as store:
        start = time.perf_counter()
        records = store.read(big)
        figures["read_big_s"] = time.perf_counter() - start
        assert len(records) == sizes.big_thread
        start = time.perf_counter()
        indexed = store.rebuild()
        elapsed = time.perf_counter() - start
        figures["rebuild_events"] = indexed
        figures["rebuild_per_s"] = indexed / elapsed
    ls_home = os.path.join(workdir, "ls")
    with open_store(ls_home) as store:
        for i in range(sizes.ls_threads):
            store.create_thread(f"user{i % 50}", title=f"thread {i}")
    cmd = [sys.executable, "-m", "threadlog", "ls", "--json", "--home", ls_home]
    subprocess.run(cmd, check=True, capture_output=True)  # warm the page cache
    timings = []
    for _ in range(3):
        start = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True).stdout
        timings.append(time.perf_counter() - start)
    assert len(json.loads(out)) == sizes.ls_threads
    figures["ls_s"] = min(timings)
    return figures


def table(f: dict[str, Any]) -> str:
    raw1, raw64 = f["raw_1"], f["raw_64"]
    tl1 = f["tl_1"]
    w = f["sizes"]["writers"]
    rows = [
        ("raw: append + fsync per record, 1 writer", f"{raw1:,.0f}/s", "1.00 × raw", ""),
        (f"raw: {w} threads, each its own file", f"{raw64:,.0f}/s", "1.00 × raw-64", ""),
        ("threadlog critical, 1 writer", f"{tl1:,.0f}/s", f"{tl1 / raw1:.2f} × raw", "≥ 0.80"),
        (
            f"threadlog critical, {w} writers on {w} threads (asyncio)",
            f"{f['tl_64_tasks']:,.0f}/s",
            f"{f['tl_64_tasks'] / raw64:.2f} × raw-64",
            "≥ 0.90",
        ),
        (
            f"threadlog critical, {w} writers on {w} threads (OS threads)",
            f"{f['tl_64_threads']:,.0f}/s",
            f"{f['tl_64_threads'] / raw64:.2f} × raw-64",
            "(reference)",
        ),
        (
            f"threadlog critical, {w} writers on ONE thread (asyncio)",
            f"{f['tl_one_tasks']:,.0f}/s",
            f"{f['tl_one_tasks'] / tl1:.1f} × 1 writer",
            "≥ 10",
        ),
        (
            f"threadlog critical, {w} writers on ONE thread (OS threads)",
            f"{f['tl_one_threads']:,.0f}/s",
            f"{f['tl_one_threads'] / tl1:.1f} × 1 writer",
            "(reference)",
        ),
        (
            "threadlog buffered appends",
            f"{f['tl_buffered']:,.0f}/s",
            f"{f['tl_buffered'] / raw1:.1f} × raw",
            "≥ 100,000/s",
        ),
        (
            f"read + verify a {f['sizes']['big_thread']:,}-event thread",
            f"{f['read_big_s']:.3f} s",
            "",
            "< 1 s",
        ),
        (
            f"`threadlog ls --json` over {f['sizes']['ls_threads']:,} threads (whole command)",
            f"{f['ls_s']:.3f} s",
            "",
            "< 0.3 s",
        ),
        (
            f"rebuild the index ({f['rebuild_events']:,} events)",
            f"{f['rebuild_per_s']:,.0f} events/s",
            "",
            "≥ 100,000/s",
        ),
    ]
    out = [
        f"record size: {f['record_bytes']} bytes per line",
        "",
        "| measurement | result | ratio | target |",
        "|---|---|---|---|",
    ]
    out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--dir", help="work in this directory (default: a temp dir on the project's disk)"
    )
    args = parser.parse_args()
    sizes = QUICK if args.quick else Sizes()
    workdir = tempfile.mkdtemp(prefix="threadlog-bench-", dir=args.dir)
    try:
        figures = run(sizes, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(table(figures))


if __name__ == "__main__":
    main()
