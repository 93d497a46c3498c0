"""Benchmark a worker's scan for work (`threadlog.runtime.takeover.waiting_threads`).

A `threadlog worker` looks for new work every ``--poll`` seconds. This builds a store of
``--threads`` idle threads (``--records`` records each, nothing to do) and times the scan
three times without memory and three times with the ``checked`` memory a `Worker` keeps
between polls (the first of those reads every thread once; then only the threads whose log
grew are read again). The store lives in a temporary directory (``--dir`` to choose where),
or on PostgreSQL with ``--store postgresql://…`` (a fresh schema is the caller's to give).

Usage::

    .venv/bin/python benchmarks/bench_worker_scan.py                 # 2,000 threads
    .venv/bin/python benchmarks/bench_worker_scan.py --threads 10000
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

from threadlog import open_store
from threadlog.runtime.takeover import waiting_threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2000)
    parser.add_argument("--records", type=int, default=20)
    parser.add_argument("--dir", help="where to put the store (a temporary directory)")
    parser.add_argument("--store", help="a postgresql:// URL instead of a directory")
    args = parser.parse_args()
    work = None if args.store else tempfile.mkdtemp(prefix="bench-scan-", dir=args.dir)
    target = args.store or f"{work}/store"
    try:
        with open_store(target) as store:
            for _ in range(args.threads):
                thread = store.create_thread("bench")
                for k in range(args.records):
                    store.append(thread, "custom.bench", {"k": k}, durable=False)
            store.flush()
        with open_store(target) as store:
            plain = []
            for _ in range(3):
                start = time.perf_counter()
                assert waiting_threads(store) == []
                plain.append(time.perf_counter() - start)
            checked: dict[str, int] = {}
            remembered = []
            for _ in range(3):
                start = time.perf_counter()
                assert waiting_threads(store, checked=checked) == []
                remembered.append(time.perf_counter() - start)
        print(f"{args.threads:,} idle threads of {args.records} records each")
        print("scan, every thread read: " + " / ".join(f"{t:.3f}" for t in plain) + " s")
        print(
            "scan with the worker's memory (first, then later polls): "
            + " / ".join(f"{t:.3f}" for t in remembered)
            + " s"
        )
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
