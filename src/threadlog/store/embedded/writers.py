"""The threads this store has open for writing: a lease and a `RolloutLog` each.

A thread is opened for writing on its first append (or `acquire`), and stays open until it is
released, evicted or the store closes. Opening one (`OpenLogs.get`) is where its file is made
safe to build on, under its single-writer lease (`threadlog.store.embedded.leases`):

1. its records from any dead journal are replayed into it first (`Recovery.recover_thread`,
   which reads the rollout from the line they follow on where the checkpoints know one);
   then its records are read back: from the later of the store's checkpoint and the
   runtime's snapshot when one is usable (`threadlog.store.embedded.checkpoint`), otherwise
   whole;
2. damage refuses the thread (`IntegrityError`), and so does a log that lost records the
   index saw acknowledged, or one a newer threadlog wrote (`check_writable_format`);
3. a torn tail is repaired: a final record that lacks only its newline gets it, anything
   else past the last whole record is cut; both are noted as repairs;
4. the file is fsynced and its durable end published before anything is chained onto it (a
   killed writer may have left records in the page cache only).

At most ``max_open_threads`` are open at once (each holds two descriptors): opening one more
closes the least used half (`evict_locked`), each after its records are synced. A thread
being released is reopened only once its release is over. One lock (`OpenLogs.lock`) guards
the table; the append fast path reads it without the lock (a dict lookup is atomic) and only
takes it to open a thread.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any

from threadlog._clock import new_id, rfc3339, wall_ns
from threadlog.errors import IntegrityError, StorageError, ThreadNotFound, UsageError
from threadlog.model import codec
from threadlog.model.envelope import FORMAT_VERSION, BadRecord, Record, parse_line
from threadlog.model.legality import reduce_log
from threadlog.store.embedded.layout import MiB
from threadlog.store.embedded.leases import Lease
from threadlog.store.embedded.reader import lost_acknowledged
from threadlog.store.embedded.recovery import UNBORN_AGE
from threadlog.store.embedded.rollout import Scan, prefix_ids, scan_file
from threadlog.store.embedded.rolloutlog import RolloutLog
from threadlog.store.named import check_thread_id, same_creation
from threadlog.store.validate import thread_created_data

if TYPE_CHECKING:
    from collections.abc import Callable

    from threadlog.model.state import ThreadState
    from threadlog.store._fileops import FileOps
    from threadlog.store.embedded.checkpoint import Checkpoints
    from threadlog.store.embedded.journal import Journal
    from threadlog.store.embedded.layout import Layout
    from threadlog.store.embedded.reader import Reader
    from threadlog.store.embedded.recovery import Recovery
    from threadlog.store.embedded.retention import Tombstones
    from threadlog.store.embedded.snapshots import SnapshotKeeper

__all__ = ["OpenLogs", "check_writable_format"]

log = logging.getLogger("threadlog.store")


class OpenLogs:
    """Opens, tracks, evicts and releases the threads a store writes (module docstring).

    Args:
        logs: the table of open logs, by thread id; shared (read only) with the store's fast
            path, its reader and its snapshots; only this object changes it.
        journal: the store's journal (every log queues its lines there).
        max_open_threads: how many threads may be open at once.
    """

    def __init__(
        self,
        logs: dict[str, RolloutLog],
        *,
        layout: Layout,
        fops: FileOps,
        journal: Journal,
        recovery: Recovery,
        reader: Reader,
        snapshots: SnapshotKeeper,
        max_open_threads: int,
        max_record_bytes: int,
        checkpoints: Checkpoints | None = None,
    ) -> None:
        self.logs = logs
        self._checkpoints = checkpoints
        self.leases: dict[str, Lease] = {}
        self.lock = threading.Lock()
        self._changed = threading.Condition(self.lock)
        self._releasing: set[str] = set()
        """Threads whose release is under way: they are reopened only once it is over."""
        self._layout = layout
        self._fops = fops
        self._journal = journal
        self._recovery = recovery
        self._reader = reader
        self._snapshots = snapshots
        self._max_open = max_open_threads
        self._max_record_bytes = max_record_bytes

    def get(self, thread_id: str) -> RolloutLog:
        """The thread's open log, opening it (see the module docstring) if it is not."""
        rollout = self.logs.get(thread_id)
        if rollout is not None:
            return rollout
        with self.lock:
            while thread_id in self._releasing:  # this store is still giving it up
                self._changed.wait()
            rollout = self.logs.get(thread_id)
            if rollout is None and thread_id in self.leases:
                self._journal.check()  # a failed release kept the lease: the journal says why
            if rollout is None:
                if len(self.logs) >= self._max_open:
                    self.evict_locked()
                rollout = self._open(thread_id)
                self.logs[thread_id] = rollout
            return rollout

    def settle(self) -> None:
        """Wait until an open or an eviction under way (which holds the lock) is over."""
        with self.lock:
            pass

    def create(
        self,
        principal: str,
        *,
        title: str | None,
        lineage: dict[str, Any] | None,
        config: dict[str, Any],
        thread_id: str | None = None,
        tombstones: Tombstones | None = None,
    ) -> str:
        """Create a thread: its rollout, opened for writing, holding its ``thread.created``
        record, durably; its id. Raises `UsageError` for settings no thread may have, and
        for a caller-chosen ``thread_id`` held with other settings or deleted
        `ThreadExists` (`threadlog.store.named`)."""
        data = thread_created_data(principal, title, lineage, config)
        data_json = codec.canonical(data)
        now = wall_ns()
        named = thread_id is not None
        if thread_id is None:
            thread_id = new_id(now)
        else:
            deleted = tombstones is not None and tombstones.deleted(thread_id)
            check_thread_id(thread_id, deleted=deleted)
            if self._layout.exists(thread_id):
                return same_creation(thread_id, self._created_data(thread_id), data)
        path = self._layout.path_of(thread_id)
        directory = os.path.dirname(path)
        fd: int | None = None
        lease: Lease | None = None
        submitted = False
        try:
            self._fops.makedirs(directory)
            try:
                fd = self._fops.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
            except FileExistsError:
                if named:  # another creator of the same name got there first
                    return same_creation(thread_id, self._created_data(thread_id), data)
                raise
            # The lease locks the rollout itself. Until then nobody else knows the new id,
            # and a catch-up leaves a young file without a record alone.
            lease = Lease(self._layout.locks, thread_id, path)
            # The file's directory entry is durable before any record of it is acknowledged
            # (RELIABILITY A3); a crash before the record leaves an empty file, which is no
            # thread at all.
            self._fops.fsync_dir(directory)
            rollout = RolloutLog(
                thread_id=thread_id,
                path=path,
                fd=fd,
                journal=self._journal,
                scanned=Scan(),
                max_record_bytes=self._max_record_bytes,
                publish=lease.publish,
                first_state=_empty_log,
            )
            lease.publish(0)
            _, seq = rollout.submit(
                id=new_id(now),
                type="thread.created",
                data=data,
                data_json=data_json,
                parent=None,
                ts=rfc3339(now),
                expect_ord=1,
            )
            submitted = True
            with self.lock:
                if len(self.logs) >= self._max_open:
                    self.evict_locked()
                self.logs[thread_id] = rollout
                self.leases[thread_id] = lease
            self._journal.wait(seq)
        except BaseException as exc:
            if not submitted:
                # Nothing of the thread was queued: take the empty file back.
                if fd is not None:
                    self._fops.close(fd)
                    with contextlib.suppress(OSError):
                        self._fops.unlink(path)
                if lease is not None:
                    lease.release()
            if isinstance(exc, OSError):
                raise StorageError(f"cannot create thread {thread_id}: {exc}") from exc
            raise
        return thread_id

    def _created_data(self, thread_id: str) -> Any:
        """The ``thread.created`` data of a thread on disk, waiting (up to `UNBORN_AGE`) for
        its creator, in this process or another, to make its first record durable. Raises
        `StorageError` when it never does (the creator crashed: an unborn thread)."""
        deadline = time.monotonic() + UNBORN_AGE
        while True:
            try:
                head = self._reader.read(thread_id, 0, limit=1)
            except ThreadNotFound:  # the file is there, its first record not yet
                head = []
            if head:
                return head[0].data
            if time.monotonic() > deadline:
                raise StorageError(
                    f"thread {thread_id} is being created and never got its first record"
                )
            time.sleep(0.002)

    def evict_locked(self) -> None:
        """Close the least used half of the open logs (`lock` held)."""
        victims = sorted(self.logs.values(), key=lambda r: r.uses)[: max(1, len(self.logs) // 2)]
        for rollout in victims:
            rollout.close()
            self._journal.sync_rollout(rollout)
            self._checkpoint(rollout, digests=False)  # (the lock is held: no reading back)
            self._fops.close(rollout.fd)
            del self.logs[rollout.thread_id]
            self.leases.pop(rollout.thread_id).release()
        for rollout in self.logs.values():
            rollout.uses = 0

    def release(self, thread_id: str) -> None:
        """Flush and close one thread's log and give up its lease."""
        with self.lock:
            while thread_id in self._releasing:  # another release of it: wait for that one
                self._changed.wait()
            rollout = self.logs.pop(thread_id, None)
            lease = self.leases.pop(thread_id, None)
            if lease is None and rollout is None:
                return  # not open here
            self._releasing.add(thread_id)  # (only this call removes it: see finally)
        try:
            if rollout is not None:
                rollout.close()  # no new submissions
                try:
                    self._journal.sync_rollout(rollout)
                except BaseException:
                    # Keep the lease until close: this store's journal (poisoned, left in
                    # place) may hold records of the thread that only the next open may
                    # replay; another writer must not write the thread before that.
                    if lease is not None:
                        with self.lock:
                            self.leases[thread_id] = lease
                        lease = None
                    raise
                self._checkpoint(rollout)
                self._fops.close(rollout.fd)
            if lease is not None:
                if self._journal.error is not None:
                    # a lease kept by a release that failed (above): still kept, for as long
                    # as this store's stopped journal may hold records only it can replay
                    with self.lock:
                        self.leases[thread_id] = lease
                    self._journal.check()
                lease.release()
        finally:
            with self.lock:
                self._releasing.discard(thread_id)
                self._changed.notify_all()

    def close_all(self) -> None:
        """At close, once the journal is closed: close every log, release every lease (with
        those a failed release kept)."""
        with self.lock:
            for rollout in self.logs.values():
                rollout.closed = True
                if self._journal.error is None:
                    self._checkpoint(rollout)
                self._fops.close(rollout.fd)
            self.logs.clear()
            for lease in self.leases.values():
                lease.release()
            self.leases.clear()

    def _checkpoint(self, rollout: RolloutLog, *, digests: bool = True) -> None:
        """Checkpoint a log being closed, all of it in the file (`checkpoint`)."""
        if self._checkpoints is not None:
            self._checkpoints.take(rollout, digests=digests)

    def abandon(self) -> None:
        """In a ``fork()``ed child: close this process's copies of the rollouts' descriptors,
        touching nothing else (no lock: another thread may have held it at the fork)."""
        for rollout in list(self.logs.values()):
            with contextlib.suppress(OSError):
                os.close(rollout.fd)

    def _open(self, thread_id: str) -> RolloutLog:
        """Open a thread for writing (`lock` held): steps 1-4 of the module docstring."""
        path = self._layout.path_of(thread_id)
        if not os.path.isfile(path):
            if thread_id in self._reader.missing_threads():
                raise IntegrityError(
                    thread_id, 1, "the rollout file is missing, yet records were acknowledged"
                )
            raise ThreadNotFound(thread_id)
        try:
            lease = Lease(self._layout.locks, thread_id, path)
        except FileNotFoundError:
            raise ThreadNotFound(thread_id) from None
        try:
            rollout = self._open_leased(thread_id, path, lease)
        except OSError as exc:
            lease.release()
            raise StorageError(f"cannot open thread {thread_id} for writing: {exc}") from exc
        except BaseException:
            lease.release()
            raise
        self.leases[thread_id] = lease
        return rollout

    def _open_leased(self, thread_id: str, path: str, lease: Lease) -> RolloutLog:
        whole = None  # the rollout read whole by a replay of dead journals, if it was
        if self._recovery.has_dead_journals():
            # their records of this thread into its rollout first (read from the line they
            # follow on where the checkpoints know one), which then opens as if none had been
            whole = self._recovery.recover_thread(thread_id, path)
        fast = None
        if self._checkpoints is not None:  # the later of its checkpoint and snapshot
            fast = self._checkpoints.open_from(thread_id, path, self._snapshots)
        else:
            got = self._snapshots.anchored_tail(thread_id, path)
            if got is not None:
                at = got[0]
                fast = (at, got[1], lambda: self._snapshots.state_at(thread_id, at))
        anchor: Record | None = None
        base: Callable[[], ThreadState | None] | None = None
        if fast is not None:
            anchor, scanned, base = fast
        else:
            scanned = whole if whole is not None else scan_file(path, thread_id)
        if scanned.error is not None:
            raise scanned.error
        completed = scanned.torn.completes if scanned.torn is not None else None
        if completed is not None:  # kept: the repair below adds its newline
            scanned.records.append(completed)
            scanned.offsets.append(scanned.torn.offset)  # type: ignore[union-attr]
        lost = lost_acknowledged(thread_id, scanned, self._reader.acknowledged(thread_id), anchor)
        if lost is not None:
            raise lost  # never cut (or write after) what was acknowledged and is gone
        if not scanned.records and anchor is None:
            raise ThreadNotFound(thread_id)
        check_writable_format(thread_id, path, scanned.records)
        fd = self._fops.open(path, os.O_RDWR | os.O_APPEND)
        try:
            self._repair_tail(thread_id, fd, scanned)
            # What the scan saw is made durable before anything is chained onto it: a killed
            # writer may have left records in the page cache only (written, not yet synced),
            # and a record acknowledged on top of them must not be lost with them.
            self._fops.fsync(fd)
            lease.publish(scanned.end)
        except OSError:
            self._fops.close(fd)
            raise
        return RolloutLog(
            thread_id=thread_id,
            path=path,
            fd=fd,
            journal=self._journal,
            scanned=scanned,
            max_record_bytes=self._max_record_bytes,
            anchor=anchor,
            load_prefix=lambda end, digest: prefix_ids(path, thread_id, end, digest),
            load_points=None
            if self._checkpoints is None
            else functools.partial(self._checkpoints.points, thread_id),
            publish=lease.publish,
            first_state=self._first_state(thread_id, anchor, scanned.records, base),
        )

    def _first_state(
        self,
        thread_id: str,
        anchor: Record | None,
        records: list[Record],
        base_state: Callable[[], ThreadState | None] | None,
    ) -> Callable[[], ThreadState | None] | None:
        """How a log opened on ``records`` (after ``anchor``, if any) builds its reduced state
        at its first append: from the records the open read, on the snapshot's state if the
        open started at one (or at a checkpoint: ``base_state``)."""
        if anchor is None or base_state is None:
            return lambda: reduce_log(thread_id, records)

        def from_snapshot() -> ThreadState | None:
            base = base_state()
            if base is None:  # not ours after all: the whole file, as it was opened
                upto = records[-1].ord if records else anchor.ord
                full = scan_file(self._layout.path_of(thread_id), thread_id)
                if full.error is not None and full.error.ord <= upto:
                    raise full.error
                return reduce_log(thread_id, (r for r in full.records if r.ord <= upto))
            return reduce_log(thread_id, records, base)

        return from_snapshot

    def _repair_tail(self, thread_id: str, fd: int, scanned: Scan) -> None:
        """Complete or cut the torn tail ``scanned`` found, and note it as a repair."""
        torn = scanned.torn
        if torn is None:
            return
        if torn.completes is not None:
            self._recovery.note_repair(
                thread_id,
                {"kind": "torn_tail_completed", "offset": torn.offset, "ord": torn.completes.ord},
            )
            log.warning(
                "thread %s: repairing a torn tail: ord %d was whole but for its newline; adding it",
                thread_id,
                torn.completes.ord,
            )
            self._fops.write_all(fd, b"\n")
            scanned.end = torn.offset + torn.size + 1
            scanned.torn = None
            return
        self._recovery.note_repair(
            thread_id,
            {
                "kind": "torn_tail_removed",
                "offset": torn.offset,
                "bytes": torn.size,
                "reason": torn.reason,
            },
        )
        log.warning(
            "thread %s: repairing a torn tail: removing %d bytes at offset %d (%s)",
            thread_id,
            torn.size,
            torn.offset,
            torn.reason,
        )
        self._fops.ftruncate(fd, scanned.end)


def _empty_log() -> None:
    """The state of a thread being created: none yet (its first record is being written)."""
    return None


def check_writable_format(thread_id: str, path: str, records: list[Record]) -> None:
    """Refuse to write a thread that a newer threadlog wrote (before anything is repaired).

    Its ``thread.created`` declares the format it was written in, and each record carries the
    ``v`` it was written with. Appending records of an older format after those would leave a
    log that neither version writes (and a torn-tail repair could cut a record this version
    merely cannot parse). Reading stays possible: the envelope is verified as written; it is
    the reducer (`threadlog.model.upcast`) that refuses records newer than it knows.
    """
    first = records[0] if records and records[0].ord == 1 else None
    if first is None:  # opened from a snapshot's anchor: ord 1 is the file's first line
        try:
            with open(path, "rb") as f:
                first = parse_line(f.readline(MiB))
        except (OSError, BadRecord):
            first = None
    declared = 0
    if first is not None and first.type == "thread.created" and isinstance(first.data, dict):
        fmt = first.data.get("format")
        declared = fmt if type(fmt) is int else 0
    newest = max((r.v for r in records), default=0)
    found = max(declared, newest, first.v if first is not None else 0)
    if found > FORMAT_VERSION:
        raise UsageError(
            f"thread {thread_id} was written in format {found} by a newer threadlog; this one "
            f"writes format {FORMAT_VERSION} and does not append to it: use a newer threadlog "
            "to write it (reading its records still works)"
        )
