"""Per-thread single-writer leases for the embedded store, on `fcntl.flock` of the rollout.

A lease is an exclusive ``flock`` on the thread's **rollout file itself**: the one file that
cannot be deleted or swapped out from under its holder without losing the thread anyway (a
lock on a separate lock file is defeated by deleting that file, after which a second writer
locks a new one and the two interleave). After locking, the lease checks that the path still
names the inode it locked, so a rollout renamed or replaced during the open is refused. The
kernel drops the lock when the holding process dies, however it dies, so the lease of a dead
process is simply taken over by the next opener; no expiry clock is involved.

Beside it, ``<home>/locks/<thread>.lock`` is the holder's **notice**: who holds the thread
(pid, host, since: a refused opener says who has it) and the rollout's **durable end**, the
byte offset up to which every record is durable (on disk in the store's journal, and written
into the rollout, which is synced at the journal's checkpoints), published after each commit.
Readers in other processes stop there (issue 9: a record whose fsync has not completed, and
that a failed fsync may yet cut, is never returned or copied). The holder publishes through a shared memory map of
the notice's first line (a store of a few bytes into the page cache the readers' ``pread``
reads, instead of a ``pwrite`` per commit: the one system call on the append path besides the
record's own ``write`` and ``fdatasync``), and by ``pwrite`` where the map cannot be made. The
end is written twice on the line, so a read racing the update is detected either way. The
notice is never truncated by threadlog (a replacement is a new file); truncating a live
holder's notice by hand would make its next publish fault (``SIGBUS``), like truncating any
mapped file. The holder keeps a shared-exclusive ``flock`` on the
notice too, so a reader can tell a live holder's notice from one a dead process left behind.
The notice is removed on release; deleting it by hand costs readers that cap, never a second
writer.

``flock`` locks belong to an open file description, so a second `Lease` in the *same* process
is refused too, and a child made by ``fork()`` would share them: every lease this process holds
is dropped in the child (an ``os.register_at_fork`` handler below), so a parent that dies
releases its threads even while a child lives on. Local file systems only: ``flock`` is not
reliable over NFS.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import socket
import stat
import sys
import weakref
from datetime import UTC, datetime

from threadlog.errors import LeaseHeld, StorageError

__all__ = ["Lease", "read_durable_end"]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_READ_FLAGS = os.O_RDONLY | _CLOEXEC | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
"""Never block on a FIFO planted where a file should be (it is refused after the open)."""
_FIELD = 20
_DURABLE_LINE = len("durable ") + 2 * _FIELD + 2
"""``durable <end> <end>\\n``: the end twice, so that a read racing the update is detected."""
UNKNOWN = -1
"""A durable end nobody publishes (the lease holder is recovering, not writing)."""


class Lease:
    """An exclusive, process-bound lease on one thread's rollout at ``path`` (which exists).

    Raises:
        LeaseHeld: another writer (another process, or another lease of this one) holds it.
        FileNotFoundError: the rollout does not exist.
        StorageError: the lock or its notice cannot be taken or written.
    """

    def __init__(self, locks_dir: str, thread_id: str, path: str) -> None:
        self.thread_id = thread_id
        self.notice_path = os.path.join(locks_dir, f"{thread_id}.lock")
        fd = os.open(path, _READ_FLAGS)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise StorageError(f"thread {thread_id}: {path} is not a regular file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LeaseHeld(thread_id, _holder(self.notice_path)) from None
        except OSError as exc:
            os.close(fd)
            raise StorageError(f"cannot lock thread {thread_id}: {exc}") from exc
        try:
            held, now = os.fstat(fd), os.stat(path, follow_symlinks=False)
        except OSError as exc:
            os.close(fd)
            raise StorageError(f"cannot lock thread {thread_id}: {exc}") from exc
        if (held.st_dev, held.st_ino) != (now.st_dev, now.st_ino):
            os.close(fd)
            raise StorageError(
                f"thread {thread_id}: its rollout was replaced while it was being opened; "
                "try again (and check what else writes in the store's directory)"
            )
        self._fd: int | None = fd
        self._notice: int | None = None
        """The notice's descriptor, kept only where it cannot be mapped (for ``pwrite``)."""
        self._map: mmap.mmap | None = None
        """The notice's durable line, mapped shared. The map holds a descriptor of the notice
        of its own (and with it the notice's ``flock``), so the lease keeps no other: an open
        thread costs no more descriptors than with ``pwrite``."""
        self._notice_id: tuple[int, int] | None = None
        """``(st_dev, st_ino)`` of the notice this lease wrote (release removes only it)."""
        _HELD.add(self)
        try:
            notice, self._notice_id = self._write_notice()
        except OSError as exc:
            self.release()
            raise StorageError(
                f"cannot write the lease notice of thread {thread_id}: {exc}"
            ) from exc
        try:
            self._map = mmap.mmap(notice, _DURABLE_LINE)  # (shared, read and write)
        except (OSError, ValueError):  # e.g. a file system without shared maps: pwrite it is
            self._notice = notice
        else:
            os.close(notice)  # the map's own descriptor keeps the lock

    def _write_notice(self) -> tuple[int, tuple[int, int]]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.notice_path)  # a dead holder's, or a stranger's: never written through
        fd = os.open(self.notice_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # a reader's probe holds it for microseconds only
            since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
            holder = f"pid {os.getpid()} on {socket.gethostname()} ({argv0}) since {since}\n"
            os.pwrite(fd, _durable_line(UNKNOWN) + holder.encode(), 0)
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        return fd, (st.st_dev, st.st_ino)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def publish(self, end: int) -> None:
        """Announce that the rollout is durable up to byte ``end`` (readers stop there)."""
        mapped = self._map
        if mapped is not None:
            try:
                mapped[:_DURABLE_LINE] = _durable_line(end)
            except ValueError:  # released meanwhile (the map is closed): nothing to announce
                pass
            return
        fd = self._notice
        if fd is not None:
            os.pwrite(fd, _durable_line(end), 0)

    def release(self) -> None:
        """Give the lease up (idempotent) and remove its notice."""
        mapped, self._map = self._map, None
        notice, self._notice = self._notice, None
        mine, self._notice_id = self._notice_id, None
        if mine is not None:
            try:
                there = os.stat(self.notice_path)
                if (there.st_dev, there.st_ino) == mine:
                    os.unlink(self.notice_path)  # (still locked: removed before it is let go)
            except OSError:
                pass  # gone already: nothing to remove
        if mapped is not None:
            mapped.close()  # closes its descriptor: the notice's lock goes with it
        if notice is not None:
            os.close(notice)
        fd, self._fd = self._fd, None
        _HELD.discard(self)
        if fd is not None:
            os.close(fd)

    def abandon(self) -> None:
        """In a ``fork()``ed child: drop this process's references to the lock without
        touching the files (the parent still holds the lease)."""
        mapped, self._map = self._map, None
        if mapped is not None:
            with contextlib.suppress(OSError, ValueError):
                mapped.close()  # unmaps this process's copy only
        for fd in (self._notice, self._fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._notice = self._fd = None


_HELD: weakref.WeakSet[Lease] = weakref.WeakSet()
"""Every lease this process holds, however briefly (recovery takes some for a moment)."""


def _abandon_all_in_child() -> None:
    for lease in list(_HELD):
        lease.abandon()
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_abandon_all_in_child)


def _durable_line(end: int) -> bytes:
    return b"durable %020d %020d\n" % (end, end)  # (_FIELD digits)


def _open_notice(path: str) -> int | None:
    """A read-only descriptor of a lease notice, or None if there is no regular file there."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def _holder(notice_path: str) -> str:
    fd = _open_notice(notice_path)
    text = ""
    if fd is not None:
        try:
            text = os.pread(fd, 1024, 0)[_DURABLE_LINE:].decode("utf-8", "replace").strip()
        except OSError:
            pass
        finally:
            os.close(fd)
    return text or "another writer"


def read_durable_end(locks_dir: str, thread_id: str) -> int | None:
    """The durable end a live lease holder publishes for the thread; None when no live holder
    publishes one (no notice, a dead holder's notice, a holder still recovering)."""
    fd = _open_notice(os.path.join(locks_dir, f"{thread_id}.lock"))
    if fd is None:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # its holder is alive: trust what it publishes
        else:
            return None  # nobody holds it: a dead holder's notice
        for _ in range(5):
            line = os.pread(fd, _DURABLE_LINE, 0)
            parts = line.split()
            if len(parts) == 3 and parts[0] == b"durable" and parts[1] == parts[2]:
                try:
                    end = int(parts[1])
                except ValueError:
                    return None
                return end if end >= 0 else None
        return None
    finally:
        os.close(fd)
