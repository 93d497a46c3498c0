"""Replaying a dead journal now that every commit goes through one (a lone writer's too):
read from where its records begin, never deleting what it may still restore, and never
taking damage for a torn tail."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from tests.faults.test_journal_failures import COMMIT_INTERVAL, kill
from threadlog import EmbeddedStore, StorageError
from threadlog.errors import LeaseHeld, ThreadlogError, ThreadNotFound
from threadlog.store._fileops import FileOps
from threadlog.store.embedded import deadjournals, recovery, writers

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(autouse=True)
def _quiet() -> None:
    logging.getLogger("threadlog.store").setLevel(logging.CRITICAL)


def _journal(home: Path) -> Path:
    (path,) = (home / "journal").glob("*.wal")
    return path


class _RolloutFull(FileOps):
    """ENOSPC for writes into rollouts, once armed (the journal's still succeed)."""

    armed = False

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if self.armed and os.readlink(f"/proc/self/fd/{fd}").endswith(".jsonl"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(fd, data)


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

    home = str(tmp_path / "home")
    fops = _RolloutFull()
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


def test_an_aappend_another_caller_committed_stays_acknowledged(tmp_path: Path) -> None:
    """The aappend's record is committed by a flush from elsewhere, whose copy into the
    rollout fails: the journal stops, but the aappend, covered by that durable commit,
    returns its record."""
    home = str(tmp_path / "home")
    fops = _RolloutFull()
    store = EmbeddedStore(home, commit_interval=COMMIT_INTERVAL, fops=fops)
    thread = store.create_thread("p")

    async def main() -> Any:
        task = asyncio.create_task(store.aappend(thread, "custom.x", {"i": 1}, durable=True))
        await asyncio.sleep(0)  # the task queued its record and waits for its turn
        fops.armed = True
        with contextlib.suppress(StorageError):
            store.flush()  # commits the task's record; copying it into the rollout fails
        return await task

    record = asyncio.run(main())
    assert record.ord == 2
    with pytest.raises(StorageError):
        store.append(thread, "custom.x", {"i": 2})
    store.close()
    with EmbeddedStore(home) as reopened:
        assert reopened.read(thread)[1] == record


def test_a_lease_kept_by_a_failed_release_is_kept_by_the_next_release(tmp_path: Path) -> None:
    """After a commit whose rollout copy failed, releasing the thread fails and keeps its
    lease; a second release must keep it too (another store would write the thread without
    the acknowledged record only this store's journal holds)."""
    home = str(tmp_path / "home")
    fops = _RolloutFull()
    store = EmbeddedStore(home, commit_interval=COMMIT_INTERVAL, fops=fops)
    thread = store.create_thread("p")
    fops.armed = True
    store.append(thread, "custom.x", {"i": 1}, durable=True)  # acknowledged, not in the rollout
    for _ in range(2):
        with pytest.raises(StorageError):
            store.release(thread)
    with pytest.raises(LeaseHeld):
        EmbeddedStore(home).acquire(thread)
    store.close()
    with EmbeddedStore(home) as reopened:
        assert [r.data for r in reopened.read(thread)[1:]] == [{"i": 1}]


def _damaged_journal(tmp_path: Path, at_line: int, damage: Callable[[bytearray, int], None]) -> Any:
    home = tmp_path / "home"
    store = EmbeddedStore(str(home), commit_interval=COMMIT_INTERVAL)
    thread = store.create_thread("p")
    for i in range(10):
        store.append(thread, "custom.x", {"i": i}, durable=True)
    path = store.path_of(thread)
    kill(store)
    journal = _journal(home)
    data = bytearray(journal.read_bytes())
    start = sum(len(line) + 1 for line in data.split(b"\n")[:at_line])
    damage(data, start)
    journal.write_bytes(bytes(data))
    return home, thread, path, journal


def test_a_page_lost_from_its_first_byte_is_a_torn_tail_not_damage(tmp_path: Path) -> None:
    """A lost page reads zeros from its first lost byte: a line that starts with a few NULs
    (fewer than a run of 16), with records after it, is what a power cut leaves of an
    unacknowledged batch, not damage."""

    def lose(data: bytearray, start: int) -> None:
        data[start : start + 5] = b"\0" * 5

    home, thread, _, journal = _damaged_journal(tmp_path, 6, lose)
    with EmbeddedStore(str(home)) as reopened:
        assert not [p for p in reopened.problems if p["kind"] == "journal_damaged"]
        assert len(reopened.read(thread)) == 11
    assert not journal.exists()


def test_records_after_a_damaged_journal_line_are_not_lost(tmp_path: Path) -> None:
    """A flipped bit in ord 5 of the dead journal, and the rollout lost everything from ord
    5 on (a power cut): the journal's later records are not dropped as a torn tail would
    be; the thread, whose ord 5 is now nowhere, is refused and reported, never written
    over."""

    def flip(data: bytearray, start: int) -> None:
        data[start + 30] ^= 0x01

    home, thread, path, journal = _damaged_journal(tmp_path, 6, flip)
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    os.truncate(path, sum(len(line) + 1 for line in lines[:5]))  # ords 1-5 left: 6- lost
    with EmbeddedStore(str(home)) as reopened:
        kinds = {p["kind"] for p in reopened.problems}
        assert "journal_damaged" in kinds and "journal_thread" in kinds
        with pytest.raises(ThreadlogError):
            reopened.append(thread, "custom.x", {"i": "over"})
    assert journal.exists()
