"""Readers see only what is durable (issue 9, point 6; RELIABILITY A2).

A writer writes a record to its store's journal, then fdatasyncs, and only then copies it into
the rollout. Between the two, the record is in the page cache: if the fsync fails the writer
cuts it off the journal (fail-stop, A4), and it never reaches the rollout. So a reader must
never return, index or fork-copy it. The writer publishes its durable end after every commit
and readers stop there.

Two `EmbeddedStore` instances on one home stand for two processes (leases are per open file,
so the second one sees the first as another writer).
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from threadlog import EmbeddedStore, StorageError
from threadlog.store._fileops import FileOps


class StalledSync(FileOps):
    """``fdatasync`` (of the journal) waits until released, then fails with EIO (when armed)."""

    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def fdatasync(self, fd: int) -> None:
        if self.armed:
            self.entered.set()
            self.release.wait(30)
            raise OSError(errno.EIO, "injected EIO")
        super().fdatasync(fd)


def test_no_reader_sees_a_record_whose_fsync_has_not_completed(tmp_path: Path) -> None:
    fops = StalledSync()
    writer = EmbeddedStore(tmp_path, fops=fops)
    thread = writer.create_thread("tester")
    for i in range(3):
        writer.append(thread, "custom.note", {"i": i}, durable=True)
    fops.armed = True
    failed: list[BaseException] = []

    def append() -> None:
        try:
            writer.append(thread, "custom.note", {"never": "acknowledged"}, durable=True)
        except BaseException as exc:
            failed.append(exc)

    appender = threading.Thread(target=append)
    appender.start()
    try:
        assert fops.entered.wait(10)  # written, not yet synced
        (journal,) = (tmp_path / "journal").glob("*.wal")
        assert b"never" in journal.read_bytes()
        assert b"never" not in Path(writer.path_of(thread)).read_bytes()
        with EmbeddedStore(tmp_path) as reader:
            records = reader.read(thread)
            assert [r.ord for r in records] == [1, 2, 3, 4]
            assert reader.read(thread, limit=10) == records
            assert reader.verify(thread).records == 4
            child = reader.fork(thread)
            assert [r.ord for r in reader.read(child)][-1] == 4
            assert all("never" not in str(r.data) for r in reader.read(child))
            assert reader.thread_info(thread).last_ord == 4
        # the writer's own reads stop at its durable end too
        assert [r.ord for r in writer.read(thread)] == [1, 2, 3, 4]
    finally:
        fops.release.set()
        appender.join(10)
    assert failed and isinstance(failed[0], StorageError)
    assert b"never" not in Path(writer.path_of(thread)).read_bytes()
    assert b"never" not in journal.read_bytes()  # cut: fail-stop
    with pytest.raises(StorageError):  # fail-stop: nothing more is acknowledged
        writer.append(thread, "custom.note", {})
    writer.close()
