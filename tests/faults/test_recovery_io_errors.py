"""I/O errors while a dead journal is replayed into a rollout are a `StorageError` (exit code
3 from the CLI, one clear line, no traceback), and lose nothing (issue 9, point 9)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.security.homes import Crashed, crashed_home
from threadlog import StorageError, open_store
from threadlog.cli import cli
from threadlog.cli import inspect as _inspect  # noqa: F401 - registers commands
from threadlog.store._fileops import DEFAULT_FILEOPS, FileOps

ERRORS = {"ENOSPC": errno.ENOSPC, "EIO": errno.EIO}


class FailRolloutWrites(FileOps):
    """Every write and fsync of a rollout fails with ``code`` (a full or failing disk)."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.paths: dict[int, str] = {}

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        fd = super().open(path, flags, mode)
        self.paths[fd] = path
        return fd

    def _check(self, fd: int) -> None:
        if self.paths.get(fd, "").endswith(".jsonl"):
            raise OSError(self.code, f"simulated {errno.errorcode[self.code]}")

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self._check(fd)
        return super().write(fd, data)

    def fsync(self, fd: int) -> None:
        self._check(fd)
        super().fsync(fd)


def _recovered_later(crashed: Crashed) -> None:
    assert len(crashed.journals()) == 1  # kept: its records are not in the rollouts yet
    with open_store(crashed.home) as store:  # the disk is back
        assert store.read(crashed.thread)[1:] == crashed.acked
    assert not crashed.journals()


@pytest.mark.parametrize("code", ERRORS)
def test_an_io_error_replaying_a_journal_is_a_storage_error(tmp_path: Path, code: str) -> None:
    crashed = crashed_home(tmp_path)
    with pytest.raises(StorageError, match="cannot replay the journal") as raised:
        open_store(crashed.home, fops=FailRolloutWrites(ERRORS[code]))
    assert isinstance(raised.value.__cause__, OSError)
    assert "open the store again" in str(raised.value)
    _recovered_later(crashed)


@pytest.mark.parametrize("code", ERRORS)
def test_the_cli_exits_3_without_a_traceback(
    tmp_path: Path, code: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashed = crashed_home(tmp_path)
    failing = FailRolloutWrites(ERRORS[code])
    monkeypatch.setattr(DEFAULT_FILEOPS, "open", failing.open)  # the CLI's store's file ops
    monkeypatch.setattr(DEFAULT_FILEOPS, "write", failing.write)
    monkeypatch.setattr(DEFAULT_FILEOPS, "fsync", failing.fsync)
    result = CliRunner().invoke(cli, ["ls", "--home", str(crashed.home)])
    assert result.exit_code == 3, (result.output, result.exception)
    assert result.stderr.startswith("error: cannot replay the journal")
    assert "Traceback" not in result.output
    monkeypatch.undo()
    _recovered_later(crashed)
