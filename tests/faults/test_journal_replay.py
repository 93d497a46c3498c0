"""Replaying a dead journal now that every commit goes through one (a lone writer's too):
read from where its records begin, never deleting what it may still restore, and never
taking damage for a torn tail."""

from __future__ import annotations

import errno
import logging
import os
from typing import TYPE_CHECKING, Any

import pytest

from tests.faults.test_journal_failures import kill
from threadlog import EmbeddedStore, StorageError
from threadlog.errors import ThreadNotFound
from threadlog.store._fileops import FileOps
from threadlog.store.embedded import deadjournals, recovery, writers

if TYPE_CHECKING:
    from pathlib import Path

COMMIT_INTERVAL = 3600.0


@pytest.fixture(autouse=True)
def _quiet() -> None:
    logging.getLogger("threadlog.store").setLevel(logging.CRITICAL)


def _journal(home: Path) -> Path:
    (path,) = (home / "journal").glob("*.wal")
    return path


def _whole_scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The threads whose rollouts a replay or an open reads whole."""
    seen: list[str] = []
    for module in (deadjournals, recovery, writers):
        whole = module.scan_file

        def spy(path: str, thread_id: str, _whole: Any = whole) -> Any:
            seen.append(thread_id)
            return _whole(path, thread_id)

        monkeypatch.setattr(module, "scan_file", spy)
    return seen


def test_a_replay_reads_the_rollout_from_where_the_journals_records_begin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long thread, checkpointed at a clean close; the next session appends a few records
    and is killed: its dead journal holds those, and the replay reads the rollout from the
    sparse entry before them, not whole (at 1M records a whole read took seconds and GBs)."""
    home = str(tmp_path / "home")
    with EmbeddedStore(home, commit_interval=COMMIT_INTERVAL) as store:
        thread = store.create_thread("p")
        for i in range(2500):
            store.append(thread, "custom.x", {"i": i}, durable=False)
    store = EmbeddedStore(home, commit_interval=COMMIT_INTERVAL)
    for i in range(2500, 2530):
        store.append(thread, "custom.x", {"i": i}, durable=True)
    kill(store)
    path = store.path_of(thread)
    os.truncate(path, os.path.getsize(path) - 3 * 100)  # a power cut took its unsynced end
    scans = _whole_scans(monkeypatch)
    with EmbeddedStore(home, commit_interval=COMMIT_INTERVAL) as reopened:
        assert not list((tmp_path / "home" / "journal").glob("*.wal"))  # replayed, deleted
        assert reopened.append(thread, "custom.x", {"i": 2530}).ord == 2532
        assert [r.data["i"] for r in reopened.read(thread, after=2500)] == list(range(2499, 2531))
    assert scans == []
    with EmbeddedStore(home) as again:
        assert again.verify(thread).ok


def test_an_acknowledged_record_whose_rollout_copy_failed_stays_acknowledged(
    tmp_path: Path,
) -> None:
    """The journal's fdatasync returned, then writing the rollout failed (ENOSPC): the
    append returns (its record is durable, in the journal), the store stops, and the next
    open replays it once."""

    class RolloutFull(FileOps):
        armed = False

        def write(self, fd: int, data: bytes | memoryview) -> int:
            if self.armed and os.readlink(f"/proc/self/fd/{fd}").endswith(".jsonl"):
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(fd, data)

    home = str(tmp_path / "home")
    fops = RolloutFull()
    store = EmbeddedStore(home, commit_interval=COMMIT_INTERVAL, fops=fops)
    thread = store.create_thread("p")
    store.append(thread, "custom.x", {"i": 0}, durable=True)
    fops.armed = True
    record = store.append(thread, "custom.x", {"i": 1}, durable=True)  # acknowledged
    assert record.ord == 3
    with pytest.raises(StorageError, match="rollouts failed"):
        store.append(thread, "custom.x", {"i": 2}, durable=True)
    store.close()  # leaves the journal: the rollout lacks an acknowledged record
    assert list((tmp_path / "home" / "journal").glob("*.wal"))
    with EmbeddedStore(home) as reopened:
        records = reopened.read(thread)
        assert [r.data for r in records[1:]] == [{"i": 0}, {"i": 1}]
        assert records[2] == record
        assert reopened.verify(thread).ok


def test_a_damaged_journal_line_is_reported_and_the_journal_kept(tmp_path: Path) -> None:
    """A flipped bit in a record of a dead journal, valid records after it: not a torn tail.
    The records before it are replayed, the damage is reported, and the journal is kept
    (the records after it may have been acknowledged)."""
    home = tmp_path / "home"
    store = EmbeddedStore(str(home), commit_interval=COMMIT_INTERVAL)
    thread = store.create_thread("p")
    for i in range(10):
        store.append(thread, "custom.x", {"i": i}, durable=True)
    kill(store)
    journal = _journal(home)
    data = bytearray(journal.read_bytes())
    lines = data.split(b"\n")
    at = sum(len(line) + 1 for line in lines[:6]) + 30  # inside the 6th line (ord 5)
    data[at] ^= 0x01
    journal.write_bytes(bytes(data))
    with EmbeddedStore(str(home)) as reopened:
        (problem,) = [p for p in reopened.problems if p["kind"] == "journal_damaged"]
        assert str(journal) == problem["path"]
        assert len(reopened.read(thread)) == 11  # the rollout has them all (no power cut)
    assert journal.exists()  # kept: never deleted


def test_an_empty_rollout_is_not_taken_for_an_unborn_thread_while_a_journal_may_hold_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A power cut left a new thread's rollout empty (synced later than the journal, which
    holds its records). While that journal cannot be read, the empty file is no unborn
    thread: it stays, and the next open that can read the journal restores the thread."""
    home = tmp_path / "home"
    store = EmbeddedStore(str(home), commit_interval=COMMIT_INTERVAL)
    thread = store.create_thread("p")
    store.append(thread, "custom.x", {"i": 0}, durable=True)
    kill(store)
    path = store.path_of(thread)
    os.truncate(path, 0)
    os.utime(path, (0, 0))  # older than a creator at work
    real = recovery.find_dead_journals

    def unreadable(*args: Any, **kwargs: Any) -> Any:
        raise StorageError("cannot read the journal: injected EIO")

    monkeypatch.setattr(recovery, "find_dead_journals", unreadable)
    with EmbeddedStore(str(home)) as blind:
        assert any(p["kind"] == "journal_unreadable" for p in blind.problems)
        with pytest.raises((ThreadNotFound, StorageError)):
            blind.read(thread)
    assert os.path.exists(path)
    monkeypatch.setattr(recovery, "find_dead_journals", real)
    with EmbeddedStore(str(home)) as reopened:
        assert [r.data for r in reopened.read(thread)[1:]] == [{"i": 0}]
