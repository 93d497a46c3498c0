"""What a store repairs when it opens, and when it opens a thread: dead journals, unborn threads.

*Dead journals.* A store that crashed before its checkpoint leaves its journal behind, holding
records that may be in no rollout yet (`threadlog.store.embedded.journal`). `Recovery.recover`
runs on open: for every thread a dead journal names and no live store writes, it takes the
thread's lease, replays the records into the rollout (`deadjournals.recover_rollout`) and
releases it; a journal is deleted only once every thread in it holds its records. A thread
another live store holds is left to that store, which replays it when it opens the thread for
writing (`Recovery.recover_thread`, called by `threadlog.store.embedded.writers`). Whatever
cannot be replayed (a journal naming a rollout that is gone, records that do not chain on) is
kept, logged and listed in `Recovery.problems`; `verify` reports the thread as damaged.

*Unborn threads.* A rollout without one acknowledged record, with no journal left that may
hold its first record (every commit goes through the journal, and the rollout is synced
later), is a thread whose creation crashed before its first record was durable: no thread at
all. The index's catch-up finds them and `Recovery.remove_unborn` removes the empty file, or
moves one holding bytes to ``quarantine/``; never while its creator may still be writing it,
nor while any journal but the store's own is there.

*Damaged journals.* A journal's records end at its first line that is not one. Zeros or an
unterminated fragment there are a torn tail; a complete line that is neither, with a record
after it, is damage (`DeadJournal.damaged`): the records before it are replayed, the journal
is reported and never deleted.

*Where a replay reads.* Everything before a thread's first record in a dead journal is
durable in its rollout (a journal is retired only once the rollouts it wrote are synced), so a
replay reads the rollout from the nearest line the checkpoints know at or before that record
(`Recovery.seek`), not whole.

*Deleted threads.* Records of a thread deleted for good (a tombstone in ``deleted/``, its
rollout gone) that a dead journal still holds are not replayed, and do not keep the journal.

*Repairs.* What was repaired in a thread (a journal replayed here, a torn tail cut or
completed by the writers) is noted per thread for the runtime to record (`take_repairs`).
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

from threadlog.errors import IntegrityError, LeaseHeld, StorageError
from threadlog.model.ids import is_uuid
from threadlog.store._fileops import move_to_quarantine
from threadlog.store.embedded.deadjournals import (
    DeadJournal,
    Seek,
    find_dead_journals,
    recover_rollout,
)
from threadlog.store.embedded.leases import Lease
from threadlog.store.embedded.rollout import Scan, scan_file

if TYPE_CHECKING:
    from threadlog.model.envelope import Record
    from threadlog.store._fileops import FileOps
    from threadlog.store.embedded.journal import Journal
    from threadlog.store.embedded.layout import Layout

__all__ = ["UNBORN_AGE", "Recovery"]

log = logging.getLogger("threadlog.store")

UNBORN_AGE = 5.0
"""Seconds a rollout without a record is left alone: its creator may be writing it."""


class Recovery:
    """Replays dead journals, removes unborn threads, keeps the problems and the repairs.

    Args:
        layout: the home.
        fops: the file-operation layer.
        journal: this store's own journal (never taken for a dead one).
        secret: the home's secret and ``since`` when it exists: only journals this home wrote
            are replayed (see `find_dead_journals`).
    """

    def __init__(
        self, layout: Layout, fops: FileOps, journal: Journal, secret: bytes, since: int
    ) -> None:
        self._layout = layout
        self._fops = fops
        self._journal = journal
        self._secret = secret
        self._secret_since = since
        self.problems: list[dict[str, Any]] = []
        """What the open found wrong and skipped so that the rest works (a journal naming a
        missing rollout, a damaged journal folder, a refused journal…): each a dict with
        ``kind``, ``message`` and, when known, ``thread`` and ``path``. Also logged as
        errors; `threadlog verify` lists them."""
        self._repairs: dict[str, list[dict[str, Any]]] = {}
        self.seek: Seek | None = None
        """Where a replay may start reading a rollout (`recover_rollout`'s ``seek``: the
        store's checkpoints, set once they exist); None reads it whole."""
        self.max_record_bytes = 0

    def report(
        self, kind: str, message: str, path: str | None = None, thread: str | None = None
    ) -> None:
        """Record a problem the open skipped (see `problems`); logged by the caller."""
        problem = {"kind": kind, "message": message, "path": path, "thread": thread}
        if problem not in self.problems:
            self.problems.append(problem)

    def note_repair(self, thread_id: str, repair: dict[str, Any]) -> None:
        """Note something repaired in the thread's files (a dict with a ``kind``)."""
        self._repairs.setdefault(thread_id, []).append(repair)

    def take_repairs(self, thread_id: str) -> list[dict[str, Any]]:
        """What this store repaired in the thread's files since it opened (torn tails cut,
        records replayed from a crashed store's journal); cleared by the call."""
        return self._repairs.pop(thread_id, [])

    def has_dead_journals(self) -> bool:
        """Whether any journal other than this store's own exists (it may be a dead one)."""
        try:
            names = os.listdir(self._layout.journal)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError:
            return True  # the full recovery says what is wrong
        own = os.path.basename(self._journal.path) if self._journal.path else None
        return any(n.endswith(".wal") and n != own for n in names)

    def dead_journals(self) -> list[DeadJournal]:
        """The dead journals, checked and parsed; the caller releases each one."""
        return find_dead_journals(
            self._layout.journal,
            self._secret,
            self._fops,
            legacy_before=self._secret_since,
            report=self.report,
        )

    def recover_thread(self, thread_id: str, path: str) -> Scan | None:
        """Replay the thread's records from dead journals into its rollout (the caller holds
        its lease). Returns the scan of the whole rollout when the replay read it whole, else
        None (no records to replay, or the replay read it from a known line on): the caller
        opens the thread as if no journal had been there."""
        dead = self.dead_journals()
        try:
            entries = [e for journal in dead for e in journal.entries.get(thread_id, ())]
            if not entries:
                return None
            before = os.path.getsize(path)
            scanned = recover_rollout(
                path, thread_id, self._fops, entries, self.seek, self.max_record_bytes
            )
            if os.path.getsize(path) != before:
                self.note_repair(
                    thread_id, {"kind": "journal_replayed", "last_ord": scanned.records[-1].ord}
                )
            whole = not scanned.records or scanned.records[0].ord == 1
            return scanned if whole else None
        finally:
            for journal in dead:
                journal.release()

    def recover(self) -> list[str]:
        """Replay the journals of crashed stores into their rollouts and delete them.

        Runs on open. Threads whose lease another live process holds were recovered by that
        process when it took the lease; a journal is deleted only once every thread in it has
        its records in its rollout. Returns the ids of the threads repaired here.
        """
        try:
            dead = self.dead_journals()
        except StorageError as exc:
            # Reads need no journal; no thread is opened for writing before its dead
            # journals can be read (`recover_thread` raises this again).
            log.error("recovery: %s", exc)
            self.report(
                "journal_unreadable",
                f"{exc}; no thread can be written until it can be read",
                self._layout.journal,
            )
            return []
        repaired: list[str] = []
        replayed: dict[str, Scan] = {}  # what each replay left (its rollout from some ord on)
        held: set[str] = set()
        skipped: set[str] = set()  # threads whose records were not replayed
        try:
            threads: dict[str, list[tuple[Record, bytes]]] = {}
            for journal in dead:
                if journal.damaged is not None:
                    message = (
                        f"the journal {journal.path} is damaged ({journal.damaged}); the "
                        "records before the damage are replayed, and the journal is kept: "
                        "records after it may have been acknowledged"
                    )
                    log.error("recovery: %s", message)
                    self.report("journal_damaged", message, journal.path)
            for journal in dead:
                for thread_id, entries in journal.entries.items():
                    threads.setdefault(thread_id, []).extend(entries)
            for thread_id, entries in threads.items():
                if self._deleted(thread_id):
                    continue  # deleted for good (`retention`): its records stay gone
                problem = self._unrecoverable(thread_id)
                if problem is not None:
                    log.error("recovery: %s", problem)
                    self.report("journal_thread", problem, thread=thread_id)
                    skipped.add(thread_id)
                    continue
                path = self._layout.path_of(thread_id)
                try:
                    lease = Lease(self._layout.locks, thread_id, path)
                except LeaseHeld:
                    held.add(thread_id)  # its writer replays it when it opens the thread
                    continue
                except FileNotFoundError:
                    log.error(
                        "recovery: thread %s has records in a journal but no rollout; the "
                        "journal is kept",
                        thread_id,
                    )
                    skipped.add(thread_id)
                    continue
                try:
                    before = os.path.getsize(path)
                    scanned = recover_rollout(
                        path, thread_id, self._fops, entries, self.seek, self.max_record_bytes
                    )
                    replayed[thread_id] = scanned
                    if os.path.getsize(path) != before:
                        repaired.append(thread_id)
                        self.note_repair(
                            thread_id,
                            {"kind": "journal_replayed", "last_ord": scanned.records[-1].ord},
                        )
                except IntegrityError as exc:
                    log.error("recovery: %s", exc)
                    self.report("journal_thread", str(exc), path, thread_id)
                    skipped.add(thread_id)
                finally:
                    lease.release()
            for journal in dead:
                # Not while another store writes one of its threads: it may not have synced
                # the records its open found in the page cache yet. Never one holding
                # records that could not be replayed (A5).
                if (
                    journal.damaged is None
                    and held.isdisjoint(journal.entries)
                    and skipped.isdisjoint(journal.entries)
                    and all(
                        self._deleted(t) or self._has_records(t, e, replayed.get(t))
                        for t, e in journal.entries.items()
                    )
                ):
                    journal.try_delete(self._fops)
        except OSError as exc:
            # e.g. ENOSPC or EIO writing a rollout: fail-stop (A4); the journals are kept
            raise StorageError(
                f"cannot replay the journals of {self._layout.journal} into their threads: "
                f"{exc}; nothing acknowledged is lost (the journals are kept): fix the disk "
                "(free space?) and open the store again"
            ) from exc
        finally:
            for journal in dead:
                journal.release()
        return repaired

    def _deleted(self, thread_id: str) -> bool:
        """Whether the thread was deleted (a tombstone, its rollout gone:
        `threadlog.store.embedded.retention`)."""
        return (
            is_uuid(thread_id)
            and os.path.exists(os.path.join(self._layout.home, "deleted", thread_id))
            and not os.path.isfile(self._layout.path_of(thread_id))
        )

    def _unrecoverable(self, thread_id: str) -> str | None:
        """Why a thread named in a dead journal cannot take its records back, if it cannot."""
        if not is_uuid(thread_id):
            return (
                f"a journal holds records of {thread_id!r:.80}, which is not a thread id; "
                "they are not replayed and the journal is kept"
            )
        path = self._layout.path_of(thread_id)
        if not os.path.isfile(path):
            return (
                f"a journal holds records of thread {thread_id}, whose rollout {path} is "
                "gone; they are not replayed and the journal is kept"
            )
        return None

    def _has_records(
        self, thread_id: str, entries: list[tuple[Record, bytes]], replayed: Scan | None
    ) -> bool:
        """Whether the thread's rollout holds the last of its records in a journal (as the
        replay this open made of it left it, ``replayed``, or read now)."""
        last = entries[-1][0]
        scanned = replayed
        if scanned is None:
            try:
                scanned = scan_file(self._layout.path_of(thread_id), thread_id)
            except FileNotFoundError:
                return False
        if not scanned.records:
            return False
        at = last.ord - scanned.records[0].ord
        return 0 <= at < len(scanned.records) and scanned.records[at].hash == last.hash

    def remove_unborn(self, thread_id: str, path: str) -> None:
        """A rollout without one acknowledged record, and no journal left that may hold one
        (`has_dead_journals`), is a thread whose creation crashed before its first record was
        durable: no thread at all. An empty file is removed; one holding
        bytes (a torn first write) is moved to ``quarantine/``, never deleted (issue 9: nothing
        ever deletes a rollout's bytes). Not while its creator may still be at work: under
        its lease, and only once the file is a few seconds old."""
        try:
            if time.time() - os.stat(path).st_mtime < UNBORN_AGE:
                return
            if self.has_dead_journals():
                # its first record may be in one (every commit goes through a journal, and
                # the rollout is synced later): not while one may still be replayed, or
                # could not be read
                return
            lease = Lease(self._layout.locks, thread_id, path)
        except (LeaseHeld, FileNotFoundError):
            return
        try:
            scanned = scan_file(path, thread_id)
            if scanned.records or scanned.error is not None:
                return
            directory = os.path.dirname(path)
            if os.path.getsize(path) == 0:
                self._fops.unlink(path)
                self._fops.fsync_dir(directory)
                log.info("removed the empty rollout of an unborn thread %s", thread_id)
            else:
                aside = move_to_quarantine(path, self._layout.home, self._fops, "unborn")
                log.warning(
                    "thread %s was never born (its first write was torn); its bytes are in %s",
                    thread_id,
                    aside,
                )
        except FileNotFoundError:
            pass
        finally:
            lease.release()
