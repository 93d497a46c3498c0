"""The durable sync is chosen per platform, every fsync goes through it, and a platform
without ``fcntl`` (Windows) is refused at import with the reason."""

from __future__ import annotations

import ast
import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from threadlog.store import _fileops
from threadlog.store._fileops import F_FULLFSYNC, FileOps, choose_durable_sync, full_fsync

SRC = Path(__file__).resolve().parents[2] / "src" / "threadlog"


class FakeFcntl:
    """Records the ``fcntl`` commands made, and fails with ``errno`` when told to."""

    def __init__(self, fail: int | None = None) -> None:
        self.calls: list[tuple[int, int]] = []
        self.fail = fail

    def fcntl(self, fd: int, cmd: int, arg: int = 0) -> int:
        self.calls.append((fd, cmd))
        if self.fail is not None:
            raise OSError(self.fail, os.strerror(self.fail))
        return 0


@pytest.fixture
def fd(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
    yield fd
    os.close(fd)


def test_macos_uses_f_fullfsync_for_both_syncs(monkeypatch: pytest.MonkeyPatch, fd: int) -> None:
    fake = FakeFcntl()
    monkeypatch.setattr(_fileops, "fcntl", fake)
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(os, "fsync", lambda fd: pytest.fail("plain fsync on macOS"))
    sync, datasync = choose_durable_sync()  # reads sys.platform now
    assert sync is full_fsync and datasync is full_fsync
    # the FileOps seam goes through the chosen pair
    monkeypatch.setattr(_fileops, "_SYNC", sync)
    monkeypatch.setattr(_fileops, "_DATASYNC", datasync)
    FileOps().fsync(fd)
    FileOps().fdatasync(fd)
    assert fake.calls == [(fd, F_FULLFSYNC), (fd, F_FULLFSYNC)]
    assert F_FULLFSYNC == 51  # <sys/fcntl.h> on macOS


def test_macos_falls_back_to_fsync_only_where_fullfsync_is_unsupported(
    monkeypatch: pytest.MonkeyPatch, fd: int
) -> None:
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    monkeypatch.setattr(_fileops, "fcntl", FakeFcntl(fail=errno.ENOTSUP))
    full_fsync(fd)
    assert synced == [fd]
    # an I/O error is the caller's to see (fail stop), never papered over with fsync
    monkeypatch.setattr(_fileops, "fcntl", FakeFcntl(fail=errno.EIO))
    with pytest.raises(OSError) as info:
        full_fsync(fd)
    assert info.value.errno == errno.EIO and synced == [fd]


def test_linux_uses_fsync_and_fdatasync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    assert choose_durable_sync() == (os.fsync, os.fdatasync)
    assert choose_durable_sync("freebsd14") == (os.fsync, os.fdatasync)


def test_posix_without_fdatasync_uses_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "fdatasync")
    assert choose_durable_sync("linux") == (os.fsync, os.fsync)


def test_this_process_uses_its_platform_pair() -> None:
    assert (_fileops._SYNC, _fileops._DATASYNC) == choose_durable_sync(sys.platform)


def test_every_fsync_in_the_package_goes_through_the_seam() -> None:
    """``os.fsync`` / ``os.fdatasync`` are called in `threadlog.store._fileops` only, so that
    each platform gets its durable sync everywhere (a direct call would skip F_FULLFSYNC)."""
    direct: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SRC / "store" / "_fileops.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("fsync", "fdatasync")
                and isinstance(node.value, ast.Name)
                and node.value.id == "os"
            ):
                direct.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert direct == []


def test_without_fcntl_the_stores_refuse_with_the_reason(tmp_path: Path) -> None:
    """Windows has no ``fcntl``: `threadlog.open_store` fails at the import of the store with
    a message that says why and what works, while ``import threadlog`` itself still works."""
    code = (
        "import sys\n"
        "sys.modules['fcntl'] = None\n"  # what `import fcntl` does on Windows: ImportError
        "import threadlog\n"
        "import threadlog.model\n"
        "try:\n"
        f"    threadlog.open_store({str(tmp_path / 'home')!r})\n"
        "except ImportError as exc:\n"
        "    print('REFUSED', exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC.parent)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("REFUSED threadlog's stores need POSIX file locks (fcntl.flock)")
    assert "supports Linux and macOS" in out.stdout and "WSL" in out.stdout
    assert not (tmp_path / "home").exists()
