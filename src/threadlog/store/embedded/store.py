"""The embedded store: JSONL rollouts (the truth), a SQLite index, an artifact store.

Layout under ``<home>``::

    threads/<yyyy>/<mm>/<thread_id>.jsonl   one rollout per thread, one record per line
    index.sqlite3                           projections, rebuildable from the rollouts
    artifacts/sha256/<ab>/<hex>             content-addressed blobs
    locks/<thread_id>.lock                  single-writer leases (flock)
    journal/<pid>-<random>.wal              the open store's group-commit journal

The month directory comes from the thread id (a UUIDv7 carries its creation time), so a
thread's file is found from its id alone, without the index.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from threadlog import _faults
from threadlog._clock import new_id, rfc3339, wall_ns
from threadlog.errors import (
    InsecureHome,
    IntegrityError,
    InvalidTransition,
    LeaseHeld,
    StorageError,
    ThreadNotFound,
    UsageError,
)
from threadlog.model import codec
from threadlog.model.envelope import (
    FORMAT_VERSION,
    HASH_TAIL,
    BadRecord,
    Record,
    encode_record,
    parse_line,
    verify_lines,
)
from threadlog.model.events import Event, ThreadCreated, from_data, to_data
from threadlog.model.ids import is_uuid, uuid7_millis
from threadlog.model.lineage import Copied, copied_prefix
from threadlog.model.memory import MemoryFact
from threadlog.model.policy import durability_of
from threadlog.model.projection import PROJECTED
from threadlog.model.reducer import replay
from threadlog.model.refs import ArtifactRef
from threadlog.model.refs import resolve as resolve_refs
from threadlog.store._fileops import (
    DEFAULT_FILEOPS,
    FileOps,
    move_to_quarantine,
    remove_orphan_temp,
    remove_orphan_temps,
)
from threadlog.store._home import default_home
from threadlog.store._perms import check_dir, load_secret
from threadlog.store.embedded.artifacts import ArtifactStore
from threadlog.store.embedded.deadjournals import DeadJournal, find_dead_journals, recover_rollout
from threadlog.store.embedded.index import DamagedIndex, Index, IndexedThread
from threadlog.store.embedded.journal import Journal, LogClosed, RolloutLog
from threadlog.store.embedded.leases import Lease, read_durable_end
from threadlog.store.embedded.rollout import Scan, inherited_prefix, scan, scan_file
from threadlog.store.offload import encode_data, summary_of
from threadlog.store.protocol import VerifyReport
from threadlog.store.validate import check_new_thread, normalize_append, refuse_lookalikes

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import EllipsisType, TracebackType

    from threadlog.model.state import ThreadState

__all__ = ["EmbeddedStore", "VerifyReport", "default_home"]

log = logging.getLogger("threadlog.store")

KiB = 1024
MiB = 1024 * KiB


class EmbeddedStore:
    """An event store in a directory. Thread-safe; use as a context manager.

    Args:
        home: the store's directory (created if missing).
        commit_interval: how long buffered appends may wait before their group commit (s).
        artifact_threshold: event data (or one of its top-level values) whose canonical JSON
            is larger than this many bytes goes to the artifact store, the record keeping a
            reference.
        max_record_bytes: the largest record line accepted (after offloading).
        max_open_threads: how many threads may be open for writing at once; beyond it the
            least used idle ones are flushed, closed and their leases released. By default
            it follows the open-files limit (``min(1000, limit // 4)``: an open thread holds
            two descriptors, its rollout and its lease, and reads, the index, the journal
            and the caller need the rest), so any number of threads can be written under a
            small ``ulimit -n``.
        fops: the file-operation layer (tests inject faults through it).
    """

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        *,
        commit_interval: float = 0.1,
        artifact_threshold: int = 64 * KiB,
        max_record_bytes: int = 1 * MiB,
        fops: FileOps = DEFAULT_FILEOPS,
        catch_up: bool = True,
        max_open_threads: int | None = None,
    ) -> None:
        self.home = os.path.abspath(os.fspath(home) if home is not None else default_home())
        self._fops = fops
        self.commit_interval = commit_interval
        self.artifact_threshold = artifact_threshold
        self.max_record_bytes = max_record_bytes
        fd_limit = _raise_fd_limit()
        if max_open_threads is None:
            max_open_threads = min(1000, fd_limit // 4)
        self.max_open_threads = max(1, max_open_threads)
        self._threads_dir = os.path.join(self.home, "threads")
        self._locks_dir = os.path.join(self.home, "locks")
        self._journal_dir = os.path.join(self.home, "journal")
        self.problems: list[dict[str, Any]] = []
        """What the open found wrong and skipped so that the rest works (a journal naming a
        missing rollout, a damaged journal folder, a refused journal…): each a dict with
        ``kind``, ``message`` and, when known, ``thread`` and ``path``. Also logged as
        errors; `threadlog verify` lists them."""
        try:
            fops.makedirs(self.home)
            check_dir(self.home, "the store's home")  # before anything is created in it
            for directory in (self._threads_dir, self._locks_dir):
                fops.makedirs(directory)
            for name in ("threads", "locks", "artifacts", "inbox", "quarantine"):
                check_dir(os.path.join(self.home, name), f"the store's {name} folder")
            try:
                check_dir(self._journal_dir, "the store's journal folder")
            except InsecureHome:
                raise
            except StorageError as exc:  # not a folder: recovery reports it, reads work
                log.debug("%s", exc)
            self._secret, self._secret_since = load_secret(self.home, fops)
        except OSError as exc:
            raise StorageError(f"cannot create the store at {self.home}: {exc}") from exc
        self.artifacts = ArtifactStore(os.path.join(self.home, "artifacts"), fops)
        self.index = self._open_index(os.path.join(self.home, "index.sqlite3"))
        self._logs: dict[str, RolloutLog] = {}
        self._leases: dict[str, Lease] = {}
        self._logs_lock = threading.Lock()
        self._logs_changed = threading.Condition(self._logs_lock)
        self._releasing: set[str] = set()
        """Threads whose release is under way: they are reopened only once it is over."""
        self._backlog: list[tuple[str, str, list[Record], int]] = []
        self._backlog_lock = threading.Lock()
        self._closed = False
        self._listeners: list[Callable[[str, list[Record]], None]] = []
        self._repairs: dict[str, list[dict[str, Any]]] = {}
        self._forked: list[_Forked] = []
        """Forks written by this store, to index from the bytes they were written from."""
        self._drain_lock = threading.Lock()  # held while a drain runs, so flush waits for it
        self._stop = threading.Event()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._async_waiters: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
        self._error_listeners: list[Callable[[StorageError], None]] = []
        self._journal = Journal(
            self._journal_dir,
            fops,
            self._on_durable,
            secret=self._secret,
            on_failure=self._on_failure,
        )
        self._closed_why = "the store is closed"
        try:
            self.recover()
            self.artifacts.sweep_temp_files()
            remove_orphan_temps(self._journal_dir)  # journals a crash left half created
            if catch_up:
                self.catch_up()
        except BaseException as exc:
            self.index.close()
            if isinstance(exc, OSError):
                raise StorageError(f"cannot open the store at {self.home}: {exc}") from exc
            raise
        _OPEN_STORES.add(self)
        self._background = threading.Thread(
            target=self._run_background, name="threadlog-committer", daemon=True
        )
        self._background.start()

    def _open_index(self, path: str) -> Index:
        """Open the index; a damaged one (see `DamagedIndex`) is set aside and rebuilt (it is
        only a projection). A locked or unwritable one is an error that says so."""
        try:
            return Index(path)
        except DamagedIndex as exc:
            return self._replace_index(path, exc)

    def _replace_index(self, path: str, exc: DamagedIndex) -> Index:
        """Move a damaged index (and its -wal/-shm) aside and open a new, empty one."""
        aside = f"{path}.damaged-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        log.warning("%s; moved it to %s and rebuilding it", exc, aside)
        for suffix in ("", "-wal", "-shm"):
            try:
                os.replace(path + suffix, aside + suffix)
            except FileNotFoundError:
                pass
            except OSError as err:
                raise StorageError(
                    f"{exc}, and it cannot be moved aside ({err}); move {path}{suffix} "
                    "away and retry"
                ) from err
        index = Index(path)
        saved = index.salvage_acknowledged(aside)
        if saved:
            log.warning("kept the acknowledged marks of %d thread(s) from %s", saved, aside)
        return index

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> EmbeddedStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Flush everything, bring the index up to date, release every lease. Idempotent."""
        if self._closed:
            return
        _OPEN_STORES.discard(self)
        self._closed = True
        self._stop.set()
        self._background.join(timeout=10)
        try:
            self._journal.close()
        finally:
            with self._logs_lock:
                for rollout in self._logs.values():
                    rollout.closed = True
                    self._fops.close(rollout.fd)
                self._logs.clear()
                for lease in self._leases.values():  # with those kept by a failed release
                    lease.release()
                self._leases.clear()
            try:
                self._drain_backlog()
            except StorageError as exc:
                # The index is a projection: the next open catches it up from the rollouts.
                log.warning("index not brought up to date at close (%s); it will catch up", exc)
            finally:
                self.index.close()
                if self._executor is not None:
                    self._executor.shutdown(wait=True)

    def flush(self) -> None:
        """Make every buffered append durable and update the index."""
        self._journal.flush()
        self._drain_backlog()

    def release(self, thread_id: str) -> None:
        """Flush and close one thread's log and give up its lease."""
        with self._logs_lock:
            while thread_id in self._releasing:  # another release of it: wait for that one
                self._logs_changed.wait()
            rollout = self._logs.pop(thread_id, None)
            lease = self._leases.pop(thread_id, None)
            if lease is None and rollout is None:
                return  # not open here
            self._releasing.add(thread_id)  # (only this call removes it: see finally)
        try:
            if rollout is not None:
                with rollout._lock:  # no new submissions
                    rollout.closed = True
                try:
                    self._journal.sync_rollout(rollout)
                except BaseException:
                    # Keep the lease until close: this store's journal (poisoned, left in
                    # place) may hold records of the thread that only the next open may
                    # replay; another writer must not write the thread before that.
                    if lease is not None:
                        with self._logs_lock:
                            self._leases[thread_id] = lease
                        lease = None
                    raise
                self._fops.close(rollout.fd)
            if lease is not None:
                lease.release()
        finally:
            with self._logs_lock:
                self._releasing.discard(thread_id)
                self._logs_changed.notify_all()

    # -- writing ---------------------------------------------------------------------------

    def create_thread(
        self,
        principal: str = "local",
        *,
        title: str | None = None,
        lineage: dict[str, Any] | None = None,
        **config: Any,
    ) -> str:
        """Create a thread (its ``thread.created`` record is durable on return); its id."""
        self._check_open()
        check_new_thread(principal, lineage, config)
        event = ThreadCreated(
            format=FORMAT_VERSION,
            principal=principal,
            config=config,
            lineage=lineage,
            title=title,
        )
        _, data = to_data(event)
        data_json = codec.canonical(data)
        refuse_lookalikes(event.type, data, data_json)
        now = wall_ns()
        thread_id = new_id(now)
        path = self.path_of(thread_id)
        directory = os.path.dirname(path)
        fd: int | None = None
        lease: Lease | None = None
        submitted = False
        try:
            self._fops.makedirs(directory)
            fd = self._fops.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
            # The lease locks the rollout itself. Until then nobody else knows the new id,
            # and a catch-up leaves a young file without a record alone.
            lease = Lease(self._locks_dir, thread_id, path)
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
                max_record_bytes=self.max_record_bytes,
                publish=lease.publish,
            )
            lease.publish(0)
            _, seq = rollout.submit(
                id=new_id(now),
                type=event.type,
                data=data,
                data_json=data_json,
                parent=None,
                ts=rfc3339(now),
                expect_ord=1,
            )
            submitted = True
            with self._logs_lock:
                if len(self._logs) >= self.max_open_threads:
                    self._evict_locked()
                self._logs[thread_id] = rollout
                self._leases[thread_id] = lease
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

    def append(
        self,
        thread_id: str,
        type: str | Event,
        data: Any = None,
        *,
        durable: bool | None = None,
        id: str | None = None,
        parent: str | None | EllipsisType = ...,
        expect_ord: int | None = None,
        check: Callable[[Record], object] | None = None,
    ) -> Record:
        """Append one event and return its record.

        Args:
            thread_id: the thread (this process takes its single-writer lease on first use).
            type: an event type name with ``data``, or a typed event (then ``data`` is unused).
            durable: True waits for fsync (critical), False returns once queued (buffered,
                committed within ``commit_interval``); None takes the type's class.
            id: a stable event id; appending an id that is already stored returns the stored
                record if the content is the same and raises `DuplicateEventConflict` if not.
            parent: the record this one continues on the conversation tree (default: the
                previous record).
            expect_ord: the ordinal this record must get, else `OrdinalConflict`.
            check: called with the finished record just before it is queued, under the
                thread's lock; if it raises, nothing is written (the runtime applies the
                record to its in-memory state here, so that state and log cannot diverge).
        """
        seq, record = self._submit(thread_id, type, data, durable, id, parent, expect_ord, check)
        if seq:
            self._journal.wait(seq)
        return record

    async def aappend(
        self,
        thread_id: str,
        type: str | Event,
        data: Any = None,
        *,
        durable: bool | None = None,
        id: str | None = None,
        parent: str | None | EllipsisType = ...,
        expect_ord: int | None = None,
        check: Callable[[Record], object] | None = None,
    ) -> Record:
        """`append` for asyncio: waits for durability without blocking the event loop.

        Concurrent ``aappend`` calls on one thread share one fsync (group commit).
        """
        seq, record = self._submit(thread_id, type, data, durable, id, parent, expect_ord, check)
        if seq:
            await self._await_durable(seq)
        return record

    def _submit(
        self,
        thread_id: str,
        type_: str | Event,
        data: Any,
        durable: bool | None,
        id: str | None,
        parent: str | None | EllipsisType,
        expect_ord: int | None,
        check: Callable[[Record], object] | None = None,
    ) -> tuple[int, Record]:
        """Queue a record; returns (journal sequence to wait for, or 0, record)."""
        if self._closed:
            raise UsageError(self._closed_why)
        if type_.__class__ is str and type_ in _PLAIN_CUSTOM and id is None and parent is ...:
            type_name = type_  # the hot path: a known custom type (no schema to check)
            if data is None:
                data = {}
        else:
            type_name, data = normalize_append(type_, data, id, parent)
            if type_name.startswith("custom."):
                _PLAIN_CUSTOM.add(type_name)
        data, data_json = self._encode(type_name, data)
        now = time.time_ns()
        event_id = id or new_id(now)
        while True:
            rollout = self._logs.get(thread_id) or self._log(thread_id)
            try:
                record, seq = rollout.submit(
                    id=event_id,
                    type=type_name,
                    data=data,
                    data_json=data_json,
                    parent=parent,
                    ts=rfc3339(now),
                    expect_ord=expect_ord,
                    check=check,
                    explicit_id=id is not None,
                )
                break
            except LogClosed:
                # released or evicted under us: reopen and try again, once the eviction (which
                # holds the logs lock) is over; if closing it failed, the journal is poisoned:
                # fail instead of spinning on the closed log
                self._check_open()
                self._journal.check()
                with self._logs_lock:
                    pass
        if durable is None:
            durable = durability_of(type_name) == "critical"
        return (seq if durable else 0), record

    def _encode(self, type_name: str, data: Any) -> tuple[Any, bytes]:
        """Canonical JSON of the data as stored (`threadlog.store.offload`)."""
        return encode_data(type_name, data, self.artifact_threshold, self._offload)

    def _offload(self, value: Any, value_json: bytes) -> ArtifactRef:
        return self.artifacts.put(
            value_json, media_type="application/json", summary=summary_of(value, value_json)
        )

    async def _await_durable(self, seq: int) -> None:
        # One executor job per group commit; the tasks waiting for it each await a future of
        # their own (so cancelling one waiter cancels nobody else's wait).
        loop = asyncio.get_running_loop()
        journal = self._journal
        while journal.durable_seq < seq:
            waiters = self._async_waiters.get(loop)
            if waiters is None:
                waiters = self._async_waiters[loop] = []
            if not waiters:
                # Start the commit on the next turn of the loop, not now: the tasks woken by
                # the previous commit are already queued to run, and each adds its record to
                # this batch first (starting at once would commit a batch of one, then the rest).
                loop.call_soon(self._start_commit, loop, waiters)
            fut: asyncio.Future[None] = loop.create_future()
            waiters.append(fut)
            await fut

    def _start_commit(
        self, loop: asyncio.AbstractEventLoop, waiters: list[asyncio.Future[None]]
    ) -> None:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=2, thread_name_prefix="threadlog-commit"
            )
        journal = self._journal
        job = loop.run_in_executor(self._executor, journal.wait, journal.submitted)
        job.add_done_callback(functools.partial(_wake, waiters=waiters))

    def acquire(self, thread_id: str) -> None:
        """Open a thread for writing now: take its lease and repair or replay it if needed.

        Raises `LeaseHeld` if another process writes it, `ThreadNotFound`, `IntegrityError`.
        """
        self._check_open()
        self._log(thread_id)

    def _log(self, thread_id: str) -> RolloutLog:
        rollout = self._logs.get(thread_id)
        if rollout is not None:
            return rollout
        with self._logs_lock:
            while thread_id in self._releasing:  # this store is still giving it up
                self._logs_changed.wait()
            rollout = self._logs.get(thread_id)
            if rollout is None and thread_id in self._leases:
                self._journal.check()  # a failed release kept the lease: the journal says why
            if rollout is None:
                if len(self._logs) >= self.max_open_threads:
                    self._evict_locked()
                rollout = self._open_for_writing(thread_id)
                self._logs[thread_id] = rollout
            return rollout

    def _evict_locked(self) -> None:
        """Close the least used half of the open logs (``_logs_lock`` held)."""
        victims = sorted(self._logs.values(), key=lambda r: r.uses)[: max(1, len(self._logs) // 2)]
        for rollout in victims:
            with rollout._lock:
                rollout.closed = True
            self._journal.sync_rollout(rollout)
            self._fops.close(rollout.fd)
            del self._logs[rollout.thread_id]
            self._leases.pop(rollout.thread_id).release()
        for rollout in self._logs.values():
            rollout.uses = 0

    def _anchored_tail(
        self, thread_id: str, path: str, durable: int | None = None
    ) -> tuple[Record, Scan] | None:
        """The thread's snapshot anchor (verified against the rollout) and the scan of what
        follows it; None when there is no usable snapshot."""
        snap = self.index.get_snapshot(thread_id)
        if snap is None:
            return None
        ord_, digest, end, _, _ = snap
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if end > size:
                    return None
                start = max(0, end - self.max_record_bytes - 1)
                first = f.readline(self.max_record_bytes + 1)
                f.seek(start)
                head = f.read(end - start)
                tail = f.read() if durable is None else f.read(max(0, durable - end))
        except FileNotFoundError:
            return None
        cut = head.rfind(b"\n", 0, len(head) - 1)
        if cut < 0 and start > 0:
            return None
        try:
            anchor = parse_line(head[cut + 1 :])
            created = parse_line(first)
            copied = inherited_prefix(created)
        except (BadRecord, ValueError):
            return None
        if anchor.ord != ord_ or anchor.hash != digest or created.thread != thread_id:
            return None
        if anchor.thread != thread_id and not (
            copied and anchor.ord <= copied.until and anchor.thread in copied.threads
        ):
            return None
        scanned = scan(
            tail, thread_id, base_offset=end, start_ord=ord_ + 1, prev_hash=digest, copied=copied
        )
        if scanned.error is not None:
            return None  # let the full scan find and report it
        return anchor, scanned

    def _open_for_writing(self, thread_id: str) -> RolloutLog:
        path = self.path_of(thread_id)
        if not os.path.isfile(path):
            if thread_id in self.missing_threads():
                raise IntegrityError(
                    thread_id, 1, "the rollout file is missing, yet records were acknowledged"
                )
            raise ThreadNotFound(thread_id)
        try:
            lease = Lease(self._locks_dir, thread_id, path)
        except FileNotFoundError:
            raise ThreadNotFound(thread_id) from None
        try:
            fast = None if self._has_dead_journals() else self._anchored_tail(thread_id, path)
            anchor: Record | None = None
            if fast is not None:
                anchor, scanned = fast
            else:
                scanned = self._recover_thread(thread_id, path)
            if scanned.error is not None:
                raise scanned.error
            completed = scanned.torn.completes if scanned.torn is not None else None
            if completed is not None:  # kept: the repair below adds its newline
                scanned.records.append(completed)
                scanned.offsets.append(scanned.torn.offset)  # type: ignore[union-attr]
            lost = self._lost_acknowledged(
                thread_id, scanned, self._acknowledged(thread_id), anchor
            )
            if lost is not None:
                raise lost  # never cut (or write after) what was acknowledged and is gone
            if not scanned.records and anchor is None:
                raise ThreadNotFound(thread_id)
            _check_writable_format(thread_id, path, scanned.records)
            fd = self._fops.open(path, os.O_RDWR | os.O_APPEND)
            if completed is not None:
                torn = scanned.torn
                assert torn is not None
                self._note_repair(
                    thread_id,
                    {"kind": "torn_tail_completed", "offset": torn.offset, "ord": completed.ord},
                )
                log.warning(
                    "thread %s: repairing a torn tail: ord %d was whole but for its newline; "
                    "adding it",
                    thread_id,
                    completed.ord,
                )
                try:
                    self._fops.write_all(fd, b"\n")
                except OSError:
                    self._fops.close(fd)
                    raise
                scanned.end = torn.offset + torn.size + 1
                scanned.torn = None
            elif scanned.torn is not None:
                torn = scanned.torn
                self._note_repair(
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
                try:
                    self._fops.ftruncate(fd, scanned.end)
                except OSError:
                    self._fops.close(fd)
                    raise
            # What the scan saw is made durable before anything is chained onto it: a killed
            # writer may have left records in the page cache only (written, not yet synced),
            # and a record acknowledged on top of them must not be lost with them.
            try:
                self._fops.fsync(fd)
                lease.publish(scanned.end)
            except OSError:
                self._fops.close(fd)
                raise
            rollout = RolloutLog(
                thread_id=thread_id,
                path=path,
                fd=fd,
                journal=self._journal,
                scanned=scanned,
                max_record_bytes=self.max_record_bytes,
                anchor=anchor,
                load_prefix=lambda: scan_file(path, thread_id),
                publish=lease.publish,
            )
        except OSError as exc:
            lease.release()
            raise StorageError(f"cannot open thread {thread_id} for writing: {exc}") from exc
        except BaseException:
            lease.release()
            raise
        self._leases[thread_id] = lease
        return rollout

    def add_listener(self, listener: Callable[[str, list[Record]], None]) -> None:
        """Call ``listener(thread_id, records)`` whenever records become durable and readable.

        Called from the committing thread, in commit order per thread; it must be quick and
        must not block (hand the records to an event loop with ``call_soon_threadsafe``).
        """
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[str, list[Record]], None]) -> None:
        self._listeners.remove(listener)

    def add_error_listener(self, listener: Callable[[StorageError], None]) -> None:
        """Call ``listener(error)`` once if the store stops acknowledging writes (a failed
        write or fsync: fail-stop, RELIABILITY A4); at once if it already has.

        No record becomes durable after that, so anyone waiting for records (a subscriber
        tailing a thread) must hear of it instead of waiting forever. Called from the failing
        thread; it must be quick and must not block.
        """
        self._error_listeners.append(listener)
        error = self._journal.error
        if error is not None:
            listener(error)

    def remove_error_listener(self, listener: Callable[[StorageError], None]) -> None:
        self._error_listeners.remove(listener)

    def _on_failure(self, error: StorageError) -> None:
        for listener in list(self._error_listeners):
            try:
                listener(error)
            except Exception:
                log.exception("a store error listener failed")

    def _on_durable(self, rollout: RolloutLog, records: list[Record], end: int) -> None:
        if rollout.publish is not None:
            try:
                rollout.publish(end)  # readers in other processes may now read up to ``end``
            except OSError as exc:  # they keep stopping at the last end published: safe
                log.warning("thread %s: cannot publish its durable end: %s", rollout.thread_id, exc)
        _faults.after_durable(records)
        for listener in self._listeners:
            try:
                listener(rollout.thread_id, records)
            except Exception:
                log.exception("a store listener failed")
        with self._backlog_lock:
            self._backlog.append((rollout.thread_id, rollout.path, records, end))

    # -- background group commit and index ---------------------------------------------------

    def _has_dead_journals(self) -> bool:
        """Whether any journal other than this store's own exists (it may be a dead one)."""
        try:
            names = os.listdir(self._journal_dir)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError:
            return True  # the full recovery says what is wrong
        own = os.path.basename(self._journal.path) if self._journal.path else None
        return any(n.endswith(".wal") and n != own for n in names)

    def save_snapshot(
        self, thread_id: str, payload: bytes, *, ord: int, hash: str, version: str
    ) -> bool:
        """Keep a snapshot of reduced state after record ``ord`` (which must have ``hash``).

        The thread must be open for writing here, and the record durable (the journal is
        flushed first). Returns False, saving nothing, when that cannot be checked.
        """
        rollout = self._logs.get(thread_id)
        if rollout is None:
            return False
        self._journal.flush()
        end = rollout.offset_after(ord)
        if end is None or (ord == rollout.last_ord and rollout.last_hash != hash):
            return False
        self.index.put_snapshot(thread_id, ord, hash, end, version, payload)
        return True

    def load_snapshot(self, thread_id: str, version: str) -> tuple[int, bytes] | None:
        """``(ord, payload)`` of the thread's snapshot, if it is of ``version`` and its anchor
        record is still in the rollout with the same hash."""
        snap = self.index.get_snapshot(thread_id)
        if snap is None or snap[3] != version:
            return None
        if (
            self._anchored_tail(thread_id, self.path_of(thread_id), self.durable_end(thread_id))
            is None
        ):
            return None
        return snap[0], snap[4]

    def _recover_thread(self, thread_id: str, path: str) -> Scan:
        """Scan a thread's rollout, first replaying its records from dead journals."""
        dead = self._dead_journals()
        try:
            entries = [e for journal in dead for e in journal.entries.get(thread_id, ())]
            before = os.path.getsize(path)
            scanned = recover_rollout(path, thread_id, self._fops, entries)
            if entries and os.path.getsize(path) != before:
                self._note_repair(
                    thread_id, {"kind": "journal_replayed", "last_ord": scanned.records[-1].ord}
                )
            return scanned
        finally:
            for journal in dead:
                journal.release()

    def _dead_journals(self) -> list[DeadJournal]:
        return find_dead_journals(
            self._journal_dir,
            self._secret,
            self._fops,
            legacy_before=self._secret_since,
            report=self._report,
        )

    def _report(
        self, kind: str, message: str, path: str | None = None, thread: str | None = None
    ) -> None:
        """Record a problem the open skipped (see `problems`); logged by the caller."""
        problem = {"kind": kind, "message": message, "path": path, "thread": thread}
        if problem not in self.problems:
            self.problems.append(problem)

    def _note_repair(self, thread_id: str, repair: dict[str, Any]) -> None:
        self._repairs.setdefault(thread_id, []).append(repair)

    def take_repairs(self, thread_id: str) -> list[dict[str, Any]]:
        """What this store repaired in the thread's files since it opened (torn tails cut,
        records replayed from a crashed store's journal); cleared by the call."""
        return self._repairs.pop(thread_id, [])

    def recover(self) -> list[str]:
        """Replay the journals of crashed stores into their rollouts and delete them.

        Runs on open. Threads whose lease another live process holds were recovered by that
        process when it took the lease; a journal is deleted only once every thread in it has
        its records in its rollout. Returns the ids of the threads repaired here.
        """
        try:
            dead = self._dead_journals()
        except StorageError as exc:
            # Reads need no journal; no thread is opened for writing before its dead
            # journals can be read (`_recover_thread` raises this again).
            log.error("recovery: %s", exc)
            self._report(
                "journal_unreadable",
                f"{exc}; no thread can be written until it can be read",
                self._journal_dir,
            )
            return []
        repaired: list[str] = []
        held: set[str] = set()
        skipped: set[str] = set()  # threads whose records were not replayed
        try:
            threads: dict[str, list[tuple[Record, bytes]]] = {}
            for journal in dead:
                for thread_id, entries in journal.entries.items():
                    threads.setdefault(thread_id, []).extend(entries)
            for thread_id, entries in threads.items():
                problem = self._unrecoverable(thread_id)
                if problem is not None:
                    log.error("recovery: %s", problem)
                    self._report("journal_thread", problem, thread=thread_id)
                    skipped.add(thread_id)
                    continue
                path = self.path_of(thread_id)
                try:
                    lease = Lease(self._locks_dir, thread_id, path)
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
                    scanned = recover_rollout(path, thread_id, self._fops, entries)
                    if os.path.getsize(path) != before:
                        repaired.append(thread_id)
                        self._note_repair(
                            thread_id,
                            {"kind": "journal_replayed", "last_ord": scanned.records[-1].ord},
                        )
                except IntegrityError as exc:
                    log.error("recovery: %s", exc)
                    self._report("journal_thread", str(exc), path, thread_id)
                    skipped.add(thread_id)
                finally:
                    lease.release()
            for journal in dead:
                # Not while another store writes one of its threads: it may not have synced
                # the records its open found in the page cache yet. Never one holding
                # records that could not be replayed (A5).
                if (
                    held.isdisjoint(journal.entries)
                    and skipped.isdisjoint(journal.entries)
                    and all(self._has_records(t, e) for t, e in journal.entries.items())
                ):
                    journal.try_delete(self._fops)
        except OSError as exc:
            # e.g. ENOSPC or EIO writing a rollout: fail-stop (A4); the journals are kept
            raise StorageError(
                f"cannot replay the journals of {self._journal_dir} into their threads: "
                f"{exc}; nothing acknowledged is lost (the journals are kept): fix the disk "
                "(free space?) and open the store again"
            ) from exc
        finally:
            for journal in dead:
                journal.release()
        return repaired

    def _unrecoverable(self, thread_id: str) -> str | None:
        """Why a thread named in a dead journal cannot take its records back, if it cannot."""
        if not is_uuid(thread_id):
            return (
                f"a journal holds records of {thread_id!r:.80}, which is not a thread id; "
                "they are not replayed and the journal is kept"
            )
        path = self.path_of(thread_id)
        if not os.path.isfile(path):
            return (
                f"a journal holds records of thread {thread_id}, whose rollout {path} is "
                "gone; they are not replayed and the journal is kept"
            )
        return None

    def _has_records(self, thread_id: str, entries: list[tuple[Record, bytes]]) -> bool:
        """Whether the thread's rollout holds the last of its records in a journal."""
        last = entries[-1][0]
        try:
            scanned = scan_file(self.path_of(thread_id), thread_id)
        except FileNotFoundError:
            return False
        return len(scanned.records) >= last.ord and scanned.records[last.ord - 1].hash == last.hash

    def _run_background(self) -> None:
        while not self._stop.wait(self.commit_interval):
            if self._journal.has_pending:
                try:
                    self._journal.flush()
                except StorageError as exc:
                    log.error("background commit failed: %s", exc)
            try:
                self._drain_backlog()
            except StorageError as exc:  # e.g. another process holds the index too long
                log.warning("index update failed (%s); it will catch up on the next open", exc)
            except Exception:
                log.exception("index update failed; it will catch up on the next open")

    def _drain_backlog(self) -> None:
        with self._drain_lock:
            with self._backlog_lock:
                appended, self._backlog = self._backlog, []
                forked, self._forked = self._forked, []
            # forks first (written whole, and verified as they were written), then what was
            # appended since
            batches = [fork.batch() for fork in forked]
            batches += appended
            if batches:
                self.index.apply(batches)

    # -- reading ---------------------------------------------------------------------------

    def path_of(self, thread_id: str) -> str:
        """The rollout file of a thread (which need not exist)."""
        if not is_uuid(thread_id):
            raise UsageError(f"not a thread id: {thread_id!r:.80}")
        when = datetime.fromtimestamp(uuid7_millis(thread_id) / 1000, UTC)
        return os.path.join(self._threads_dir, f"{when:%Y}", f"{when:%m}", f"{thread_id}.jsonl")

    def exists(self, thread_id: str) -> bool:
        return is_uuid(thread_id) and os.path.isfile(self.path_of(thread_id))

    def read(self, thread_id: str, after: int = 0, *, limit: int | None = None) -> list[Record]:
        """Durable records of a thread with ``ord > after``, verified, in order.

        A torn tail (an interrupted write) is not returned; damage raises `IntegrityError`.
        With ``limit``, from the start of the log, only the lines needed are read and verified
        (damage further on is not looked for).
        """
        path = self.path_of(thread_id)
        rollout = self._logs.get(thread_id)
        fresh = rollout.take_fresh() if rollout is not None else None
        if fresh:  # just verified by opening the thread (and synced), only this store writes it
            return fresh[after:] if limit is None else fresh[after : after + limit]
        known = self._acknowledged(thread_id)
        end = self.durable_end(thread_id)
        records = self._read_file(path, thread_id, after, limit, end, known)
        if end is None:
            # Durable before visible: no live writer says how far the file is durable, and a
            # killed one may have left records it never synced; sync the file now that it is
            # read, so that nothing returned here can be lost by a power cut.
            self._sync_file(path)
        return records

    def follow(self, thread_id: str, after: int = 0, *, interval: float = 0.2) -> Iterator[Record]:
        """`Store.follow`: the durable records after ``after``, then each new one. Reads the
        rollout itself, so it works beside a live writer in another process; it stops where
        the writer publishes its records durable (`durable_end`)."""
        path = self.path_of(thread_id)
        known = self._acknowledged(thread_id)
        scanned = self._scan_whole(path, thread_id, self.durable_end(thread_id), known)
        yield from scanned.records[after:]
        last = scanned.records[-1]
        ord_, prev, offset = last.ord, last.hash, scanned.end
        with open(path, "rb") as f:
            while True:
                durable = self.durable_end(thread_id)
                f.seek(offset)
                chunk = f.read() if durable is None else f.read(max(0, durable - offset))
                tail = scan(
                    chunk, thread_id, base_offset=offset, start_ord=ord_ + 1, prev_hash=prev
                )
                if tail.error is not None:
                    raise tail.error
                if tail.records:
                    if durable is None:
                        self._sync_file(path)  # durable before visible (as `read`)
                    yield from tail.records
                    ord_, prev, offset = tail.records[-1].ord, tail.records[-1].hash, tail.end
                time.sleep(interval)

    def durable_end(self, thread_id: str) -> int | None:
        """The byte offset up to which the thread's rollout is known durable while a live
        writer holds it (this store, or another process, which publishes it after every
        commit); None when nobody writes it. Readers stop there: bytes past it may not be on
        disk yet, and a failed fsync would cut them (issue 9)."""
        rollout = self._logs.get(thread_id)
        if rollout is not None:
            return rollout.size
        return read_durable_end(self._locks_dir, thread_id)

    def _sync_file(self, path: str) -> None:
        """fdatasync a file through a read-only descriptor (about 40 µs when nothing is dirty)."""
        fops = self._fops
        try:
            fd = fops.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StorageError(f"cannot sync {path}: {exc}") from exc
        try:
            fops.fdatasync(fd)
        except OSError as exc:
            raise StorageError(f"cannot sync {path}: {exc}") from exc
        finally:
            fops.close(fd)

    def _read_file(
        self,
        path: str,
        thread_id: str,
        after: int,
        limit: int | None,
        end: int | None,
        known: tuple[int, str | None, int] | None,
    ) -> list[Record]:
        if limit is not None and after == 0:
            head = self._read_head(path, thread_id, limit, end)
            if head is not None:
                return head
        if after > 0:
            snap = self.index.get_snapshot(thread_id)
            if snap is not None and snap[0] <= after:
                fast = self._anchored_tail(thread_id, path, end)
                if fast is not None:  # read only what follows the snapshot's anchor
                    lost = self._lost_acknowledged(thread_id, fast[1], known, fast[0])
                    if lost is not None:
                        raise lost
                    records = [r for r in fast[1].records if r.ord > after]
                    return records[:limit] if limit is not None else records
        scanned = self._scan_whole(path, thread_id, end, known)
        records = scanned.records[after:] if after > 0 else scanned.records
        return records[:limit] if limit is not None else records

    def _scan_whole(
        self,
        path: str,
        thread_id: str,
        end: int | None,
        known: tuple[int, str | None, int] | None,
    ) -> Scan:
        """The whole log up to ``end``, checked as a reader must: damage, records lost below
        the acknowledged mark ``known`` (taken before ``end``), a thread that has none."""
        try:
            scanned = scan_file(path, thread_id, end=end)
        except FileNotFoundError:
            raise ThreadNotFound(thread_id) from None
        if scanned.error is not None:
            raise scanned.error
        lost = self._lost_acknowledged(thread_id, scanned, known)
        if lost is not None:
            raise lost
        if not scanned.records:
            raise ThreadNotFound(thread_id)
        return scanned

    def _read_head(
        self, path: str, thread_id: str, count: int, end: int | None
    ) -> list[Record] | None:
        """The first ``count`` records, from the first ``count`` lines alone; None when there
        are fewer or they are not all valid (the full scan then tells a torn tail from damage)."""
        lines = []
        read = 0
        try:
            with open(path, "rb") as f:
                for _ in range(count):
                    line = f.readline(self.max_record_bytes + 2)
                    if not line.endswith(b"\n") or (end is not None and read + len(line) > end):
                        break
                    lines.append(line)
                    read += len(line)
        except FileNotFoundError:
            raise ThreadNotFound(thread_id) from None
        scanned = scan(b"".join(lines), thread_id, whole=False)
        if scanned.error is not None or scanned.torn is not None:
            return None
        if len(scanned.records) < count:
            return None  # a short log: the full scan checks how it ends
        return scanned.records

    def iter_records(self, thread_id: str, after: int = 0) -> Iterator[Record]:
        yield from self.read(thread_id, after)

    def state(self, thread_id: str) -> ThreadState:
        """The thread's state, reduced from its log."""
        return replay(self.read(thread_id))

    def resolve(self, data: Any) -> Any:
        """Record data as it was appended: every artifact reference (top level or one level
        down) loaded, and every escaped look-alike unwrapped (`threadlog.model.refs`)."""
        return resolve_refs(data, self._load_ref)

    def _load_ref(self, ref: ArtifactRef) -> Any:
        return codec.loads(self.artifacts.get(ref.sha256))

    def threads(
        self, *, principal: str | None = None, limit: int | None = None
    ) -> list[IndexedThread]:
        """Threads from the index, most recently active first."""
        self._drain_backlog()
        return self.index.threads(principal=principal, limit=limit)

    def memories(
        self, *, principal: str | None = None, include_revoked: bool = False
    ) -> list[dict[str, Any]]:
        """Remembered facts of every thread (from the index), oldest first."""
        self._drain_backlog()
        return self.index.memories(principal=principal, include_revoked=include_revoked)

    def shared_memories(self, principal: str) -> list[MemoryFact]:
        """Live facts other threads may offer: the principal's, and every project fact."""
        rows = self.memories()
        return [
            MemoryFact(
                r["memory_id"],
                r["thread_id"],
                r["fact"],
                r["scope"],
                r["written_at"],
                r["expires_at"],
                r["key"],
                r["source_event"],
            )
            for r in rows
            if r["scope"] == "project"
            or (r["scope"] == "principal" and r["principal"] == principal)
        ]

    def turns(self, thread_id: str) -> list[dict[str, Any]]:
        """The thread's turns from the index, in order."""
        self._drain_backlog()
        return self.index.turns(thread_id)

    def tool_calls(self, thread_id: str) -> list[dict[str, Any]]:
        """The thread's tool calls from the index, in order."""
        self._drain_backlog()
        return self.index.tool_calls(thread_id)

    def thread_info(self, thread_id: str) -> IndexedThread:
        self._drain_backlog()
        info = self.index.thread(thread_id)
        if info is None:
            raise ThreadNotFound(thread_id)
        return info

    def _acknowledged(self, thread_id: str) -> tuple[int, str | None, int] | None:
        """The index's acknowledged mark of a thread ``(last_ord, last_hash, bytes)``, if any.

        Take it *before* `durable_end` and the read it bounds: a writer publishes an end before
        its index acknowledges anything up to it, so a mark taken first is never ahead of the
        file read after it (taken after, a busy writer's mark is, and reads as lost records)."""
        try:
            return self.index.acknowledged(thread_id).get(thread_id)
        except StorageError as exc:
            log.warning(
                "thread %s: the index cannot say what was acknowledged (%s)", thread_id, exc
            )
            return None

    def _lost_acknowledged(
        self,
        thread_id: str,
        scanned: Scan,
        known: tuple[int, str | None, int] | None,
        anchor: Record | None = None,
        prefix: int = 0,
    ) -> IntegrityError | None:
        """Damage no scan can see: the log holds fewer records than ``known`` (the thread's
        `_acknowledged` mark) says were acknowledged (a cut at a line boundary, a file restored
        from an old copy), or another record at the last acknowledged ordinal. None when it
        holds them all (or the index, only a projection, cannot say)."""
        if known is None:
            return None
        ord_, hash_, _ = known
        records = scanned.records
        last = records[-1] if records else anchor
        have = last.ord if last is not None else prefix  # (``prefix``: ords known before)
        if have < ord_:
            return IntegrityError(
                thread_id,
                have + 1,
                f"{ord_ - have} acknowledged record(s) missing: the log ends at ord {have} but "
                f"ord {ord_} was acknowledged (the index knew it); restore the file from a "
                "backup, or salvage what is left with `threadlog fork`",
                offset=scanned.end,
            )
        at = ord_ - records[0].ord if records else -1
        if 0 <= at < len(records) and records[at].hash != hash_:
            return IntegrityError(
                thread_id,
                ord_,
                "this is not the record that was acknowledged at this ordinal (the index knew "
                "another hash): the file was replaced",
                offset=scanned.offsets[at],
            )
        return None

    def verify(self, thread_id: str, *, check_events: bool = True) -> VerifyReport:
        """Check a thread's framing, hashes, chain and ordinals (and, by default, that every
        event is legal for the reducer). Reports; never repairs."""
        path = self.path_of(thread_id)
        try:
            known = self._acknowledged(thread_id)
            scanned = scan_file(path, thread_id, end=self.durable_end(thread_id))
        except FileNotFoundError:
            if thread_id not in self.missing_threads():
                raise ThreadNotFound(thread_id) from None
            scanned = Scan()
        error: IntegrityError | InvalidTransition | None = scanned.error
        if error is None:
            error = self._lost_acknowledged(thread_id, scanned, known)
        if error is None:
            # a crashed store's journal holds records of the thread that could not be replayed
            journal = next((p for p in self.problems if p["thread"] == thread_id), None)
            if journal is not None:
                last_ord = scanned.records[-1].ord if scanned.records else 0
                error = IntegrityError(thread_id, last_ord + 1, journal["message"])
        if error is None and not scanned.records:
            raise ThreadNotFound(thread_id)  # never born: its first record was never acknowledged
        if error is None and check_events:
            try:
                replay(scanned.records)
            except (InvalidTransition, IntegrityError) as exc:
                error = exc
            except UsageError as exc:  # data that does not fit its type
                bad = _first_undecodable(scanned.records)
                error = InvalidTransition(str(exc), ord=bad)
        last = scanned.records[-1].ord if scanned.records else 0
        return VerifyReport(
            thread_id, error is None, len(scanned.records), last, scanned.torn, error
        )

    def missing_threads(self) -> list[str]:
        """Threads with acknowledged records whose rollout file is gone (deleted or moved):
        `verify` reports them as damaged, since nothing of threadlog deletes a rollout."""
        try:
            known = self.index.acknowledged()
        except StorageError:
            return []
        return sorted(t for t in known if not os.path.exists(self.path_of(t)))

    def thread_ids(self) -> list[str]:
        """Every thread with a rollout file, from the file system (not the index): those with
        a complete line, and those whose only bytes are damaged (a whole record whose newline
        was overwritten is still a thread, and `verify` must say so)."""
        return [tid for tid, path in self._rollout_files() if _has_a_record(path, tid)]

    def _remove_unborn(self, thread_id: str, path: str) -> None:
        """A rollout without one acknowledged record is a thread whose creation crashed before
        its first record was durable: no thread at all. An empty file is removed; one holding
        bytes (a torn first write) is moved to ``quarantine/``, never deleted (issue 9: nothing
        ever deletes a rollout's bytes). Not while its creator may still be at work: under
        its lease, and only once the file is a few seconds old."""
        try:
            if time.time() - os.stat(path).st_mtime < _UNBORN_AGE:
                return
            lease = Lease(self._locks_dir, thread_id, path)
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
                aside = move_to_quarantine(path, self.home, self._fops, "unborn")
                log.warning(
                    "thread %s was never born (its first write was torn); its bytes are in %s",
                    thread_id,
                    aside,
                )
        except FileNotFoundError:
            pass
        finally:
            lease.release()

    def _rollout_files(self) -> Iterator[tuple[str, str]]:
        try:
            years = sorted(os.scandir(self._threads_dir), key=lambda e: e.name)
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

    # -- index maintenance -----------------------------------------------------------------

    def catch_up(self) -> int:
        """Bring the index up to date with the rollouts; returns the records applied."""
        positions = self.index.positions()
        seen: set[str] = set()
        applied = 0
        batches: list[tuple[str, str, list[Record], int]] = []
        pending = 0
        for thread_id, path in self._rollout_files():
            seen.add(thread_id)
            try:
                size = os.stat(path).st_size
            except FileNotFoundError:
                continue
            known = positions.get(thread_id)
            if known is not None and known[0] == size:
                continue
            mark = self._acknowledged(thread_id)  # (before the durable end: see there)
            durable = self.durable_end(thread_id)  # a live writer's unsynced records wait
            if durable is not None and durable < size:
                size = durable
                if known is not None and known[0] == size:
                    continue
            scanned: Scan | None = None
            if known is not None and 0 < known[0] < size:
                with open(path, "rb") as f:
                    f.seek(known[0])
                    tail = f.read(size - known[0])
                scanned = scan(
                    tail,
                    thread_id,
                    base_offset=known[0],
                    start_ord=known[1] + 1,
                    prev_hash=known[2],
                )
                if scanned.error is not None:
                    scanned = None  # the index was wrong about the prefix: redo the thread
            prefix = known[1] if scanned is not None and known is not None else 0
            if scanned is None:
                scanned = scan_file(path, thread_id, end=durable)
                if known is not None:
                    self.index.reset_thread(thread_id)
            if scanned.error is None:
                scanned.error = self._lost_acknowledged(thread_id, scanned, mark, prefix=prefix)
            if scanned.error is None and not scanned.records:
                if not prefix:
                    self._remove_unborn(thread_id, path)
                continue
            if scanned.error is not None:
                self.index.mark_damaged(thread_id, path, str(scanned.error))
                log.warning("index: %s", scanned.error)
            if scanned.records:
                batches.append((thread_id, path, scanned.records, scanned.end))
                applied += len(scanned.records)
                pending += len(scanned.records)
            if pending >= 50_000:
                self.index.apply(batches, acknowledged=False)
                batches, pending = [], 0
        if batches:
            self.index.apply(batches, acknowledged=False)
        gone = [tid for tid in positions if tid not in seen]
        if gone:
            self.index.forget(gone)
        return applied

    def rebuild(self) -> int:
        """Rebuild the index from the rollouts; returns the records indexed. An index found
        damaged on the way is set aside and a new one built."""
        self.flush()
        with self._drain_lock:
            try:
                self.index.clear()
            except DamagedIndex as exc:
                self.index.close()
                self.index = self._replace_index(self.index.path, exc)
        return self.catch_up()

    def fork(
        self,
        thread_id: str,
        at: int | None = None,
        *,
        principal: str | None = None,
        title: str | None = None,
        kind: str = "fork",
        changes: dict[str, Any] | None = None,
    ) -> str:
        """A new thread holding a copy of ``thread_id``'s records up to ord ``at`` (default:
        all), with ``thread.created`` recording the lineage; returns its id.

        The child inherits ords 2..``at`` byte for byte (same ids, payloads, hashes; see
        `threadlog.model.lineage`), verified on the way; artifacts are shared by hash, not
        copied. The whole new rollout — its ``thread.created``, the inherited records and the
        child's settings (``changes`` become a ``config.changed`` record) — is written to a
        temporary file, fsynced and renamed into place: after a crash either the whole fork
        exists or none of it. With ``kind="salvage"``, ``at`` may be the last valid ordinal of
        a damaged log.
        """
        self._check_open()
        source = self.path_of(thread_id)
        if thread_id in self._logs:
            self._journal.flush()  # what is acknowledged is in the file
        try:
            durable = self.durable_end(thread_id)  # never copy what may not be on disk yet
            with open(source, "rb") as f:
                data = f.read() if durable is None else f.read(durable)
        except FileNotFoundError:
            raise ThreadNotFound(thread_id) from None
        if durable is None:
            # no live writer: a killed one may have left records it never synced, which the
            # child is about to inherit durably; make them durable in the source too (as
            # `read` does), or a power cut could leave the child naming a lost record
            self._sync_file(source)
        if b"\n" not in data:
            raise ThreadNotFound(thread_id)
        second = data.index(b"\n") + 1
        complete = data.count(b"\n")  # complete lines; what follows the last newline is torn
        first, created, inherited = _fork_source(thread_id, data[:second])
        at, end, last = _fork_point(thread_id, data, complete, at, first, second)
        # The child inherits ords 2..at; the source may have inherited some of them itself.
        own = 2 if inherited is None else inherited.until + 1  # the first ord it wrote
        lineage: dict[str, Any] = {
            "thread": thread_id,
            "ord": at,
            "entry": last.id,
            "hash": last.hash,
            "kind": kind,
        }
        if at > 1:
            threads = set() if inherited is None else set(inherited.threads)
            if at >= own:
                threads.add(thread_id)
            chain = first.hash if inherited is None else inherited.prev  # what ord 2 follows
            lineage["copied"] = {"prev": chain, "threads": sorted(threads)}
        now = wall_ns()
        child = new_id(now)
        head = ThreadCreated(
            format=FORMAT_VERSION,
            principal=principal or created.principal,
            config=dict(created.config),
            lineage=lineage,
            title=title or created.title,
        )
        header, digest = encode_record(
            id=new_id(now),
            thread=child,
            ord=1,
            parent=None,
            ts=rfc3339(now),
            type=head.type,
            data_json=codec.canonical(to_data(head)[1]),
            prev=None,
        )
        settings = b""
        if changes:
            settings, _ = encode_record(
                id=new_id(now),
                thread=child,
                ord=at + 1,
                parent=last.id,
                ts=rfc3339(now),
                type="config.changed",
                data_json=codec.canonical({"changes": changes}),
                prev=last.hash if at > 1 else digest,
            )
        path = self.path_of(child)
        directory = os.path.dirname(path)
        tmp = os.path.join(directory, f".{child}.{os.getpid()}.tmp")
        fops = self._fops
        fd, writer, renamed = -1, None, False
        try:
            fops.makedirs(directory)
            fd = fops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            # a second thread copies the prefix into the new file while this one verifies it
            writer = _Background(_write_both, fops, fd, header, memoryview(data)[second:end])
            try:
                if at > 1:
                    _verify_source(thread_id, data, complete, inherited, first.hash, second, end)
            finally:
                written = writer.wait()
            if written is not None:
                raise written
            fops.write_all(fd, settings)
            fops.fsync(fd)
            closing, fd = fd, -1
            fops.close(closing)
            _faults.point("fork.copied")
            fops.rename(tmp, path)
            renamed = True
            fops.fsync_dir(directory)
        except BaseException as exc:
            if writer is not None:
                writer.finish()  # never close the file under a write in progress
            if fd >= 0:
                with contextlib.suppress(OSError):
                    fops.close(fd)
            with contextlib.suppress(OSError):
                fops.unlink(path if renamed else tmp)  # a fork that fails leaves nothing
            if isinstance(exc, OSError):
                raise StorageError(f"cannot write fork {child} of {thread_id}: {exc}") from exc
            raise
        with self._backlog_lock:
            self._forked.append(_Forked(child, path, header, data, second, end, settings))
        return child

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(self._closed_why)

    def _abandon_in_child(self, parent: int) -> None:
        """In a ``fork()``ed child: drop this process's copies of the parent's locks and
        files (its journal, its rollouts; the leases module drops every lease itself) without
        touching them, and refuse every further call. Otherwise a parent that dies would leave
        its journal locked for as long as the child lives, and the child could write under the
        parent's leases."""
        self._closed = True
        self._closed_why = (
            f"this store was opened by process {parent} before fork(); "
            "open a new EmbeddedStore in the child process"
        )
        for rollout in list(self._logs.values()):
            with contextlib.suppress(OSError):
                os.close(rollout.fd)
        self._journal.abandon()


def _fork_source(thread_id: str, line: bytes) -> tuple[Record, ThreadCreated, Copied | None]:
    """A fork source's ord 1, checked and decoded, and the prefix it inherited, if any."""
    try:
        first = parse_line(line)
    except BadRecord as exc:
        raise IntegrityError(thread_id, 1, str(exc), offset=0) from None
    created = from_data(first.type, first.data) if first.type == "thread.created" else None
    if not isinstance(created, ThreadCreated) or first.thread != thread_id or first.ord != 1:
        raise IntegrityError(thread_id, 1, "ord 1 is not this thread's thread.created", offset=0)
    try:
        return first, created, copied_prefix(created.lineage)
    except ValueError as exc:
        raise IntegrityError(thread_id, 1, str(exc), offset=0) from None


def _fork_point(
    thread_id: str, data: bytes, complete: int, at: int | None, first: Record, second: int
) -> tuple[int, int, Record]:
    """The fork point (in ``data``, of ``complete`` lines): its ord, the offset just past its
    line, and its record."""
    if at is None:
        end = data.rfind(b"\n") + 1
        start = data.rfind(b"\n", 0, end - 1) + 1
        try:
            last = parse_line(data[start:end]) if complete > 1 else first
            if last.ord != complete:
                raise IntegrityError(
                    thread_id, complete, f"line {complete} holds ord {last.ord}", offset=start
                )
            return complete, end, last
        except BadRecord:
            # debris that readers take for a torn write (it may hold a newline) is not part
            # of the thread: fork what they read
            scanned = scan(data, thread_id)
            if scanned.error is not None:
                raise scanned.error from None
            return len(scanned.records), scanned.end, scanned.records[-1]
    if not 1 <= at <= complete:
        raise UsageError(f"thread {thread_id} has no ord {at} (it has {complete} records)")
    end = _after_line(data, at, second, 1)
    start = data.rfind(b"\n", 0, end - 1) + 1
    try:
        last = parse_line(data[start:end]) if at > 1 else first
    except BadRecord as exc:
        raise IntegrityError(thread_id, at, str(exc), offset=start) from None
    if last.ord != at:
        raise IntegrityError(thread_id, at, f"line {at} holds ord {last.ord}", offset=start)
    return at, end, last


def _verify_source(
    thread_id: str,
    data: bytes,
    complete: int,
    inherited: Copied | None,
    first_hash: str,
    second: int,
    end: int,
) -> None:
    """Verify a fork source's lines from ord 2 to offset ``end`` as a read would: the ones it
    inherited itself (all of them, so that they end on the hash its lineage names), then its
    own, each of which it must have written."""
    pos, prev = second, first_hash
    try:
        if inherited is not None:
            if complete < inherited.until:
                raise IntegrityError(
                    thread_id,
                    complete + 1,
                    f"the fork's file ends inside its inherited records "
                    f"(lineage ord {inherited.until})",
                    offset=len(data),
                )
            pos = _after_line(data, inherited.until, second, 1)
            if verify_lines(data, second, pos, prev=inherited.prev) != inherited.last:
                raise IntegrityError(
                    thread_id,
                    inherited.until,
                    "the last inherited record is not the one the fork names (lineage hash)",
                    offset=data.rfind(b"\n", 0, pos - 1) + 1,
                )
            prev = inherited.last
        if end > pos:
            verify_lines(data, pos, end, prev=prev, thread=thread_id)
    except BadRecord as exc:
        offset: int = getattr(exc, "offset", second)
        ord_ = data.count(b"\n", 0, offset) + 1
        raise IntegrityError(thread_id, ord_, str(exc), offset=offset) from None


def _write_both(fops: FileOps, fd: int, head: bytes, body: memoryview) -> None:
    fops.write_all(fd, head)
    fops.write_all(fd, body)


@dataclass(frozen=True, slots=True)
class _Forked:
    """A fork this store wrote: what the index needs of it, from the bytes it was written from."""

    thread_id: str
    path: str
    header: bytes
    data: bytes
    """The source's bytes; the child inherited ``data[start:end]``."""
    start: int
    end: int
    settings: bytes

    def batch(self) -> tuple[str, str, list[Record], int]:
        """An index batch: ord 1, the inherited records that change index rows (the others
        change nothing but the thread's last ord, so only the last of them is decoded), and
        the child's settings. Parsing every line would cost ~1 s of CPU for 100,000."""
        data, pos, end = self.data, self.start, self.end
        records = [parse_line(self.header)]
        find, rfind, startswith = data.find, data.rfind, data.startswith
        while pos < end:
            nl = find(b"\n", pos, end)
            body_end = nl - HASH_TAIL
            t = rfind(b',"type":"', pos, body_end) + 9
            projected = (
                data[t : find(b'"', t, body_end)] in _PROJECTED_BYTES
                or not startswith(b',"v":1', body_end - 6)  # older format: upcast by project
                or nl + 1 == end
            )
            if projected:
                records.append(parse_line(data[pos : nl + 1]))
            pos = nl + 1
        if self.settings:
            records.append(parse_line(self.settings))
        size = len(self.header) + end - self.start + len(self.settings)
        return self.thread_id, self.path, records, size


_PROJECTED_BYTES = frozenset(name.encode() for name in PROJECTED)


def _after_line(data: bytes, n: int, pos: int, done: int) -> int:
    """The offset just past line ``n`` (1-based), counting on from ``pos``, which is just
    past line ``done``."""
    find = data.find
    for _ in range(n - done):
        pos = find(b"\n", pos) + 1
    return pos


class _Background:
    """Runs ``work(*args)`` on a thread; `wait` waits for it and returns what it raised, if
    anything; `finish` waits for it however often the wait is interrupted.

    Completion is an event the worker sets, not ``Thread.join``: a join interrupted by Ctrl-C
    can leave ``is_alive()`` False while the thread still runs (CPython 3.11).
    """

    def __init__(self, work: Callable[..., None], *args: Any) -> None:
        self._error: BaseException | None = None
        self._done = threading.Event()
        threading.Thread(target=self._run, args=(work, args), daemon=True).start()

    def _run(self, work: Callable[..., None], args: tuple[Any, ...]) -> None:
        try:
            work(*args)
        except BaseException as exc:  # handed to the waiting thread
            self._error = exc
        finally:
            self._done.set()

    def wait(self) -> BaseException | None:
        self._done.wait()
        return self._error

    def finish(self) -> None:
        while not self._done.is_set():
            with contextlib.suppress(BaseException):  # e.g. a second Ctrl-C: wait on
                self._done.wait()


_OPEN_STORES: weakref.WeakSet[EmbeddedStore] = weakref.WeakSet()
"""Stores open in this process, abandoned in a ``fork()``ed child."""


def _after_fork_in_child() -> None:
    parent = os.getppid()
    for store in list(_OPEN_STORES):
        store._abandon_in_child(parent)
    _OPEN_STORES.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_PLAIN_CUSTOM: set[str] = set()
"""``custom.`` type names already checked: their appends skip the generic checks."""


_UNBORN_AGE = 5.0
"""Seconds a rollout without a record is left alone: its creator may be writing it."""


def _has_a_record(path: str, thread_id: str) -> bool:
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


def _check_writable_format(thread_id: str, path: str, records: list[Record]) -> None:
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


def _wake(job: asyncio.Future[None], waiters: list[asyncio.Future[None]]) -> None:
    """A group commit finished: settle every waiter of it (they re-check their sequence)."""
    batch = waiters[:]
    waiters.clear()
    exc = None if job.cancelled() else job.exception()
    for fut in batch:
        if fut.done():
            continue
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(None)


def _first_undecodable(records: list[Record]) -> int | None:
    for record in records:
        try:
            from_data(record.type, record.data)
        except UsageError:
            return record.ord
    return None
