"""Benchmark the event log's append path against the raw limit of this machine, in one run.

The report is four ratios, each against a raw figure measured in the same round:

* **single writer**: ``append(durable=True)`` in a loop / raw ``write`` + ``fsync`` per record
  (one file, lines of the same size);
* **aappend, single writer**: one asyncio task awaiting each ``aappend(durable=True)`` / the
  same raw loop;
* **64 OS threads**: 64 threads, each appending durably to its own thread / raw: 64 threads,
  each writing its own file with an ``fsync`` per record;
* **64 asyncio tasks**: 64 tasks on one event loop, each appending to its own thread / the same
  raw 64 threads.

Each comparison is measured in slices that alternate between raw and threadlog (raw first, then
threadlog first), so that the disk's noise, which drifts over seconds on a shared machine, hits
both alike; each ratio is the median of ``--rounds`` rounds (at least 3), shown with its
range. ``--more`` adds the absolute figures of the other paths (group commit on one thread,
buffered appends, reading a 100,000-event thread, ``threadlog ls``, rebuilding the index).

Usage::

    .venv/bin/python benchmarks/bench_log.py            # the four ratios (~15 s, quiet disk)
    .venv/bin/python benchmarks/bench_log.py --more     # and the other figures
    .venv/bin/python benchmarks/bench_log.py --quick    # tiny sizes, a smoke test

Prints a Markdown table; ``--json`` prints the figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
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
    single: int = 2000
    """durable appends of one writer per comparison and round"""
    per_writer: int = 100
    """durable appends of each of the ``writers`` per comparison and round"""
    slices: int = 10
    """how many alternating slices a comparison is measured in"""
    writers: int = 64
    buffered: int = 100_000
    big_thread: int = 100_000
    ls_threads: int = 10_000


QUICK = Sizes(
    single=200, per_writer=20, slices=4, writers=8, buffered=2000, big_thread=2000, ls_threads=200
)


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


def tl_single(store: EmbeddedStore, thread: str, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        store.append(thread, "custom.bench", PAYLOAD, durable=True)
    return n / (time.perf_counter() - start)


def tl_aappend(store: EmbeddedStore, thread: str, n: int) -> float:
    async def main() -> float:
        start = time.perf_counter()
        for _ in range(n):
            await store.aappend(thread, "custom.bench", PAYLOAD, durable=True)
        return n / (time.perf_counter() - start)

    return asyncio.run(main())


def tl_tasks(store: EmbeddedStore, thread_ids: list[str], per_writer: int) -> float:
    async def writer(thread: str) -> None:
        for _ in range(per_writer):
            await store.aappend(thread, "custom.bench", PAYLOAD, durable=True)

    async def main() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(writer(t) for t in thread_ids))
        return len(thread_ids) * per_writer / (time.perf_counter() - start)

    return asyncio.run(main())


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


RATIOS = ("single", "aappend", "threads_64", "tasks_64")
"""The four ratios, in the order they are reported."""


def paired(
    raw: Callable[[int], float], tl: Callable[[int], float], n: int, slices: int
) -> tuple[float, float]:
    """``(raw rate, threadlog rate)`` over ``n`` units each, measured in ``slices`` slices
    that alternate between the two (raw first, then threadlog first), so that the disk's
    noise, which drifts over seconds on a shared machine, hits both alike."""
    each = max(1, n // slices)
    raw_t = tl_t = 0.0
    for i in range(slices):
        order = ((raw, True), (tl, False)) if i % 2 == 0 else ((tl, False), (raw, True))
        for fn, is_raw in order:
            elapsed = each / fn(each)
            if is_raw:
                raw_t += elapsed
            else:
                tl_t += elapsed
    total = each * slices
    return total / raw_t, total / tl_t


def ratio_rounds(sizes: Sizes, workdir: str, rounds: int) -> dict[str, Any]:
    """``rounds`` rounds of the four comparisons; every rate and ratio per round."""
    line = record_line(os.path.join(workdir, "probe"))
    raw_dir = os.path.join(workdir, "raw")
    os.mkdir(raw_dir)
    w, per, sl = sizes.writers, sizes.per_writer, sizes.slices
    per_round: list[dict[str, float]] = []
    with open_store(os.path.join(workdir, "store")) as store:
        one = store.create_thread("bench")
        many = [store.create_thread("bench") for _ in range(w)]
        tl_single(store, one, sizes.single // 10)  # warm up (imports, caches, the index)
        tl_aappend(store, one, sizes.single // 10)

        def raw_1(n: int) -> float:
            return raw_single(raw_dir, line, n)

        def raw_w(k: int) -> float:
            return raw_threads(raw_dir, line, w, k)

        for _ in range(rounds):
            f: dict[str, float] = {}
            f["raw_1"], f["tl_1"] = paired(
                raw_1, lambda n: tl_single(store, one, n), sizes.single, sl
            )
            f["raw_1b"], f["tl_aappend"] = paired(
                raw_1, lambda n: tl_aappend(store, one, n), sizes.single, sl
            )
            f["raw_64"], f["tl_64_threads"] = paired(
                raw_w, lambda k: tl_threads(store, many, k), per, sl
            )
            f["raw_64b"], f["tl_64_tasks"] = paired(
                raw_w, lambda k: tl_tasks(store, many, k), per, sl
            )
            f["single"] = f["tl_1"] / f["raw_1"]
            f["aappend"] = f["tl_aappend"] / f["raw_1b"]
            f["threads_64"] = f["tl_64_threads"] / f["raw_64"]
            f["tasks_64"] = f["tl_64_tasks"] / f["raw_64b"]
            per_round.append(f)
    return {"record_bytes": len(line), "rounds": per_round}


def other_figures(sizes: Sizes, workdir: str) -> dict[str, Any]:
    """Absolute figures of the other paths (``--more``), best of a few runs."""
    figures: dict[str, Any] = {}
    home = os.path.join(workdir, "more")
    w, per = sizes.writers, sizes.per_writer
    with open_store(home) as store:
        one = store.create_thread("bench")
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


def best(fn: Callable[[], float], runs: int = 3) -> float:
    """Best of a few runs (fsync latency on a shared VM is noisy)."""
    return max(fn() for _ in range(runs))


def _spread(values: list[float], fmt: str) -> str:
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}–{max(values):{fmt}}]"


def table(f: dict[str, Any]) -> str:
    rounds: list[dict[str, float]] = f["rounds"]
    w = f["sizes"]["writers"]

    def col(key: str) -> list[float]:
        return [r[key] for r in rounds]

    raw1 = col("raw_1") + col("raw_1b")
    raw64 = col("raw_64") + col("raw_64b")
    rows = [
        ("single writer, `append(durable=True)`", "tl_1", "single", "raw 1", "≥ 0.85"),
        ("single writer, `await aappend(durable=True)`", "tl_aappend", "aappend", "raw 1", "≥ 0.8"),
        (
            f"{w} OS threads, each its own thread",
            "tl_64_threads",
            "threads_64",
            f"raw {w}",
            "≥ 1.5",
        ),
        (f"{w} asyncio tasks, each its own thread", "tl_64_tasks", "tasks_64", f"raw {w}", "≥ 2"),
    ]
    out = [
        f"record size: {f['record_bytes']} bytes per line; {len(rounds)} interleaved rounds, "
        "median [min–max]",
        "",
        f"raw 1 (write + fsync per record, one file): {_spread(raw1, ',.0f')}/s; "
        f"raw {w} ({w} threads, each its own file, fsync per record): {_spread(raw64, ',.0f')}/s",
        "",
        "| durable appends | threadlog | ratio | against | target |",
        "|---|---|---|---|---|",
    ]
    for label, rate, ratio, against, target in rows:
        out.append(
            f"| {label} | {_spread(col(rate), ',.0f')}/s | **{_spread(col(ratio), '.2f')}** "
            f"| {against} | {target} |"
        )
    more = f.get("more")
    if more:
        out += [
            "",
            "| other figures (best of runs) | result |",
            "|---|---|",
            f"| {w} asyncio tasks on ONE thread | {more['tl_one_tasks']:,.0f}/s |",
            f"| {w} OS threads on ONE thread | {more['tl_one_threads']:,.0f}/s |",
            f"| buffered appends (with the final flush) | {more['tl_buffered']:,.0f}/s |",
            f"| read + verify a {f['sizes']['big_thread']:,}-event thread "
            f"| {more['read_big_s']:.3f} s |",
            f"| `threadlog ls --json` over {f['sizes']['ls_threads']:,} threads (whole command) "
            f"| {more['ls_s']:.3f} s |",
            f"| rebuild the index ({more['rebuild_events']:,} events) "
            f"| {more['rebuild_per_s']:,.0f} events/s |",
        ]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (≥ 3)")
    parser.add_argument("--more", action="store_true", help="also the other paths' figures")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--dir", help="work in this directory (default: a temp dir on the project's disk)"
    )
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds must be at least 3 (the ratios are medians)")
    sizes = QUICK if args.quick else Sizes()
    workdir = tempfile.mkdtemp(prefix="threadlog-bench-", dir=args.dir)
    try:
        figures: dict[str, Any] = {"sizes": sizes.__dict__}
        figures.update(ratio_rounds(sizes, workdir, args.rounds))
        figures["ratios"] = {k: statistics.median(r[k] for r in figures["rounds"]) for k in RATIOS}
        if args.more:
            figures["more"] = other_figures(sizes, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(table(figures))


if __name__ == "__main__":
    main()
