"""A home belongs to its owner (issue 9, point 4): private modes, refusal of folders and
files others own or may write, and journals replayed only if this home wrote them."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from threadlog import StorageError, open_store
from threadlog.errors import InsecureHome
from threadlog.model.commands import Approve, Command, Submit
from threadlog.store._fileops import FileOps
from threadlog.store._perms import journal_header
from threadlog.store.protocol import Mailbox, MailboxMessage

from .homes import crashed_home, modes

STRANGER = 12345
"""A uid that is not ours (the tests run as root in CI: root may chown to it)."""


@pytest.fixture
def loose_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_every_folder_is_0700_and_every_file_0600(tmp_path: Path, loose_umask: None) -> None:
    home = tmp_path / "home"
    with open_store(home, commit_interval=3600) as store:
        a, b = store.create_thread("a"), store.create_thread("b")
        store.append(a, "custom.big", {"blob": "x" * 70_000})  # to the artifact store
        store.append(a, "custom.x", {}, durable=False)
        store.append(b, "custom.y", {}, durable=False)
        store.flush()  # a group commit through the journal
        assert isinstance(store, Mailbox)
        store.post(a, Submit(text="hi"))
        store.threads()
        found = modes(home)  # while open: the index's -wal and -shm exist
    assert "index.sqlite3-wal" in found and "secret" in found
    assert any(name.startswith("journal/") for name in found)
    assert any(name.startswith("artifacts/sha256/") for name in found)
    wrong = {
        name: f"{mode:04o}"
        for name, mode in found.items()
        if mode != (0o700 if (home / name).is_dir() else 0o600)
    }
    assert not wrong


def test_a_home_readable_by_others_is_restricted_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "home"
    with open_store(home) as store:
        store.create_thread("a")
    # as an older version, or a mkdir by hand, left it
    os.chmod(home, 0o755)
    os.chmod(home / "index.sqlite3", 0o644)
    with caplog.at_level(logging.WARNING, "threadlog.store"), open_store(home) as store:
        assert len(store.threads()) == 1
    assert os.stat(home).st_mode & 0o777 == 0o700
    assert os.stat(home / "index.sqlite3").st_mode & 0o777 == 0o600
    assert "readable by other users" in caplog.text


@pytest.mark.parametrize("folder", [".", "journal", "threads"])
def test_a_folder_owned_by_someone_else_is_refused(tmp_path: Path, folder: str) -> None:
    crashed = crashed_home(tmp_path)
    os.chown(crashed.home / folder, STRANGER, -1)
    with pytest.raises(InsecureHome, match=f"uid {STRANGER}.*chown"):
        open_store(crashed.home)
    assert len(crashed.journals()) == 1  # nothing was replayed or touched


@pytest.mark.parametrize("mode", [0o777, 0o770])
@pytest.mark.parametrize("folder", [".", "journal"])
def test_a_folder_others_may_write_is_refused(tmp_path: Path, folder: str, mode: int) -> None:
    crashed = crashed_home(tmp_path)
    os.chmod(crashed.home / folder, mode)
    with pytest.raises(InsecureHome, match="writable by other users.*chmod 700"):
        open_store(crashed.home)
    assert len(crashed.journals()) == 1
    assert isinstance(InsecureHome("x"), StorageError)  # exit code 3 from the CLI


@pytest.mark.parametrize("change", ["stranger", "0666", "other secret", "no header"])
def test_a_journal_this_home_did_not_write_is_never_replayed(
    tmp_path: Path, change: str, caplog: pytest.LogCaptureFixture
) -> None:
    crashed = crashed_home(tmp_path)
    (journal,) = crashed.journals()
    if change == "stranger":
        os.chown(journal, STRANGER, -1)
    elif change == "0666":
        os.chmod(journal, 0o666)
    elif change == "other secret":
        (crashed.home / "secret").write_bytes(os.urandom(32))
    else:  # a journal without the header (as an older version wrote them), in a keyed home
        data = journal.read_bytes()
        journal.write_bytes(data[data.index(b"\n") + 1 :])
    before = journal.read_bytes()
    with caplog.at_level(logging.ERROR, "threadlog.store"), open_store(crashed.home) as store:
        assert len(store.read(crashed.thread)) == 1  # not replayed: only thread.created
        assert [p["kind"] for p in store.problems] == ["journal_refused"]
    assert "refused" in caplog.text
    assert not crashed.journals()
    (kept,) = (crashed.home / "quarantine").iterdir()  # moved aside, never deleted
    assert kept.read_bytes() == before


def test_a_journal_of_an_older_version_is_replayed_once_when_the_home_gets_its_secret(
    tmp_path: Path,
) -> None:
    crashed = crashed_home(tmp_path)
    (journal,) = crashed.journals()
    data = journal.read_bytes()
    journal.write_bytes(data[data.index(b"\n") + 1 :])  # no header
    (crashed.home / "secret").unlink()  # a home made before secrets
    with open_store(crashed.home) as store:
        assert store.read(crashed.thread)[1:] == crashed.acked
        assert not store.problems
    assert not crashed.journals()


def test_an_older_versions_journal_is_still_replayed_after_a_failed_first_open(
    tmp_path: Path,
) -> None:
    """The open that gives the home its secret fails while replaying (a full disk): the next
    open, which finds the secret, must still replay the header-less journal, not refuse it
    (it predates the secret)."""
    crashed = crashed_home(tmp_path)
    (journal,) = crashed.journals()
    data = journal.read_bytes()
    journal.write_bytes(data[data.index(b"\n") + 1 :])
    (crashed.home / "secret").unlink()

    class FullDisk(FileOps):
        def write_all(self, fd: int, data: bytes | memoryview) -> None:
            if os.readlink(f"/proc/self/fd/{fd}").endswith(".jsonl"):
                raise OSError(errno.ENOSPC, "No space left on device")
            super().write_all(fd, data)

    with pytest.raises(StorageError, match="No space left"):
        open_store(crashed.home, fops=FullDisk())
    assert (crashed.home / "secret").exists()
    with open_store(crashed.home) as store:
        assert store.read(crashed.thread)[1:] == crashed.acked
        assert not store.problems
    assert not crashed.journals()


@pytest.mark.parametrize("cut", [0, 1, 20, "all"])
def test_a_journal_cut_while_it_was_created_is_deleted(tmp_path: Path, cut: int | str) -> None:
    """A crash before the first commit's fdatasync can leave the header torn; nothing in
    such a journal was acknowledged (the header is made durable with the first records)."""
    crashed = crashed_home(tmp_path)
    (journal,) = crashed.journals()
    secret = (crashed.home / "secret").read_bytes()
    header = journal_header(secret, journal.name)
    assert journal.read_bytes().startswith(header)
    journal.write_bytes(header[: len(header) if cut == "all" else cut])
    with open_store(crashed.home) as store:
        assert not store.problems
        assert len(store.read(crashed.thread)) == 1
    assert not crashed.journals()
    assert not (crashed.home / "quarantine").exists()


def test_an_inbox_others_may_write_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with open_store(home) as store:
        thread = store.create_thread("a")
    _post(home, thread, Submit(text="hi"))
    os.chmod(home / "inbox", 0o777)
    with pytest.raises(InsecureHome, match="chmod 700"):
        _post(home, thread, Approve(call_id="c"))
    with pytest.raises(InsecureHome):
        _pending(home, thread)


@pytest.mark.parametrize("change", ["stranger", "0666"])
def test_an_inbox_message_someone_else_left_is_never_applied(tmp_path: Path, change: str) -> None:
    home = tmp_path / "home"
    with open_store(home) as store:
        thread = store.create_thread("a")
    ours = _post(home, thread, Submit(text="hi"))
    forged = _post(home, thread, Approve(call_id="c"))
    path = home / "inbox" / thread / f"{forged}.json"
    if change == "stranger":
        os.chown(path, STRANGER, -1)
    else:
        os.chmod(path, 0o666)
    assert [m.id for m in _pending(home, thread)] == [ours]
    assert not path.exists() and path.with_name(path.name + ".refused").exists()


def _post(home: Path, thread: str, command: Command) -> str:
    with open_store(home) as store:
        assert isinstance(store, Mailbox)
        return store.post(thread, command)


def _pending(home: Path, thread: str) -> list[MailboxMessage]:
    with open_store(home) as store:
        assert isinstance(store, Mailbox)
        return store.pending(thread)
