"""Regressions from a review of the issue 9 work, each a race or a hole found with a repro.

- a reader beside a busy writer took the writer's newer *acknowledged* mark for lost records
  (the mark must be read before the durable end that bounds the read);
- a `read(after=k)` served from a snapshot skipped the acknowledged check;
- the first record of a new thread could be committed before its lease could publish it;
- two stores opening a new home at once made two secrets (the loser's journals refused);
- a FIFO planted at a lease notice or a blob path hung reads and store opens.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from threadlog import EmbeddedStore, IntegrityError
from threadlog.store._fileops import DEFAULT_FILEOPS
from threadlog.store._perms import load_secret

WRITER = """
import sys, time
from threadlog import EmbeddedStore
home, thread, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
with EmbeddedStore(home, commit_interval=0.001) as store:
    print("ready", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        store.append(thread, "custom.x", {"i": 1}, durable=True)
"""


def test_a_reader_beside_a_busy_writer_sees_no_false_loss(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path) as store:
        thread = store.create_thread("tester")
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path), thread, "2.0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
        reads, false_alarms = 0, []
        with EmbeddedStore(tmp_path, catch_up=False) as reader:
            while writer.poll() is None:
                try:
                    reader.read(thread)
                    reader.verify(thread, check_events=False)
                    reads += 1
                except IntegrityError as exc:
                    false_alarms.append(str(exc))
        assert writer.wait(30) == 0
    finally:
        writer.kill()
        writer.wait()
        if writer.stdout is not None:
            writer.stdout.close()
    assert false_alarms == [], false_alarms[:3]
    assert reads > 0
    with EmbeddedStore(tmp_path) as store:  # and catch-up marked nothing damaged
        assert store.verify(thread).ok
        assert store.thread_info(thread).damage is None


def test_a_read_after_a_snapshot_still_checks_what_was_acknowledged(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path) as store:
        thread = store.create_thread("tester")
        records = [store.append(thread, "custom.x", {"i": i}) for i in range(5)]
        anchor = records[1]
        assert store.save_snapshot(thread, b"state", ord=anchor.ord, hash=anchor.hash, version="1")
        path = Path(store.path_of(thread))
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:-2]))
    with EmbeddedStore(tmp_path, catch_up=False) as store, pytest.raises(IntegrityError):
        store.read(thread, after=anchor.ord)


def test_a_new_threads_first_record_is_published_whoever_commits_it(tmp_path: Path) -> None:
    """The background committer may commit ``thread.created`` before `create_thread` has
    registered the thread: the lease must still publish it to other processes' readers."""
    store = EmbeddedStore(tmp_path, commit_interval=0.01)
    try:
        store.create_thread("tester")
        created: list[str] = []
        with store._writers.lock:  # a slow open of another thread holds the lock meanwhile
            worker = threading.Thread(target=lambda: created.append(store.create_thread("t")))
            worker.start()
            time.sleep(0.3)
        worker.join(10)
        with EmbeddedStore(tmp_path, catch_up=False) as other:
            assert other.durable_end(created[0]) == os.path.getsize(store.path_of(created[0]))
            assert [r.type for r in other.read(created[0])] == ["thread.created"]
    finally:
        store.close()


def test_stores_opening_a_new_home_at_once_share_one_secret(tmp_path: Path) -> None:
    for attempt in range(10):
        home = tmp_path / f"home{attempt}"
        home.mkdir(mode=0o700)
        start = threading.Barrier(4)
        secrets: list[bytes] = []

        def load(
            home: Path = home, start: threading.Barrier = start, found: list[bytes] = secrets
        ) -> None:
            start.wait()
            found.append(load_secret(str(home), DEFAULT_FILEOPS)[0])

        workers = [threading.Thread(target=load) for _ in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(10)
        assert set(secrets) == {(home / "secret").read_bytes()}, attempt


def test_fifos_planted_in_a_home_hang_nothing(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path) as store:
        thread = store.create_thread("tester")
        ref = store.artifacts.put(b"x" * 10)
        blob = Path(store.artifacts.path(ref.sha256))
    blob.unlink()
    os.mkfifo(blob, 0o600)
    os.mkfifo(tmp_path / "locks" / f"{thread}.lock", 0o600)
    done: list[object] = []

    def use() -> None:
        with EmbeddedStore(tmp_path) as store:
            done.append(len(store.read(thread)))
            with pytest.raises(IntegrityError):
                store.artifacts.get(ref.sha256)
            store.artifacts.put(b"x" * 10)  # the planted FIFO is replaced by the real blob
            done.append(store.artifacts.get(ref.sha256))

    worker = threading.Thread(target=use, daemon=True)
    worker.start()
    worker.join(20)
    assert done == [1, b"x" * 10]
