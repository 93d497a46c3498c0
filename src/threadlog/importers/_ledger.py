"""Which thread holds which source session, and how far each file was read: the ledger.

The truth is in the threads themselves: an imported thread's ``thread.created`` names its
import *key* (``config.import.key``: the format and the source's session id), and every import
of a file ends with a ``custom.import.progress`` record (the byte offset and line count read,
the file's size and modification time, checksums of its head and of the last line read).
Finding a session's thread that way means reading the first record of every thread, and
finding how far a file was read means reading its thread; both are cheap once but not for
every file of every run.

So the ledger is a cache of those facts, kept in the store's directory
(``<home>/imports/ledger.json``, written atomically) when the store has one:

* ``files``: path → ``{key, thread, size, mtime_ns, children}``: a file whose size and
  modification time are unchanged since its last import is skipped without being opened;
* ``keys``: import key → thread id;
* ``examined``: the threads whose ``thread.created`` was already looked at, so that only
  threads created since (by another process, or by a run that crashed before saving the
  ledger) are read to find a key the ledger lacks.

A lost or stale ledger costs time, never correctness: every decision it feeds is checked
against the store (the thread exists; the file's bytes match the recorded checksums).

Two imports into one store at once could both create a thread for a new session; so an
import holds an exclusive ``flock`` on ``<home>/imports/lock`` from `Ledger.open` to
`Ledger.close`, and a second one waits for the first to finish.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from dataclasses import field
from typing import TYPE_CHECKING, Any

import orjson

from threadlog._dataclass import dataclass
from threadlog.store._fileops import durable_fsync
from threadlog.store.protocol import LocalHome

if TYPE_CHECKING:
    from threadlog.store.protocol import Store

__all__ = ["Ledger", "import_key_of"]

VERSION = 1


def import_key_of(config: Any) -> str | None:
    """The import key a thread's config names, if it was imported."""
    if isinstance(config, dict):
        meta = config.get("import")
        key = meta.get("key") if isinstance(meta, dict) else None
        if isinstance(key, str):
            return key
    return None


@dataclass(slots=True)
class Ledger:
    """The import cache of one store (see the module docstring)."""

    path: str | None
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    examined: set[str] = field(default_factory=set)
    pending: set[str] = field(default_factory=set)
    """Threads this import wrote to its batch of new threads, not committed yet: held,
    though the store does not have them yet (`threadlog.importers._bulk`)."""
    _scanned: bool = False
    _lock: int | None = None

    @classmethod
    def open(cls, store: Store) -> Ledger:
        """The store's ledger (empty if it has none, or none can be kept), locked for this
        import (waiting for another import into the same store to finish)."""
        if not isinstance(store, LocalHome):
            return cls(None)
        directory = os.path.join(store.home, "imports")
        os.makedirs(directory, mode=0o700, exist_ok=True)
        lock = os.open(os.path.join(directory, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
        except BaseException:
            os.close(lock)
            raise
        ledger = cls._read(os.path.join(directory, "ledger.json"))
        ledger._lock = lock
        return ledger

    @classmethod
    def _read(cls, path: str) -> Ledger:
        try:
            with open(path, "rb") as f:
                raw = orjson.loads(f.read())
        except (OSError, orjson.JSONDecodeError):
            return cls(path)
        if not isinstance(raw, dict) or raw.get("version") != VERSION:
            return cls(path)
        return cls(
            path,
            files=dict(raw.get("files") or {}),
            keys=dict(raw.get("keys") or {}),
            examined=set(raw.get("examined") or ()),
        )

    def close(self) -> None:
        """Release the import lock (the ledger should be saved first)."""
        lock, self._lock = self._lock, None
        if lock is not None:
            os.close(lock)  # closing the descriptor drops its flock

    def thread_for(self, store: Store, key: str) -> str | None:
        """The thread that holds import key ``key``, or None."""
        thread = self.keys.get(key)
        if thread is not None and (thread in self.pending or store.exists(thread)):
            return thread
        self.keys.pop(key, None)
        if not self._scanned:
            self._scan(store)
            thread = self.keys.get(key)
        return thread

    def _scan(self, store: Store) -> None:
        """Read the first record of every thread not examined yet."""
        self._scanned = True
        for thread in store.thread_ids():
            if thread in self.examined:
                continue
            with contextlib.suppress(Exception):  # a damaged thread is no import of ours
                first = store.read(thread, limit=1)
                if first:
                    data = first[0].data
                    key = import_key_of(data.get("config") if isinstance(data, dict) else None)
                    if key is not None:
                        self.keys[key] = thread
            self.examined.add(thread)

    def created(self, key: str, thread: str) -> None:
        """Note a thread this import created."""
        self.keys[key] = thread
        self.examined.add(thread)

    def save(self) -> None:
        """Write the ledger atomically (a no-op for a store without a directory)."""
        if self.path is None:
            return
        payload = orjson.dumps(
            {
                "version": VERSION,
                "files": self.files,
                "keys": self.keys,
                "examined": sorted(self.examined),
            }
        )
        directory = os.path.dirname(self.path)
        os.makedirs(directory, exist_ok=True)
        tmp = f"{self.path}.{os.getpid()}.tmp"
        # private like every file of a home (0600), written whole, then renamed into place
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            durable_fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            durable_fsync(dir_fd)
        finally:
            os.close(dir_fd)
