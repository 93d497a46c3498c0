"""Deleting a thread of the embedded store for good (the `Retention` capability).

Theory of operation
-------------------
A delete takes the thread's single-writer lease (so no process is writing it: `LeaseHeld`
otherwise), then, in this order:

1. writes a *tombstone*, ``deleted/<thread id>``, durably (file and directory fsynced): from
   then on the id is taken for good, so ``create_thread(thread_id=…)`` refuses it
   (`ThreadExists`) instead of silently handing a deleted name out again;
2. unlinks the rollout and fsyncs its directory;
3. drops the thread's index rows (threads, turns, tool calls, memories, acknowledged marks,
   snapshot).

A crash between 1 and 2 leaves a rollout beside its tombstone: the next `delete_thread` of it
finishes the job (`deleted` already says it is gone for callers that check). Records of the
thread still in this store's live journal are retired at its next checkpoint; a crash before
that leaves them in a dead journal, whose recovery skips a tombstoned thread
(`threadlog.store.embedded.recovery`): the records are not brought back. Artifacts are shared
by hash and stay.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from threadlog.errors import StorageError, UsageError
from threadlog.model.ids import is_uuid
from threadlog.store.embedded.leases import Lease

if TYPE_CHECKING:
    from threadlog.store._fileops import FileOps
    from threadlog.store.embedded.index import Index
    from threadlog.store.embedded.layout import Layout

__all__ = ["Tombstones"]


class Tombstones:
    """The ``deleted/`` folder of a home: one empty file per deleted thread id."""

    def __init__(self, layout: Layout, fops: FileOps) -> None:
        self._layout = layout
        self._fops = fops
        self.directory = os.path.join(layout.home, "deleted")

    def deleted(self, thread_id: str) -> bool:
        """Whether ``thread_id`` was deleted (False for a malformed id)."""
        return is_uuid(thread_id) and os.path.exists(os.path.join(self.directory, thread_id))

    def delete(self, thread_id: str, index: Index) -> bool:
        """Delete the thread (see the module docstring); whether it had a log. The caller has
        flushed and released it."""
        if not is_uuid(thread_id):
            raise UsageError(f"not a thread id: {thread_id!r:.80}")
        path = self._layout.path_of(thread_id)
        if not os.path.isfile(path):
            return False
        lease = Lease(self._layout.locks, thread_id, path)
        try:
            self._fops.makedirs(self.directory)
            marker = os.path.join(self.directory, thread_id)
            fd = self._fops.open(marker, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                self._fops.fsync(fd)
            finally:
                self._fops.close(fd)
            self._fops.fsync_dir(self.directory)
            self._fops.unlink(path)
            self._fops.fsync_dir(os.path.dirname(path))
        except OSError as exc:
            raise StorageError(f"cannot delete thread {thread_id}: {exc}") from exc
        finally:
            lease.release()
        index.drop(thread_id)
        return True
