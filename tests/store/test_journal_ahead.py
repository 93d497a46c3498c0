"""The journal writes zeros ahead of its records (`Journal._reserve`), so that a commit's
``fdatasync`` only overwrites space the file already has: every commit, a lone append's too,
goes through it, and recovery reads its records up to the zeros."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

from threadlog import EmbeddedStore, open_store
from threadlog.store._fileops import FileOps
from threadlog.store.embedded.journal import MIN_RESERVE_BYTES

if TYPE_CHECKING:
    from pathlib import Path


def _journal(home: Path) -> Path:
    (path,) = (home / "journal").glob("*.wal")
    return path


def test_a_lone_append_goes_through_a_journal_with_zeros_ahead(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with EmbeddedStore(str(home)) as store:
        thread = store.create_thread("u")
        record = store.append(thread, "custom.x", {"i": 1}, durable=True)
        data = _journal(home).read_bytes()
        end = data.find(b"\0")
        assert end > 0, "the journal holds zeros after its records"
        assert data[:end].endswith(store.read(thread)[-1].hash.encode() + b'"}\n')
        assert set(data[end:]) == {0} and len(data) - end > MIN_RESERVE_BYTES // 2
        assert store.read(thread)[-1] == record
    assert not list((home / "journal").glob("*.wal"))  # retired at close


def test_the_zeros_grow_ahead_of_the_records(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with EmbeddedStore(str(home)) as store:
        thread = store.create_thread("u")
        sizes = set()
        for i in range(400):  # ~160 KiB of records: past the first stretch of zeros
            store.append(thread, "custom.x", {"i": i, "pad": "p" * 300}, durable=True)
            data = _journal(home).read_bytes()
            assert data.find(b"\0") > 0
            sizes.add(len(data))
        assert len(sizes) > 1
        assert len(store.read(thread)) == 401


def test_a_killed_lone_writer_is_replayed_from_the_journal_past_its_zeros(
    tmp_path: Path,
) -> None:
    """kill -9 of a process with one thread: its acknowledged records are in the dead
    journal (and in the rollout, unsynced); the next open replays the journal, reads up to
    its zeros and deletes it."""
    home = tmp_path / "home"
    script = textwrap.dedent(
        f"""
        import os, sys
        from threadlog import open_store
        store = open_store({str(home)!r})
        thread = store.create_thread("u")
        for i in range(50):
            store.append(thread, "custom.x", {{"i": i}}, durable=True)
        print(thread, flush=True)
        os.kill(os.getpid(), 9)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == -9, done.stderr
    thread = done.stdout.strip()
    data = _journal(home).read_bytes()
    assert data.count(b"\n") >= 51 and data.endswith(b"\0")
    with open_store(home) as store:
        records = store.read(thread)
        assert [r.data["i"] for r in records[1:]] == list(range(50))
        assert store.verify(thread).ok
        assert not store.problems
    assert not list((home / "journal").glob("*.wal"))


def test_a_journal_cut_with_zeros_after_its_header_is_deleted(tmp_path: Path) -> None:
    """A crash before the first commit's fdatasync may leave the header cut and the zeros
    written ahead: nothing was acknowledged, and the journal is deleted, not refused."""
    home = tmp_path / "home"
    with open_store(home) as store:
        thread = store.create_thread("u")
        store.append(thread, "custom.x", {}, durable=True)
        journal = _journal(home)
        header = journal.read_bytes().split(b"\n", 1)[0]
        dead = journal.with_name("1-0123456789abcdef.wal")
    # (under another name: the header is keyed by the journal's name, so it no longer
    # matches, and its first bytes followed by zeros are what a torn creation leaves)
    for cut in (b"", header[:10]):
        dead.write_bytes(cut + bytes(MIN_RESERVE_BYTES))
        os.chmod(dead, 0o600)
        with open_store(home) as store:
            assert len(store.read(thread)) == 2
            assert not store.problems
        assert not dead.exists()
        assert not (home / "quarantine").exists()


class _NoRoom(FileOps):
    """ENOSPC for any write of zeros past a journal's records (the space written ahead)."""

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if len(data) >= MIN_RESERVE_BYTES and not any(bytes(data[:4096])):
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(fd, data)


def test_no_room_for_the_zeros_is_no_failure(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with EmbeddedStore(str(home), fops=_NoRoom()) as store:
        thread = store.create_thread("u")
        for i in range(20):
            store.append(thread, "custom.x", {"i": i}, durable=True)
        data = _journal(home).read_bytes()
        assert b"\0" not in data  # the journal grows instead
        assert len(store.read(thread)) == 21
