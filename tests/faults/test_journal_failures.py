"""The journal and recovery under failures a review found (each test failed before its fix).

Scenarios: a checkpoint racing a release; an fsync error while a thread is released; a failed
eviction; mid-log damage when a dead journal exists; a store opening while another one holds a
thread of a dead journal.
"""

from __future__ import annotations

import errno
import logging
import os
import random
import shutil
import threading
import time
from typing import TYPE_CHECKING

import pytest

from threadlog import EmbeddedStore, IntegrityError, LeaseHeld, StorageError
from threadlog.store._fileops import FileOps
from threadlog.testing.crashsim import CrashSimFS, Sync, Unlink

if TYPE_CHECKING:
    from pathlib import Path

COMMIT_INTERVAL = 3600.0
"""The background committer never runs on its own: every write comes from the test."""


@pytest.fixture(autouse=True)
def _quiet() -> None:
    logging.getLogger("threadlog.store").setLevel(logging.CRITICAL)


def kill(store: EmbeddedStore) -> None:
    """kill -9 of a store in this process: no sync, no checkpoint; its locks go away."""
    store._closed = True
    store._committer.stop(timeout=None)
    journal = store._journal
    if journal._fd is not None:
        os.close(journal._fd)
        journal._fd = None
    journal.closed = True
    for thread_id, rollout in list(store._logs.items()):
        rollout.closed = True
        os.close(rollout.fd)
        store._writers.leases.pop(thread_id).release()
    store._logs.clear()


def power_cut(fs: CrashSimFS, dest: Path) -> str:
    """What a power cut leaves now: only what was synced. Returns the image's home."""
    shutil.rmtree(dest, ignore_errors=True)
    fs.disk.materialize(fs.disk.durable_state(), str(dest))
    return str(dest / "home")


def hashes(home: str, thread: str) -> list[str]:
    with EmbeddedStore(home, commit_interval=COMMIT_INTERVAL) as store:
        return [r.hash for r in store.read(thread)]


def journal_acknowledged(store: EmbeddedStore) -> tuple[str, str, list[str]]:
    """Two threads whose ord 2 is acknowledged by one journal commit (so the rollout copies
    are not synced); returns them and the first thread's acknowledged hashes."""
    t, u = store.create_thread("p"), store.create_thread("p")
    first = store.read(t, limit=1)[0].hash
    record = store.append(t, "custom.x", {"i": 1}, durable=False)
    store.append(u, "custom.x", {"i": 1}, durable=False)
    store.flush()
    return t, u, [first, record.hash]


def test_a_checkpoint_during_a_release_syncs_the_closing_rollout(tmp_path: Path) -> None:
    class Gate(CrashSimFS):
        gate: object = None

        def fdatasync(self, fd: int) -> None:
            path = self._fd_path(fd)
            if self.gate is not None and path is not None and path.endswith(".wal"):
                gate, self.gate = self.gate, None
                gate()  # type: ignore[operator]
            super().fdatasync(fd)

    (tmp_path / "a").mkdir()
    fs = Gate(str(tmp_path / "a"))
    store = EmbeddedStore(str(tmp_path / "a" / "home"), commit_interval=COMMIT_INTERVAL, fops=fs)
    try:
        t, u, acknowledged = journal_acknowledged(store)
        store._journal._rotate_bytes = 1  # the next journal commit checkpoints
        rollout = store._logs[t]
        releaser = threading.Thread(target=store.release, args=(t,))

        def gate() -> None:  # release(t) marks t closed, then waits for the committing leader
            releaser.start()
            while not rollout.closed:
                time.sleep(0.001)
            time.sleep(0.05)

        fs.gate = gate
        store.append(t, "custom.x", {"i": 2}, durable=False)
        store.append(u, "custom.x", {"i": 2}, durable=True)  # commits, then checkpoints
        releaser.join()
        trace = fs.trace
        unlinked = next(
            i for i, op in enumerate(trace) if isinstance(op, Unlink) and op.name.endswith(".wal")
        )
        name = os.path.basename(store.path_of(t))
        synced = next(
            i
            for i, op in enumerate(trace)
            if i > unlinked and isinstance(op, Sync) and op.path.endswith(name)
        )
        ((_, disk),) = fs.replay([synced])  # the power goes just before release's own fsync
        disk.materialize(disk.durable_state(), str(tmp_path / "img"))
    finally:
        store.close()
    assert hashes(str(tmp_path / "img" / "home"), t)[:2] == acknowledged


def test_an_fsync_error_while_releasing_stops_the_store_and_keeps_the_journal(
    tmp_path: Path,
) -> None:
    class EioOnce(CrashSimFS):
        target: str | None = None

        def fsync(self, fd: int) -> None:
            if self.target is not None and self._fd_path(fd) == self.target:
                self.target = None
                raise OSError(errno.EIO, "injected EIO")
            super().fsync(fd)

    (tmp_path / "a").mkdir()
    fs = EioOnce(str(tmp_path / "a"))
    store = EmbeddedStore(str(tmp_path / "a" / "home"), commit_interval=COMMIT_INTERVAL, fops=fs)
    t, u, acknowledged = journal_acknowledged(store)
    fs.target = store.path_of(t)
    with pytest.raises(StorageError, match="stopped acknowledging"):
        store.release(t)
    with pytest.raises(StorageError):
        store.append(u, "custom.x", {"i": 2}, durable=True)  # fail-stop
    with EmbeddedStore(str(tmp_path / "a" / "home")) as other, pytest.raises(LeaseHeld):
        other.append(t, "custom.x", {})  # the lease is kept while the journal holds t
    store.close()
    assert os.listdir(tmp_path / "a" / "home" / "journal")  # left for the next open to replay
    assert hashes(power_cut(fs, tmp_path / "img"), t)[:2] == acknowledged


def test_a_failed_eviction_fails_appends_instead_of_spinning(tmp_path: Path) -> None:
    class FailWrite(FileOps):
        armed = False

        def write(self, fd: int, data: bytes | memoryview) -> int:
            if self.armed:
                self.armed = False
                raise OSError(errno.EIO, "injected EIO")
            return super().write(fd, data)

    fops = FailWrite()
    with EmbeddedStore(
        str(tmp_path / "home"), commit_interval=COMMIT_INTERVAL, fops=fops, max_open_threads=2
    ) as store:
        t1, t2, _ = (store.create_thread("p") for _ in range(3))  # the third evicts t1
        fops.armed = True
        with pytest.raises(StorageError):
            store.append(t2, "custom.x", {}, durable=True)
        with pytest.raises(StorageError):
            store.acquire(t1)  # evicting a victim fails: it stays registered, closed
        (victim,) = [tid for tid, rollout in store._logs.items() if rollout.closed]
        outcome: list[BaseException | None] = []

        def append() -> None:
            try:
                store.append(victim, "custom.x", {}, durable=True)
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        worker = threading.Thread(target=append, daemon=True)
        worker.start()
        worker.join(5)
        assert outcome and isinstance(outcome[0], StorageError)


def _damaged_at_ord_11(tmp_path: Path, retire_after: int) -> tuple[str, str, str, bytes]:
    """A thread of 21 records whose store was killed, its rollout then damaged at ord 11.
    The store retired its journal (a checkpoint: the rollouts synced) after the first
    ``retire_after`` appends, so the dead journal holds the records after those."""
    home = str(tmp_path / "home")
    store = EmbeddedStore(home, commit_interval=COMMIT_INTERVAL)
    t = store.create_thread("p")
    for i in range(1, 21):
        if i == retire_after + 1:
            with store._journal._mutex:  # (as at 64 MiB of journal)
                store._journal._checkpoint(reopen=True)
        store.append(t, "custom.x", {"i": i}, durable=True)
    path = store.path_of(t)
    kill(store)  # the journal stays behind, dead
    with open(path, "rb") as f:
        data = bytearray(f.read())
    data[sum(len(line) + 1 for line in data.split(b"\n")[:10]) + 40] ^= 0x01  # media damage
    with open(path, "wb") as f:
        f.write(data)
    return home, t, path, bytes(data)


def test_mid_log_damage_is_refused_even_with_a_dead_journal(tmp_path: Path) -> None:
    """The dead journal holds ords 17 to 21: it cannot be chained on a log damaged at 11."""
    home, t, path, data = _damaged_at_ord_11(tmp_path, retire_after=15)
    with EmbeddedStore(home, commit_interval=COMMIT_INTERVAL) as reopened:
        with pytest.raises(IntegrityError) as info:
            reopened.acquire(t)
        assert info.value.ord == 11
    assert os.path.getsize(path) == len(data)  # nothing truncated


def test_mid_log_damage_a_dead_journal_covers_is_restored_from_it(tmp_path: Path) -> None:
    """The dead journal holds ords 6 to 21, acknowledged through it: the open restores the
    rollout from ord 6 on from there (a page a power cut garbled is the same case)."""
    home, t, _, _ = _damaged_at_ord_11(tmp_path, retire_after=4)
    with EmbeddedStore(home, commit_interval=COMMIT_INTERVAL) as reopened:
        reopened.acquire(t)
        assert [r.data["i"] for r in reopened.read(t, after=1)] == list(range(1, 21))
        assert reopened.verify(t).ok


def test_a_journal_is_kept_while_another_store_holds_one_of_its_threads(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    fs = CrashSimFS(str(tmp_path / "a"))
    home = str(tmp_path / "a" / "home")
    a = EmbeddedStore(home, commit_interval=COMMIT_INTERVAL, fops=fs)
    b = EmbeddedStore(home, commit_interval=COMMIT_INTERVAL, fops=fs)  # another process
    t, _, acknowledged = journal_acknowledged(a)
    kill(a)
    seen: dict[str, object] = {}
    replay = b._recovery.recover_thread

    def paused(thread_id: str, path: str) -> object:
        # b holds t's lease and has not replayed it yet; a third store opens meanwhile
        c = EmbeddedStore(home, commit_interval=COMMIT_INTERVAL, fops=fs)
        seen["journals"] = os.listdir(os.path.join(home, "journal"))
        seen["image"] = power_cut(fs, tmp_path / "img")
        kill(c)
        return replay(thread_id, path)

    b._recovery.recover_thread = paused  # type: ignore[method-assign,assignment]
    b.acquire(t)
    b.close()
    assert seen["journals"]
    assert hashes(str(seen["image"]), t)[:2] == acknowledged


@pytest.mark.parametrize("seed", [1, 2])
def test_concurrent_appends_evictions_rotations_and_releases_survive_a_power_cut(
    tmp_path: Path, seed: int
) -> None:
    """Four appending threads over eight threads, three open at most (evictions), a journal
    that rotates every few KiB, random releases; then a power cut at every sync point: every
    acknowledged record is present."""
    (tmp_path / "a").mkdir()
    fs = CrashSimFS(str(tmp_path / "a"))
    store = EmbeddedStore(
        str(tmp_path / "a" / "home"), commit_interval=0.005, fops=fs, max_open_threads=3
    )
    store._journal._rotate_bytes = 3000
    threads = [store.create_thread("p") for _ in range(8)]
    acks = [(fs.mark("create"), t, 1, store.read(t, limit=1)[0].hash) for t in threads]
    lock = threading.Lock()

    def work(worker: int) -> None:
        rng = random.Random(seed * 100 + worker)
        for i in range(60):
            durable = rng.random() < 0.5
            record = store.append(
                rng.choice(threads),
                "custom.x",
                {"w": worker, "i": i, "pad": "x" * rng.randint(10, 300)},
                durable=durable,
            )
            if durable:
                with lock:
                    acks.append((fs.mark("ack"), record.thread, record.ord, record.hash))
            if rng.random() < 0.05:
                store.release(rng.choice(threads))

    workers = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    store.close()
    lost = []
    for point, disk in fs.replay(fs.points()):
        image = tmp_path / "img"
        shutil.rmtree(image, ignore_errors=True)
        disk.materialize(disk.durable_state(), str(image))
        with EmbeddedStore(str(image / "home"), commit_interval=COMMIT_INTERVAL) as check:
            for position, thread, ord_, digest in acks:
                if position >= point:
                    continue
                have = [r.hash for r in check.read(thread)]
                if ord_ > len(have) or have[ord_ - 1] != digest:
                    lost.append(f"point {point}: {thread} ord {ord_}")
    assert not lost, lost[:5]


def test_a_half_created_journal_of_a_dead_process_is_swept(tmp_path: Path, dead_pid: str) -> None:
    home = tmp_path / "home"
    with EmbeddedStore(str(home)):
        pass
    orphan = home / "journal" / f".{dead_pid}-00ff.{dead_pid}.tmp"
    orphan.parent.mkdir(exist_ok=True)
    orphan.write_bytes(b"")
    mine = home / "journal" / f".{os.getpid()}-00ff.{os.getpid()}.tmp"
    mine.write_bytes(b"")  # a live writer's: left alone
    with EmbeddedStore(str(home)):
        assert not orphan.exists() and mine.exists()


def test_two_releases_of_one_thread_and_an_append_never_meet_the_stores_own_lease(
    tmp_path: Path,
) -> None:
    """Two concurrent releases of a thread: the second used to clear the first's "being
    released" mark, so an append racing them reopened the thread while the first still held
    its lease, and failed with LeaseHeld from its own process."""
    store = EmbeddedStore(str(tmp_path / "home"), commit_interval=0.005)
    thread = store.create_thread("p")
    failures: list[BaseException] = []

    def releaser() -> None:
        for _ in range(200):
            store.release(thread)

    def appender() -> None:
        try:
            for i in range(300):
                store.append(thread, "custom.x", {"i": i}, durable=i % 3 == 0)
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=releaser) for _ in range(2)]
    workers.append(threading.Thread(target=appender))
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    store.close()
    assert failures == []
