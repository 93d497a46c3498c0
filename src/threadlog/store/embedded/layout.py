"""Where the embedded store keeps what: its home's folders and each thread's rollout file.

Layout under ``<home>``::

    threads/<yyyy>/<mm>/<thread_id>.jsonl   one rollout per thread, one record per line
    index.sqlite3                           projections, rebuildable from the rollouts
    artifacts/sha256/<ab>/<hex>             content-addressed blobs
    locks/<thread_id>.lock                  single-writer leases (flock)
    journal/<pid>-<random>.wal              the open store's group-commit journal
    secret                                  keys the journal headers (`threadlog.store._perms`)
    credentials.json, credentials.lock      the service's token digests (`credentials`)
    inbox/, quarantine/                     a session's inbox; files set aside, never deleted

The month directory comes from the thread id (a UUIDv7 carries its creation time), so a
thread's file is found from its id alone, without the index; the file system, not the index,
says which threads exist (`Layout.thread_ids`).

This module also holds the store's default sizes and the open-files limit, which bounds how
many threads may be open for writing at once (`default_open_threads`).
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from threadlog._dataclass import dataclass
from threadlog.errors import InsecureHome, StorageError, UsageError
from threadlog.model.ids import is_uuid, uuid7_millis
from threadlog.store._fileops import remove_orphan_temp
from threadlog.store._perms import check_dir, load_secret
from threadlog.store.embedded.rollout import scan

if TYPE_CHECKING:
    from collections.abc import Iterator

    from threadlog.store._fileops import FileOps

__all__ = [
    "ARTIFACT_THRESHOLD",
    "COMMIT_INTERVAL",
    "MAX_RECORD_BYTES",
    "KiB",
    "Layout",
    "MiB",
    "default_open_threads",
    "has_a_record",
]

log = logging.getLogger("threadlog.store")

KiB = 1024
MiB = 1024 * KiB

COMMIT_INTERVAL = 0.1
"""Seconds a buffered append may wait for its group commit."""
ARTIFACT_THRESHOLD = 64 * KiB
"""Event data (or a top-level value of it) larger than this goes to the artifact store."""
MAX_RECORD_BYTES = 1 * MiB
"""The largest record line accepted (after offloading)."""


@dataclass(frozen=True, slots=True)
class Layout:
    """The paths of one home (see the module docstring); nothing is created until `prepare`."""

    home: str
    threads: str
    locks: str
    journal: str

    @classmethod
    def of(cls, home: str) -> Layout:
        """The layout of ``home`` (an absolute path)."""
        join = os.path.join
        return cls(home, join(home, "threads"), join(home, "locks"), join(home, "journal"))

    @property
    def index(self) -> str:
        """The SQLite index file."""
        return os.path.join(self.home, "index.sqlite3")

    @property
    def artifacts(self) -> str:
        """The artifact store's folder."""
        return os.path.join(self.home, "artifacts")

    def prepare(self, fops: FileOps) -> tuple[bytes, int]:
        """Create the home and the folders a store writes first, check that every folder is
        private (`InsecureHome` if not), and load the home's secret: ``(secret, since)``.

        Raises `StorageError` when the home cannot be created.
        """
        try:
            fops.makedirs(self.home)
            check_dir(self.home, "the store's home")  # before anything is created in it
            for directory in (self.threads, self.locks):
                fops.makedirs(directory)
            for name in ("threads", "locks", "artifacts", "inbox", "quarantine"):
                check_dir(os.path.join(self.home, name), f"the store's {name} folder")
            try:
                check_dir(self.journal, "the store's journal folder")
            except InsecureHome:
                raise
            except StorageError as exc:  # not a folder: recovery reports it, reads work
                log.debug("%s", exc)
            return load_secret(self.home, fops)
        except OSError as exc:
            raise StorageError(f"cannot create the store at {self.home}: {exc}") from exc

    def path_of(self, thread_id: str) -> str:
        """The rollout file of a thread (which need not exist)."""
        if not is_uuid(thread_id):
            raise UsageError(f"not a thread id: {thread_id!r:.80}")
        try:
            when = datetime.fromtimestamp(uuid7_millis(thread_id) / 1000, UTC)
        except (ValueError, OverflowError, OSError):
            # a UUID whose first 48 bits, read as UUIDv7 milliseconds, are past the year 9999
            # (a random UUIDv4 one time in ten): no rollout of this store can have that id
            raise UsageError(
                f"not a thread id this store can hold: {thread_id!r:.80} "
                "(its timestamp is past the year 9999)"
            ) from None
        return os.path.join(self.threads, f"{when:%Y}", f"{when:%m}", f"{thread_id}.jsonl")

    def exists(self, thread_id: str) -> bool:
        """Whether the thread has a rollout file (False for a malformed id)."""
        if not is_uuid(thread_id):
            return False
        try:
            return os.path.isfile(self.path_of(thread_id))
        except UsageError:  # an id no rollout of this store can have
            return False

    def rollout_files(self) -> Iterator[tuple[str, str]]:
        """``(thread_id, path)`` of every rollout file, by month; orphaned temporary files
        met on the way (a fork a crash interrupted) are removed."""
        try:
            years = sorted(os.scandir(self.threads), key=lambda e: e.name)
        except FileNotFoundError:
            return
        for year in years:
            if not year.is_dir(follow_symlinks=False):
                continue
            for month in sorted(os.scandir(year.path), key=lambda e: e.name):
                if not month.is_dir(follow_symlinks=False):
                    continue
                for entry in os.scandir(month.path):
                    name = entry.name
                    if name.endswith(".jsonl") and is_uuid(name[:-6]):
                        yield name[:-6], entry.path
                    elif name.endswith(".tmp"):
                        remove_orphan_temp(entry.path)

    def thread_ids(self) -> list[str]:
        """Every thread with a rollout file, from the file system (not the index): those with
        a complete line, and those whose only bytes are damaged (a whole record whose newline
        was overwritten is still a thread, and `verify` must say so)."""
        return [tid for tid, path in self.rollout_files() if has_a_record(path, tid)]


def has_a_record(path: str, thread_id: str) -> bool:
    """Whether a rollout holds at least one complete line (cheap: its first bytes), or bytes
    that are damage rather than a torn first write."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
    except FileNotFoundError:
        return False
    if b"\n" in head:
        return True
    return bool(head) and scan(head, thread_id).error is not None


def default_open_threads() -> int:
    """How many threads may be open for writing at once by default, after raising the
    open-files limit as far as it goes: ``min(1000, limit // 4)`` (an open thread holds two
    descriptors, its rollout and its lease; reads, the index, the journal and the caller need
    the rest)."""
    return min(1000, _raise_fd_limit() // 4)


def _raise_fd_limit() -> int:
    """Raise the soft open-files limit to the hard one (two descriptors per open thread);
    returns the soft limit now in force (4096 where it cannot be read)."""
    try:
        import resource
    except ImportError:
        return 4096
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ValueError, OSError):
        return 4096
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft == resource.RLIM_INFINITY:
        return hard
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft
