"""Per-thread single-writer leases for the embedded store, on `fcntl.flock`.

A lease is an exclusive ``flock`` on ``<home>/locks/<thread>.lock``. The kernel drops it when
the holding process dies, however it dies, so the lease of a dead process is simply taken over
by the next opener; no expiry clock is involved. The lock file holds a line naming the holder
(pid, host, since) so that a refused opener can say who has the thread.

``flock`` locks belong to an open file description, so a second `Lease` in the *same* process
is refused too. Local file systems only: ``flock`` is not reliable over NFS.
"""

from __future__ import annotations

import fcntl
import os
import socket
import sys
from datetime import UTC, datetime

from threadlog.errors import LeaseHeld, StorageError

__all__ = ["Lease"]


class Lease:
    """An exclusive, process-bound lease on one thread."""

    def __init__(self, locks_dir: str, thread_id: str) -> None:
        self.thread_id = thread_id
        self.path = os.path.join(locks_dir, f"{thread_id}.lock")
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as exc:
            raise StorageError(f"cannot open lock file for thread {thread_id}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "another writer"
            finally:
                os.close(fd)
            raise LeaseHeld(thread_id, holder) from None
        except OSError as exc:
            os.close(fd)
            raise StorageError(f"cannot lock thread {thread_id}: {exc}") from exc
        self._fd: int | None = fd
        since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
        info = f"pid {os.getpid()} on {socket.gethostname()} ({argv0}) since {since}\n".encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, info, 0)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Give the lease up (idempotent). The lock file stays; it is reused."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.ftruncate(fd, 0)
            except OSError:
                pass  # the lock is released by close below either way
            os.close(fd)
