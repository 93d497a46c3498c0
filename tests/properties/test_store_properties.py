"""Property: whatever the operations and crashes, no acknowledged record is ever lost.

Hypothesis draws a sequence of operations on an `EmbeddedStore`: create a thread, append
critical or buffered records, flush, fork a thread at an ordinal (forks of forks too), release
a thread, close and reopen, and crash. A crash
is simulated by copying the store's files, as they are on disk at that moment, into a new home
while the store is still open, and opening a new store on the copy (the abandoned store is
closed afterwards; it writes only to its own home). Two kinds of crash:

* ``kill`` (kill -9): every written byte survives; what was only in the page cache is still
  not durable afterwards.
* ``power`` (power loss): each file keeps what an fsync made durable; of what was written
  after it, a random prefix survives, or a prefix followed by zeros (ext4 can persist an
  append's new size before its data, ALICE), or all of it with random 4 KiB pages lost.

To know what an fsync made durable, the store runs on a `TrackingFileOps` that records, per
file, the size at its last ``fsync``/``fdatasync``. The store's commit interval is made so
long that the background committer never writes on its own: every byte is written by an
operation of the test, so each example is deterministic.

Acknowledged means: a critical append returned (together with the buffered records queued
before it on the same thread), ``flush``/``release``/``close`` returned, or ``read``
returned the record (it promises durable records). After every reopen the checker asserts that
every acknowledged record is present with its hash, that records beyond them are a prefix of
what was queued (nothing invented), that ordinals are gap-free and that ``verify`` is ok.
"""

from __future__ import annotations

import os
import random
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threadlog import EmbeddedStore
from threadlog.store._fileops import FileOps

if TYPE_CHECKING:
    import pytest

COMMIT_INTERVAL = 3600.0
"""Long enough that the background committer never flushes during a test."""


class TrackingFileOps(FileOps):
    """File operations that remember how many bytes of each file an fsync made durable.

    ``durable`` maps absolute paths to sizes; files created through this object start at 0.
    Directory fsyncs are not modelled (directory entries count as durable at once).
    """

    def __init__(self, durable: dict[str, int] | None = None) -> None:
        self.durable: dict[str, int] = dict(durable or {})
        self._paths: dict[int, str] = {}
        self._lock = threading.Lock()

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        fd = super().open(path, flags, mode)
        with self._lock:
            self._paths[fd] = os.path.abspath(path)
            self.durable.setdefault(os.path.abspath(path), 0)
        return fd

    def _synced(self, fd: int) -> None:
        with self._lock:
            path = self._paths.get(fd)
            if path is not None:
                self.durable[path] = os.fstat(fd).st_size

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        self._synced(fd)

    def fdatasync(self, fd: int) -> None:
        super().fdatasync(fd)
        self._synced(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        super().ftruncate(fd, length)
        with self._lock:
            path = self._paths.get(fd)
            if path is not None:
                self.durable[path] = min(self.durable.get(path, 0), length)

    def rename(self, src: str, dst: str) -> None:
        super().rename(src, dst)
        with self._lock:
            self.durable[os.path.abspath(dst)] = self.durable.pop(os.path.abspath(src), 0)
            for fd, path in self._paths.items():
                if path == os.path.abspath(src):
                    self._paths[fd] = os.path.abspath(dst)

    def unlink(self, path: str) -> None:
        super().unlink(path)
        with self._lock:
            self.durable.pop(os.path.abspath(path), None)

    def close(self, fd: int) -> None:
        with self._lock:
            self._paths.pop(fd, None)
        super().close(fd)


def _store_files(home: Path) -> list[Path]:
    """The files a crash must preserve: rollouts, journals and the home's secret that keys
    their headers (the index is rebuildable)."""
    files = sorted((home / "threads").glob("*/*/*.jsonl"))
    if (home / "secret").is_file():
        files.append(home / "secret")
    if (home / "journal").is_dir():
        files += sorted(p for p in (home / "journal").iterdir() if p.is_file())
    return files


def crash_copy(
    home: Path, new_home: Path, fops: TrackingFileOps, kind: str, rng: random.Random
) -> dict[str, int]:
    """Copy ``home``'s files into ``new_home`` as a crash of ``kind`` leaves them; returns
    the durable sizes of the copies."""
    durable: dict[str, int] = {}
    for src in _store_files(home):
        rel = src.relative_to(home)
        data = src.read_bytes()
        synced = min(fops.durable.get(str(src), 0), len(data))
        dst = new_home / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if kind == "kill":
            dst.write_bytes(data)
            durable[str(dst)] = synced
        else:
            out = _power_loss(data, synced, rng)
            dst.write_bytes(out)
            durable[str(dst)] = len(out)
    return durable


PAGE = 4096


def _power_loss(data: bytes, synced: int, rng: random.Random) -> bytes:
    """What survives of a file whose first ``synced`` bytes were fsynced: the rest cut at a
    random point, or cut and followed by zeros (the new size persisted before the data), or
    kept at full size with random unsynced pages lost (zeros)."""
    if synced >= len(data):
        return data
    how = rng.randrange(3)
    if how < 2:
        cut = rng.randint(synced, len(data))
        out = data[:cut]
        if how == 1 and cut < len(data):
            out += bytes(rng.randint(1, len(data) - cut))
        return out
    pages = bytearray(data)
    for page in range(synced // PAGE, (len(data) - 1) // PAGE + 1):
        if rng.random() < 0.5:
            start = max(page * PAGE, synced)
            end = min((page + 1) * PAGE, len(data))
            pages[start:end] = bytes(end - start)
    return bytes(pages)


@dataclass
class Model:
    """What the test knows about each thread."""

    known: dict[str, list[str]] = field(default_factory=dict)
    """Hashes of acknowledged records, ord 1 first."""
    pending: dict[str, list[str]] = field(default_factory=dict)
    """Hashes of buffered records queued after them (may or may not survive a crash)."""

    def ack_all(self) -> None:
        for thread_id, queued in self.pending.items():
            self.known[thread_id].extend(queued)
            queued.clear()


class Harness:
    def __init__(self, root: Path, rotate: int | None) -> None:
        self.root = root
        self.rotate = rotate
        self.homes = 0
        self.model = Model()
        self.threads: list[str] = []
        self.home = self._new_home()
        self.fops = TrackingFileOps()
        self.store = self._open()
        self.stores = [self.store]

    def _new_home(self) -> Path:
        self.homes += 1
        return self.root / f"home{self.homes}"

    def _open(self) -> EmbeddedStore:
        store = EmbeddedStore(self.home, commit_interval=COMMIT_INTERVAL, fops=self.fops)
        if self.rotate is not None:
            # White box: a small journal makes the store rotate it (checkpoint) mid-test.
            store._journal._rotate_bytes = self.rotate
        return store

    # -- operations ------------------------------------------------------------------------

    def create(self) -> None:
        thread_id = self.store.create_thread("prop")
        first = self.store.read(thread_id)
        assert [r.ord for r in first] == [1]
        self.threads.append(thread_id)
        self.model.known[thread_id] = [first[0].hash]
        self.model.pending[thread_id] = []

    def append(self, which: int, durable: bool, size: int) -> None:
        if not self.threads:
            return
        thread_id = self.threads[which % len(self.threads)]
        known, pending = self.model.known[thread_id], self.model.pending[thread_id]
        data: dict[str, Any] = {"n": len(known) + len(pending), "pad": "x" * size}
        record = self.store.append(thread_id, "custom.prop", data, durable=durable)
        assert record.ord == len(known) + len(pending) + 1
        pending.append(record.hash)
        if durable:
            known.extend(pending)
            pending.clear()

    def flush(self) -> None:
        self.store.flush()
        self.model.ack_all()

    def fork(self, which: int, point: int) -> None:
        """Fork a thread at some ordinal: the child inherits that prefix, hashes and all."""
        if not self.threads:
            return
        thread_id = self.threads[which % len(self.threads)]
        self.flush()
        source = self.store.read(thread_id)
        at = 1 + point % len(source)
        child = self.store.fork(thread_id, at)
        records = self.store.read(child)
        assert [r.hash for r in records[1:]] == [r.hash for r in source[1:at]]
        self.threads.append(child)
        self.model.known[child] = [r.hash for r in records]
        self.model.pending[child] = []

    def release(self, which: int) -> None:
        if not self.threads:
            return
        thread_id = self.threads[which % len(self.threads)]
        self.store.release(thread_id)
        known, pending = self.model.known[thread_id], self.model.pending[thread_id]
        known.extend(pending)
        pending.clear()

    def reopen(self) -> None:
        self.store.close()
        self.model.ack_all()
        self.store = self._open()
        self.stores.append(self.store)
        self.check()

    def crash(self, kind: str, seed: int) -> None:
        new_home = self._new_home()
        durable = crash_copy(self.home, new_home, self.fops, kind, random.Random(seed))
        self.store.close()  # abandoned: it flushes into its own home, which nobody reads
        self.home, self.fops = new_home, TrackingFileOps(durable)
        self.store = self._open()
        self.stores.append(self.store)
        self.check()

    # -- the checker -----------------------------------------------------------------------

    def check(self) -> None:
        """After a reopen: acknowledged records present, extras a prefix of the queued ones,
        gap-free, verified. What is present is acknowledged from now on."""
        for thread_id in self.threads:
            known = self.model.known[thread_id]
            pending = self.model.pending[thread_id]
            records = self.store.read(thread_id)
            hashes = [r.hash for r in records]
            assert [r.ord for r in records] == list(range(1, len(records) + 1))
            assert len(hashes) >= len(known), (
                f"thread {thread_id}: {len(known)} records acknowledged, {len(hashes)} present"
            )
            assert hashes[: len(known)] == known, (
                f"thread {thread_id}: an acknowledged record changed"
            )
            extra = hashes[len(known) :]
            assert extra == pending[: len(extra)], f"thread {thread_id}: unexpected records"
            report = self.store.verify(thread_id)
            assert report.ok, report.to_dict()
            self.model.known[thread_id] = hashes
            pending.clear()

    def finish(self) -> None:
        """Close cleanly, reopen, check everything and that appends continue at n + 1."""
        self.reopen()
        for thread_id in self.threads:
            n = len(self.model.known[thread_id])
            record = self.store.append(thread_id, "custom.prop", {"final": True}, durable=True)
            assert record.ord == n + 1
        self.store.close()
        assert not list((self.home / "journal").glob("*.wal")), "a journal outlived close()"

    def close_all(self) -> None:
        for store in self.stores:
            store.close()


_KINDS = ["append"] * 5 + ["create", "flush", "fork", "release", "reopen", "crash", "crash"]


def _operation(kind: str) -> st.SearchStrategy[tuple[Any, ...]]:
    if kind == "append":
        return st.tuples(st.just(kind), st.integers(0, 7), st.booleans(), st.integers(0, 1500))
    if kind == "release":
        return st.tuples(st.just(kind), st.integers(0, 7))
    if kind == "fork":
        return st.tuples(st.just(kind), st.integers(0, 7), st.integers(0, 60))
    if kind == "crash":
        return st.tuples(st.just(kind), st.sampled_from(["kill", "power"]), st.integers(0, 2**32))
    return st.just((kind,))


operation = st.sampled_from(_KINDS).flatmap(_operation)


@settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    ops=st.lists(operation, min_size=8, max_size=40),
    rotate=st.sampled_from([None, None, 2048]),
)
def test_no_acknowledged_record_is_lost(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[Any, ...]], rotate: int | None
) -> None:
    root = tmp_path_factory.mktemp("prop")
    harness = Harness(root, rotate)
    try:
        harness.create()
        for op in ops:
            name, args = op[0], op[1:]
            getattr(harness, name)(*args)
        harness.finish()
    finally:
        harness.close_all()
    shutil.rmtree(root, ignore_errors=True)


def test_recovery_makes_rollouts_durable_before_deleting_the_journal(tmp_path: Path) -> None:
    """RELIABILITY B2: a dead journal may be deleted only once the records it holds are
    durable in their rollouts.

    A killed store leaves its rollout writes in the page cache, not on disk (it never
    fsynced them: the journal was their durability). The next store's recovery finds the
    rollout complete, so it neither rewrites nor fsyncs it, yet deletes the journal. A power
    loss after that loses every acknowledged record of the thread.
    """
    first = TrackingFileOps()
    live = EmbeddedStore(tmp_path / "a", commit_interval=COMMIT_INTERVAL, fops=first)
    try:
        # Records committed through the journal (every commit goes through it), then one
        # group commit spanning two threads.
        other = live.create_thread("other")
        thread_id = live.create_thread("prop")
        for i in range(5):
            live.append(thread_id, "custom.prop", {"i": i}, durable=False)
        live.append(other, "custom.prop", {}, durable=False)
        live.flush()
        durable = crash_copy(tmp_path / "a", tmp_path / "b", first, "kill", random.Random(0))
        acknowledged = [r.hash for r in live.read(thread_id)]  # (after the copy: reads sync)
    finally:
        live.close()
    rollout = str(tmp_path / "b" / Path(live.path_of(thread_id)).relative_to(tmp_path / "a"))
    assert not durable.get(rollout)  # the rollout was never fsynced: the journal holds it all

    second = TrackingFileOps(durable)
    with EmbeddedStore(tmp_path / "b", commit_interval=COMMIT_INTERVAL, fops=second) as store:
        journals = list((tmp_path / "b" / "journal").glob("*.wal"))
        size = os.path.getsize(rollout)
        assert journals or second.durable.get(rollout, 0) == size, (
            f"recovery deleted the dead journal while only {second.durable.get(rollout, 0)} "
            f"of the rollout's {size} bytes were durable: a power loss now would lose "
            f"{len(acknowledged)} acknowledged records"
        )
        assert [r.hash for r in store.read(thread_id)] == acknowledged
