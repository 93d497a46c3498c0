"""A crash-test workload: append critical records and acknowledge each one on stdout.

Run as ``python -m tests.harness.workload --home DIR --seed N [--threads K] [--events M]
[--async]``. It opens the store at ``DIR``, creates ``K`` threads (or reuses the ones listed in
``DIR/workload-threads.txt`` by an earlier run, creating only the missing ones) and appends
``custom.workload`` records with ``durable=True`` until it is killed, or until each thread has
had ``M`` records appended by this run. After every append *returns* it writes one line::

    ACK <thread_id> <ord> <record hash>

to stdout and flushes it, so a parent that reads the pipe knows exactly which records were
acknowledged before it killed the process (ALICE's "stdout" barrier, RELIABILITY section 2).
The ``thread.created`` record of a new thread is acknowledged the same way (ord 1).

Record data is derived from ``(seed, thread, n)`` alone (`payload`), so a checker can confirm
that a stored record is byte-identical to what was appended without keeping the payloads.

Writers: without ``--async``, one OS thread per store thread calls `EmbeddedStore.append`
(their commits share fsyncs through the journal's leader/follower group commit). With
``--async``, ``--tasks`` asyncio tasks per thread call `EmbeddedStore.aappend` concurrently.

A ``faulthandler`` watchdog dumps every stack and exits if no append completes for 60 s.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import os
import random
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from threadlog.model.ids import is_uuid
from threadlog.store.embedded import EmbeddedStore

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["THREADS_FILE", "WORKLOAD_TYPE", "main", "payload"]

WORKLOAD_TYPE = "custom.workload"
"""The event type of every record the workload appends."""

THREADS_FILE = "workload-threads.txt"
"""The file in the store's home listing the workload's threads, one id per line."""

WATCHDOG_SECONDS = 60.0


def payload(seed: int, thread_id: str, n: int) -> dict[str, Any]:
    """The data of the ``n``-th workload record of ``thread_id`` for ``seed``: 100-2000 bytes
    of JSON, a pure function of its arguments."""
    rng = random.Random(f"threadlog-workload/{seed}/{thread_id}/{n}")
    size = rng.randint(64, 1950)
    return {"seed": seed, "n": n, "pad": rng.randbytes((size + 1) // 2).hex()[:size]}


class _Acker:
    """Writes ACK lines (one ``write`` each, under a lock) and re-arms the watchdog."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed = 0.0
        self.count = 0

    def arm(self) -> None:
        faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True)
        self._armed = time.monotonic()

    def ack(self, thread_id: str, ord_: int, digest: str) -> None:
        line = f"ACK {thread_id} {ord_} {digest}\n"
        with self._lock:
            sys.stdout.write(line)
            sys.stdout.flush()
            self.count += 1
            if time.monotonic() - self._armed > 1.0:
                self.arm()


def _load_threads(store: EmbeddedStore, home: str) -> list[str]:
    path = os.path.join(home, THREADS_FILE)
    try:
        with open(path, encoding="ascii") as f:
            names = [line.strip() for line in f]
    except FileNotFoundError:
        return []
    return [t for t in names if is_uuid(t) and store.exists(t)]


def _save_threads(home: str, threads: Sequence[str]) -> None:
    """Replace the threads file atomically (tmp, fsync, rename, fsync dir)."""
    path = os.path.join(home, THREADS_FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write("".join(f"{t}\n" for t in threads))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(home, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_threads(store: EmbeddedStore, home: str, count: int, acker: _Acker) -> list[str]:
    """The workload's threads: those of an earlier run, plus new ones up to ``count``."""
    threads = _load_threads(store, home)[:count]
    while len(threads) < count:
        thread_id = store.create_thread("workload", title=f"workload {len(threads)}")
        first = store.read(thread_id, limit=1)[0]
        acker.ack(thread_id, first.ord, first.hash)
        threads.append(thread_id)
        _save_threads(home, threads)
    return threads


def run_sync(
    store: EmbeddedStore, threads: Sequence[str], seed: int, events: int | None, acker: _Acker
) -> None:
    """One writer OS thread per store thread, each appending critical records in a loop."""
    failures: list[BaseException] = []

    def writer(thread_id: str) -> None:
        n = 0
        try:
            while events is None or n < events:
                record = store.append(
                    thread_id, WORKLOAD_TYPE, payload(seed, thread_id, n), durable=True
                )
                acker.ack(thread_id, record.ord, record.hash)
                n += 1
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    workers = [
        threading.Thread(target=writer, args=(t,), name=f"writer-{i}", daemon=True)
        for i, t in enumerate(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if failures:
        raise failures[0]


async def run_async(
    store: EmbeddedStore,
    threads: Sequence[str],
    seed: int,
    events: int | None,
    acker: _Acker,
    tasks_per_thread: int,
) -> None:
    """``tasks_per_thread`` asyncio tasks per store thread, all awaiting `aappend`."""
    counters = dict.fromkeys(threads, 0)

    async def writer(thread_id: str) -> None:
        while events is None or counters[thread_id] < events:
            n = counters[thread_id]
            counters[thread_id] = n + 1
            record = await store.aappend(
                thread_id, WORKLOAD_TYPE, payload(seed, thread_id, n), durable=True
            )
            acker.ack(thread_id, record.ord, record.hash)

    async with asyncio.TaskGroup() as group:
        for thread_id in threads:
            for _ in range(tasks_per_thread):
                group.create_task(writer(thread_id))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.harness.workload",
        description="Append critical records and print 'ACK <thread> <ord> <hash>' per append.",
    )
    parser.add_argument("--home", required=True, help="the store's directory")
    parser.add_argument("--seed", type=int, required=True, help="seed of the record data")
    parser.add_argument("--threads", type=int, default=3, help="threads to write (default 3)")
    parser.add_argument(
        "--events", type=int, default=None, help="records per thread, then exit (default: forever)"
    )
    parser.add_argument("--async", dest="use_async", action="store_true", help="use aappend")
    parser.add_argument(
        "--tasks", type=int, default=3, help="asyncio tasks per thread with --async (default 3)"
    )
    args = parser.parse_args(argv)
    if args.threads < 1 or args.tasks < 1 or (args.events is not None and args.events < 0):
        parser.error("--threads and --tasks must be >= 1 and --events >= 0")

    acker = _Acker()
    acker.arm()
    home = os.path.abspath(args.home)
    with EmbeddedStore(home) as store:
        threads = open_threads(store, home, args.threads, acker)
        if args.use_async:
            asyncio.run(run_async(store, threads, args.seed, args.events, acker, args.tasks))
        else:
            run_sync(store, threads, args.seed, args.events, acker)
    faulthandler.cancel_dump_traceback_later()
    sys.stdout.write("DONE\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
