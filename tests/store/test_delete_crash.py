"""A crash right after `delete_thread`, before the store's journal checkpoint: the dead
journal still holds the thread's records; the next open neither brings them back nor keeps
the journal or reports a problem."""

from __future__ import annotations

import os
import subprocess
import sys

from threadlog import open_store

CHILD = """
import os, sys, threading
from threadlog import open_store
store = open_store(sys.argv[1])
kept = store.create_thread("a")
gone = store.create_thread("a")

def write(thread):  # two writers at once: their batches span both threads (the journal)
    for n in range(300):
        store.append(thread, "custom.test.note", {"n": n})

workers = [threading.Thread(target=write, args=(t,)) for t in (kept, gone)]
for w in workers:
    w.start()
for w in workers:
    w.join()
assert store._journal.path is not None, "no batch went through the journal"
assert store.delete_thread(gone)
print(kept, gone, flush=True)
os._exit(0)  # no close: the journal stays behind, dead
"""


def test_a_crash_after_a_delete_does_not_bring_the_thread_back(home: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, home], capture_output=True, text=True, check=True
    ).stdout
    kept, gone = out.split()
    assert [n for n in os.listdir(os.path.join(home, "journal")) if n.endswith(".wal")]
    with open_store(home) as store:
        assert store.problems == []
        assert store.thread_ids() == [kept]
        assert store.deleted(gone) and not store.exists(gone)
        assert len(store.read(kept)) == 301
        assert store.verify(kept).ok
    assert not [n for n in os.listdir(os.path.join(home, "journal")) if n.endswith(".wal")]
