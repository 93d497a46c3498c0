"""The file-operation seam: every byte threadlog writes goes through a `FileOps`.

Tests swap in a subclass that fails the N-th operation with EIO or ENOSPC, cuts a write short,
or exits the process at a chosen point (SQLite's VFS approach). Production code uses the
default instance, which is a thin layer over `os`.

*Durable sync, per platform.* Every fsync threadlog makes (here, and the few call sites outside
the seam: the file tools, the import ledger) goes through `durable_fsync` or
`durable_fdatasync`, chosen once by `choose_durable_sync` from ``sys.platform``:

* Linux and other POSIX systems: ``os.fsync``, and ``os.fdatasync`` for appends (RELIABILITY
  A2), or ``os.fsync`` where ``fdatasync`` does not exist.
* macOS: ``fcntl(fd, F_FULLFSYNC)`` for both. There ``fsync`` only hands the data to the drive,
  which may keep it in its volatile cache across a power loss (fsync(2) on macOS says so), and
  ``os.fdatasync`` does not exist. A filesystem that does not support ``F_FULLFSYNC`` (some
  network and FUSE ones answer ENOTSUP or EINVAL) gets ``fsync``, as SQLite does; any other
  error is raised (fail stop, RELIABILITY A4).

*Windows is refused here, at import.* The embedded store serialises writers with
``fcntl.flock`` leases and relies on POSIX rename and directory-fsync semantics; importing this
module (which every store imports first, the PostgreSQL one included, through
`threadlog.store`) raises `ImportError` naming the reason when ``fcntl`` is missing.
``import threadlog`` and the pure `threadlog.model` still work anywhere.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import sys
import time
from collections.abc import Callable

try:
    import fcntl
except ImportError:  # Windows
    raise ImportError(
        f"threadlog's stores need POSIX file locks (fcntl.flock) and POSIX durable-write "
        f"semantics, which this platform ({sys.platform}) does not provide: threadlog supports "
        "Linux and macOS (on Windows, run it under WSL). `import threadlog` and the pure "
        "threadlog.model work anywhere."
    ) from None

__all__ = [
    "DEFAULT_FILEOPS",
    "F_FULLFSYNC",
    "FileOps",
    "choose_durable_sync",
    "durable_fdatasync",
    "durable_fsync",
    "full_fsync",
    "move_to_quarantine",
    "remove_orphan_temp",
    "remove_orphan_temps",
]

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)

F_FULLFSYNC: int = getattr(fcntl, "F_FULLFSYNC", 51)
"""macOS's ``fcntl`` command that flushes the drive's cache too (51 in <sys/fcntl.h>)."""

_NO_FULLFSYNC = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOTTY})

SyncFn = Callable[[int], None]


def full_fsync(fd: int) -> None:
    """``fcntl(fd, F_FULLFSYNC)``: data and metadata on stable storage, through the drive's
    cache (macOS). A filesystem that does not support it gets ``fsync`` (SQLite's fallback);
    an I/O error is raised, never retried."""
    try:
        fcntl.fcntl(fd, F_FULLFSYNC)
    except OSError as exc:
        if exc.errno not in _NO_FULLFSYNC:
            raise
        os.fsync(fd)


def choose_durable_sync(platform: str | None = None) -> tuple[SyncFn, SyncFn]:
    """The ``(fsync, fdatasync)`` pair that makes a write durable on ``platform`` (default:
    ``sys.platform``, read now): ``F_FULLFSYNC`` on macOS, ``os.fsync`` / ``os.fdatasync``
    elsewhere (``os.fsync`` twice where ``os.fdatasync`` is missing)."""
    platform = sys.platform if platform is None else platform
    if platform == "darwin":
        return full_fsync, full_fsync
    datasync: SyncFn | None = getattr(os, "fdatasync", None)
    return os.fsync, datasync if datasync is not None else os.fsync


_SYNC, _DATASYNC = choose_durable_sync()


def durable_fsync(fd: int) -> None:
    """Make ``fd``'s data and metadata durable, the platform's way (`choose_durable_sync`)."""
    _SYNC(fd)


def durable_fdatasync(fd: int) -> None:
    """Make ``fd``'s data durable (enough for an append), the platform's way."""
    _DATASYNC(fd)


class FileOps:
    """Thin, overridable wrappers over the `os` calls the store makes."""

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        return os.open(path, flags | getattr(os, "O_CLOEXEC", 0), mode)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        return os.write(fd, data)

    def write_all(self, fd: int, data: bytes | memoryview) -> None:
        """Write every byte, looping over short writes; a zero-byte write is an error."""
        if not data:
            return
        n = self.write(fd, data)
        if n == len(data):  # the usual case: one write, no view
            return
        if n <= 0:
            raise OSError(errno.EIO, "write wrote nothing")
        view = memoryview(data)[n:]
        while view:
            n = self.write(fd, view)
            if n <= 0:
                raise OSError(errno.EIO, "write wrote nothing")
            view = view[n:]

    def fsync(self, fd: int) -> None:
        durable_fsync(fd)

    def fdatasync(self, fd: int) -> None:
        durable_fdatasync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def mkdir(self, path: str) -> None:
        os.mkdir(path, 0o700)

    def close(self, fd: int) -> None:
        os.close(fd)

    def fsync_dir(self, path: str) -> None:
        """Make a directory's entries (new files, renames) durable."""
        fd = os.open(path, _DIR_FLAGS)
        try:
            self.fsync(fd)
        finally:
            os.close(fd)

    def write_atomic(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data``, atomically and durably (RELIABILITY B1): a temp file
        beside it (``O_EXCL``, 0600 whatever the umask, named ``.<name>.<random>.<pid>.tmp``
        so that `remove_orphan_temp` sweeps it if we die), fsync, rename, fsync of the
        directory. On failure the temp file is removed and nothing has replaced ``path``."""
        directory, name = os.path.split(path)
        tmp = temporary_path(directory, f"{name}.{secrets.token_hex(4)}")
        fd = self.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                os.fchmod(fd, 0o600)
                self.write_all(fd, data)
                self.fsync(fd)
            finally:
                self.close(fd)
            self.rename(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self.fsync_dir(directory or ".")

    def makedirs(self, path: str) -> None:
        """Create ``path`` and missing parents, fsyncing each parent whose entries changed."""
        path = os.path.abspath(path)
        if os.path.isdir(path):
            return
        parent = os.path.dirname(path)
        self.makedirs(parent)
        try:
            self.mkdir(path)
        except FileExistsError:
            pass  # made by another thread or process, which may not have synced it yet
        self.fsync_dir(parent)


DEFAULT_FILEOPS = FileOps()


def move_to_quarantine(path: str, home: str, fops: FileOps, label: str) -> str:
    """Move a file the store must neither use nor delete (a refused journal, a rollout that
    holds no record) to ``<home>/quarantine/<name>.<label>-<time>-<random>``, durably (both
    directories fsynced); its new path. Never replaces an earlier one."""
    aside = os.path.join(home, "quarantine")
    fops.makedirs(aside)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    dest = os.path.join(aside, f"{os.path.basename(path)}.{label}-{stamp}-{secrets.token_hex(3)}")
    fops.rename(path, dest)
    fops.fsync_dir(os.path.dirname(path))
    fops.fsync_dir(aside)
    return dest


def temporary_path(directory: str, name: str, pid: int | None = None) -> str:
    """``directory/.<name>.<pid>.tmp``: the name every temporary file of the store takes, so
    that `remove_orphan_temp` can tell (by the pid) whether its writer is still alive. The
    pid is this process's, or ``pid``: the process a file is written for (an import's worker
    writes for the importing process, which takes the file and is the one to outlive)."""
    return os.path.join(directory, f".{name}.{os.getpid() if pid is None else pid}.tmp")


def remove_orphan_temp(path: str) -> bool:
    """Delete a temporary file left by a dead process (RELIABILITY B3); True if removed.

    Temporary files are named ``.<anything>.<pid>.tmp``: one whose writer is still alive (or
    that does not follow the pattern) is left alone.
    """
    try:
        pid = int(os.path.basename(path).split(".")[-2])
        os.kill(pid, 0)
    except ProcessLookupError:
        pass  # its writer is dead
    except (ValueError, IndexError, PermissionError):
        return False  # not ours, or a live process
    else:
        return False  # alive: still writing
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def remove_orphan_temps(directory: str) -> int:
    """`remove_orphan_temp` every temporary file in ``directory``; how many were removed."""
    removed = 0
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.endswith(".tmp") and remove_orphan_temp(entry.path):
                    removed += 1
    except (FileNotFoundError, NotADirectoryError):
        pass
    return removed
