"""Write many threads under a small open-files limit (issue 9, point 13a).

Sets ``RLIMIT_NOFILE`` to ``--limit`` (soft and hard, so the store cannot raise it), creates
``--threads`` threads in a fresh store, appends one record to each, appends again to the
first hundred (reopening them after their eviction), closes, and checks every thread in a
second store. The store's default ``max_open_threads`` (``limit // 4``) keeps the
descriptors it holds bounded.

    .venv/bin/python scripts/fd_limit.py --threads 10000 --limit 1024
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--limit", type=int, default=1024)
    args = parser.parse_args()
    resource.setrlimit(resource.RLIMIT_NOFILE, (args.limit, args.limit))

    from threadlog import open_store

    with tempfile.TemporaryDirectory() as home:
        started = time.perf_counter()
        with open_store(home) as store:
            open_threads = store.max_open_threads
            threads = [store.create_thread("p") for _ in range(args.threads)]
            for thread in threads:
                store.append(thread, "custom.x", {"i": 1}, durable=False)
            for thread in threads[:100]:
                store.append(thread, "custom.x", {"i": 2}, durable=True)
        written = time.perf_counter() - started
        with open_store(home) as store:
            found = store.thread_ids()
            assert len(found) == args.threads, (len(found), args.threads)
            records = sum(len(store.read(t)) for t in found)
            assert records == 2 * args.threads + 100, records
        print(
            f"{args.threads} threads under ulimit -n {args.limit} "
            f"(max_open_threads {open_threads}): written in {written:.1f} s, "
            f"{records} records checked"
        )


if __name__ == "__main__":
    main()
