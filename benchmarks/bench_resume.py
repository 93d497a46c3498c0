"""Resume and fork of a 100,000-event thread.

Builds a thread of N events (500 bytes of data each), closes a session on it once (which
saves a snapshot of the reduced state), then measures:

* ``Runtime.resume`` with the snapshot: open the store, take the lease, verify the snapshot's
  anchor record, reduce only the tail, append ``thread.resumed``;
* the same without a snapshot (the whole log read, verified and reduced), for comparison;
* ``EmbeddedStore.fork`` of the whole thread (the records inherited byte for byte and verified
  on the way, written atomically), and a fork of that fork after one record of its own (so
  its prefix was written by two threads: the first part verified against the lineage hash of
  the fork, the rest as the fork's own). After each fork the store indexes
  the new thread in a background thread (a full verified read, about a second of CPU for
  100,000 events); the benchmark waits for that (``store.flush()``, untimed) so that each fork
  is measured on a quiet store, as a user forking one thread would see it.

Usage::

    .venv/bin/python benchmarks/bench_resume.py [--events 100000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time

from threadlog import open_store
from threadlog.runtime import Runtime

PAYLOAD = {"text": "x" * 480, "n": 1}


async def resume_once(home: str, thread: str) -> float:
    start = time.perf_counter()
    async with Runtime(home) as runtime:
        session = await runtime.resume(thread, continue_work=False)
        elapsed = time.perf_counter() - start
        assert session.state.last_ord > 0
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="threadlog-bench-resume-")
    try:
        with open_store(home) as store:
            thread = store.create_thread("bench")
            for _ in range(args.events - 1):
                store.append(thread, "custom.bench", PAYLOAD, durable=False)
        # the first resume replays everything and, closing, saves a snapshot
        full = asyncio.run(resume_once(home, thread))
        with_snapshot = min(asyncio.run(resume_once(home, thread)) for _ in range(args.runs))
        with open_store(home) as store:
            store.index._db.execute("DELETE FROM snapshots")
        without = min(asyncio.run(resume_once(home, thread)) for _ in range(1))
        with open_store(home) as store:
            forks, refork = [], []
            for _ in range(args.runs):
                start = time.perf_counter()
                child = store.fork(thread)
                forks.append(time.perf_counter() - start)
                store.append(child, "custom.bench", PAYLOAD)  # untimed: a record of its own
                store.flush()  # untimed: the store indexes the new thread in the background
                start = time.perf_counter()
                store.fork(child)
                refork.append(time.perf_counter() - start)
                store.flush()
            size = store.thread_info(thread).bytes
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(f"thread: {args.events:,} events, {size / 1e6:.1f} MB; best of {args.runs}")
    print("")
    print("| operation | time | target |")
    print("|---|---|---|")
    print(f"| resume with a snapshot (tail only) | {with_snapshot:.3f} s | < 0.5 s |")
    print(
        f"| resume without a snapshot (whole log), for comparison | {min(without, full):.3f} s | |"
    )
    for name, times in (("fork the whole thread", forks), ("fork that fork", refork)):
        times.sort()
        print(
            f"| {name} (verified copy, atomic) | {times[0]:.3f} s "
            f"(median {times[len(times) // 2]:.3f}, worst {times[-1]:.3f}) | < 0.5 s |"
        )


if __name__ == "__main__":
    main()
