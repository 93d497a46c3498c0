"""threadlog against its peers, in one run: the same workloads through every store.

The stores (``peer_adapters.py``, each behind one small interface): threadlog's embedded store
(durable appends), LangGraph's SqliteSaver, the OpenAI Agents SDK's SQLiteSession, Google
ADK's SqliteSessionService (and its in-memory service, for reference), eventsourcing's SQLite
recorder, and the raw limits of this machine: a JSONL file per session with ``fsync`` per
record (the reference: every ratio is against it, in the same round) and per 100 records,
and SQLite (WAL, ``synchronous=FULL``) with one transaction per record. Every event carries
the same 500-byte JSON data (``{"text": 480 × "x", "n": i}``).

Workloads, interleaved: each round runs every workload through every store (in an order that
rotates from round to round) on a fresh directory, and reads every session back to check it
holds exactly what was appended:

* **1 writer**: one session, appends one at a time (the sync API; asyncio-only peers await
  each append on one event loop);
* **1 writer, asyncio**: the same through the asyncio API (threadlog's ``aappend``; rows for
  peers with an asyncio API);
* **64 threads**: 64 sessions, an OS thread each (asyncio-only peers: an event loop in each);
* **64 tasks**: 64 sessions, an asyncio task each, on one loop (sync-only peers: each append
  through ``asyncio.to_thread``);
* **cold load**: a session of 50,000 events loaded in a fresh process (threadlog: open +
  read, which checks every record's bytes, by its hash or its chunk's digest, and the
  chain), its import time apart; bytes on disk per event and the process's peak RSS.

Ratios for the 64-writer rows are against raw JSONL from 64 OS threads. Prints markdown
tables (or ``--json``) and writes a chart (``--chart``; a full run's default is
``docs/images/peers.png``, a ``--quick`` run draws one only where ``--chart`` says).

Usage::

    .venv/bin/python benchmarks/peers.py            # the full run (~20 min on a loaded 2-core VM)
    .venv/bin/python benchmarks/peers.py --quick    # a smoke run: tiny counts, 1 round
    .venv/bin/python benchmarks/peers.py --load-only --rounds 10 --no-chart \
        --only Threadlog --only OpenAIAgents --only EventSourcing   # the cold loads alone

A peer that is not installed is reported as missing (``pip install 'threadlog[bench]'``);
with ``CI=true`` a missing peer makes the run fail, as a failed check does.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence

import peer_adapters
from peer_adapters import ADAPTERS, Adapter, Data, missing
from peer_report import (
    QUICK,
    WORKLOADS,
    Load,
    Row,
    Run,
    Sizes,
    chart,
    report,
    rows_from,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS_CHART = os.path.join(ROOT, "docs", "images", "peers.png")


def event(n: int) -> Data:
    return {"text": "x" * 480, "n": n}


# -- the workloads ------------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _async_writer(a: Adapter, key: str, n: int, out: list[float]) -> None:
    for k in range(n):
        data = event(k)
        t0 = time.perf_counter()
        await a.aappend(key, data)
        out.append(time.perf_counter() - t0)


def _sync_writer(a: Adapter, key: str, n: int, out: list[float]) -> None:
    for k in range(n):
        data = event(k)
        t0 = time.perf_counter()
        a.append(key, data)
        out.append(time.perf_counter() - t0)


async def _in_loop(a: Adapter, keys: list[str], n: int, out: list[list[float]]) -> float:
    await a.astart()
    try:
        began = time.perf_counter()
        async with asyncio.TaskGroup() as tasks:
            for key, lat in zip(keys, out, strict=True):
                tasks.create_task(_async_writer(a, key, n, lat))
        return time.perf_counter() - began
    finally:
        await a.astop()


async def _via_threads(a: Adapter, keys: list[str], n: int, out: list[list[float]]) -> float:
    async def writer(key: str, lat: list[float]) -> None:
        for k in range(n):
            data = event(k)
            t0 = time.perf_counter()
            await asyncio.to_thread(a.append, key, data)
            lat.append(time.perf_counter() - t0)

    began = time.perf_counter()
    async with asyncio.TaskGroup() as tasks:
        for key, lat in zip(keys, out, strict=True):
            tasks.create_task(writer(key, lat))
    return time.perf_counter() - began


def _threads(a: Adapter, keys: list[str], n: int, out: list[list[float]]) -> float:
    errors: list[BaseException] = []
    start = threading.Barrier(len(keys) + 1)

    def body(key: str, lat: list[float]) -> None:
        try:
            start.wait()
            if a.has_sync:
                _sync_writer(a, key, n, lat)
            else:  # an asyncio-only API: an event loop in each thread
                asyncio.run(_async_writer(a, key, n, lat))
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=body, args=(k, lat)) for k, lat in zip(keys, out, strict=True)
    ]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - began


def api_of(a: type[Adapter], workload: str) -> str | None:
    """Which API of ``a`` the workload uses (None: the workload does not apply)."""
    if workload == "single":
        return "sync" if a.has_sync else "asyncio"
    if workload == "single-async":
        return "asyncio" if a.has_async and a.has_sync else None
    if workload == "threads":
        return "sync" if a.has_sync else "asyncio, a loop per thread"
    return "asyncio" if a.has_async else "sync via asyncio.to_thread"


def run_workload(cls: type[Adapter], workload: str, sizes: Sizes, directory: str) -> Run:
    a = cls()
    a.open(directory)
    try:
        if workload.startswith("single"):
            keys, n = [a.new_session(0)], sizes.single
        else:
            keys = [a.new_session(i) for i in range(sizes.writers)]
            n = sizes.per_writer
        out: list[list[float]] = [[] for _ in keys]
        if workload == "single" and a.has_sync:
            began = time.perf_counter()
            _sync_writer(a, keys[0], n, out[0])
            elapsed = time.perf_counter() - began
        elif workload.startswith("single") or (workload == "tasks" and a.has_async):
            elapsed = asyncio.run(_in_loop(a, keys, n, out))
        elif workload == "tasks":
            elapsed = asyncio.run(_via_threads(a, keys, n, out))
        else:
            elapsed = _threads(a, keys, n, out)
        expected = [event(k) for k in range(n)]
        for key in keys:  # every session holds exactly what was appended, in order
            got = a.load(key)
            if got != expected:
                raise AssertionError(f"{cls.name}: read back {len(got)} events, not the {n} given")
    finally:
        a.close()
    lat = [x for each in out for x in each]
    api = api_of(cls, workload)
    assert api is not None
    p50, p99 = _pct(lat, 0.5) * 1e3, _pct(lat, 0.99) * 1e3
    return Run(len(lat) / elapsed, p50, p99, api, len(lat), a.retries)


def prefill(cls: type[Adapter], sizes: Sizes, directory: str) -> tuple[str, float]:
    """A session of ``sizes.load`` events in ``directory``; (its key, bytes on disk per event)."""
    where = directory
    if cls.prefill_on_tmpfs and os.path.isdir("/dev/shm"):
        where = tempfile.mkdtemp(prefix="threadlog-peers-", dir="/dev/shm")
    try:
        a = cls()
        a.open(where)
        try:
            key = a.new_session(0)
            a.prefill(key, [event(k) for k in range(sizes.load)])
        finally:
            a.close()
        if where != directory:  # the same files, written without waiting for the disk
            shutil.copytree(where, directory, dirs_exist_ok=True)
    finally:
        if where != directory:
            shutil.rmtree(where, ignore_errors=True)
    total = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(directory) for f in files
    )
    return key, total / sizes.load


def cold_load(cls: type[Adapter], directory: str, key: str, events: int) -> Load:
    """Load the session in a fresh process (`child`)."""
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        cls.__name__,
        directory,
        key,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{cls.name}: the cold load failed: {done.stderr.strip()[-400:]}")
    figures = json.loads(done.stdout)
    if figures["events"] != events:
        raise AssertionError(f"{cls.name}: loaded {figures['events']} events, not {events}")
    return Load(**figures)


def peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM: getrusage's ru_maxrss survives exec on Linux, so a
    child would report its parent's peak)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(name: str, directory: str, key: str) -> None:
    """In the fresh process: import the peer, open its store, load the session, check it."""
    import importlib

    cls: type[Adapter] = getattr(peer_adapters, name)
    t0 = time.perf_counter()
    for module in cls.modules:
        importlib.import_module(module)
    t1 = time.perf_counter()
    a = cls()
    a.open(directory)
    a.session(key)
    got = a.load(key)
    t2 = time.perf_counter()
    a.close()
    for k, data in enumerate(got):
        if data != event(k):
            raise AssertionError(f"event {k} read back differs")
    rss_mb = peak_rss_mb()
    print(
        json.dumps(
            {
                "import_s": t1 - t0,
                "load_s": t2 - t1,
                "rss_mb": rss_mb,
                "events": len(got),
            }
        )
    )


def measure(
    chosen: list[type[Adapter]], sizes: Sizes, workdir: str, workloads: Sequence[str] = WORKLOADS
) -> list[Row]:
    rows = {c.name: Row(c.name, c.setting, c.durable, missing(c)) for c in chosen}
    ready = [c for c in chosen if rows[c.name].missing is None]
    stored: dict[str, tuple[str, str]] = {}
    for c in ready:  # the 50,000-event sessions, written once
        if c.durable:
            d = tempfile.mkdtemp(prefix="load-", dir=workdir)
            try:
                key, per_event = prefill(c, sizes, d)
                stored[c.name] = (d, key)
                rows[c.name].bytes_per_event = per_event
            except Exception as exc:
                rows[c.name].errors.append(f"load set-up: {exc!r}")
    for r in range(sizes.rounds):
        order = ready[r % len(ready) :] + ready[: r % len(ready)] if ready else []
        for workload in workloads:
            for c in order:
                if api_of(c, workload) is None:
                    continue
                d = tempfile.mkdtemp(prefix="run-", dir=workdir)
                try:
                    got = run_workload(c, workload, sizes, d)
                    rows[c.name].runs.setdefault(workload, []).append(got)
                    print(
                        f"  round {r + 1} {workload:12} {c.name:34} {got.rate:9,.0f}/s",
                        file=sys.stderr,
                    )
                except Exception as exc:
                    rows[c.name].errors.append(f"{workload}, round {r + 1}: {exc!r}"[:300])
                finally:
                    shutil.rmtree(d, ignore_errors=True)
        for c in order:
            if c.name in stored:
                d, key = stored[c.name]
                try:
                    rows[c.name].loads.append(cold_load(c, d, key, sizes.load))
                except Exception as exc:
                    rows[c.name].errors.append(f"load, round {r + 1}: {exc!r}"[:300])
    return list(rows.values())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny counts, 1 round (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--rounds", type=int, help="rounds (default 3)")
    parser.add_argument("--chart", help="the PNG to write (default: docs/images/peers.png)")
    parser.add_argument("--no-chart", action="store_true")
    parser.add_argument("--only", action="append", help="a store's class name (repeatable)")
    parser.add_argument(
        "--load-only",
        action="store_true",
        help="only the cold loads, one per store a round (e.g. --rounds 10 for a tighter median)",
    )
    parser.add_argument("--dir", help="work in this directory (default: a temporary one)")
    parser.add_argument("--save", help="also write the figures as JSON to this file")
    parser.add_argument("--replot", help="redraw the report and chart from a --save file")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    if args.replot:
        with open(args.replot) as f:
            rows, sizes = rows_from(json.load(f))
        print(report(rows, sizes))
        chart(rows, sizes, args.chart or DOCS_CHART)
        return
    sizes = QUICK if args.quick else Sizes()
    if args.rounds:
        sizes.rounds = args.rounds
    chosen = [c for c in ADAPTERS if not args.only or c.__name__ in args.only or c is ADAPTERS[0]]
    with sqlite3.connect(":memory:") as conn:
        synchronous = conn.execute("PRAGMA synchronous").fetchone()[0]
    workdir = tempfile.mkdtemp(prefix="threadlog-peers-", dir=args.dir)
    try:
        rows = measure(chosen, sizes, workdir, () if args.load_only else WORKLOADS)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    figures = {"sizes": sizes.__dict__, "sqlite_default_synchronous": synchronous}
    figures["rows"] = [dataclasses.asdict(r) for r in rows]
    if args.save:
        with open(args.save, "w") as f:
            json.dump(figures, f, indent=2)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(report(rows, sizes))
        print(f"\nSQLite {sqlite3.sqlite_version}, default synchronous={synchronous} (2 = FULL)")
    if not args.no_chart and (args.chart or not args.quick):  # a smoke run keeps the docs' one
        chart(rows, sizes, args.chart or DOCS_CHART)
    ci = os.environ.get("CI", "").lower() == "true"
    if any(r.errors for r in rows) or (ci and any(r.missing for r in rows)):
        sys.exit(1)


if __name__ == "__main__":
    main()
