"""``threadlog show --tree`` on long and wide threads.

Builds a linear thread of N conversation messages (N/2 turns of four records: the user's
message, a step, the model's answer, the turn's end) and a thread whose first answer has B
branches, then times, interleaved, best and median of R rounds:

* ``entry_tree``: the log replayed and the entry tree found (what every tree view costs);
* ``render_tree``: the default view (elided around the active path to 60 lines);
* ``render_tree --all``: every entry worded;
* ``tree_json``: the tree as data (``show --tree --json``).

Usage::

    .venv/bin/python benchmarks/bench_cli_tree.py [--messages 5000] [--branches 50] [--rounds 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.cli.threads import branched, linear

from threadlog import open_store
from threadlog.cli._tree import entry_tree, render_tree, tree_json


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--branches", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="bench-tree-")
    try:
        with open_store(home) as store:
            long = store.read(linear(store, args.messages))
            wide = store.read(branched(store, args.branches))
        for name, records in (
            (f"{args.messages} messages", long),
            (f"{args.branches} branches", wide),
        ):
            cases = {
                "entry_tree": lambda r=records: entry_tree(r),
                "render_tree": lambda r=records: render_tree(r),
                "render_tree --all": lambda r=records: render_tree(r, everything=True),
                "tree_json": lambda r=records: tree_json(r),
            }
            times: dict[str, list[float]] = {k: [] for k in cases}
            for _ in range(args.rounds):
                for key, case in cases.items():
                    start = time.perf_counter()
                    case()
                    times[key].append(time.perf_counter() - start)
            for key, spent in times.items():
                print(
                    f"{name} ({len(records)} records) {key:<18} best {min(spent):.3f} s"
                    f"  median {statistics.median(spent):.3f} s"
                )
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
