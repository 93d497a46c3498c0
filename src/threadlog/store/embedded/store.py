"""`EmbeddedStore`: the facade that wires the embedded backend's parts and owns its lifecycle.

It opens the home (`layout`), the index, the artifact store and the journal, runs recovery
and catch-up, and starts the background committer; it closes them in the reverse order. It
also holds the append fast path itself (`append`, `aappend`, `_submit`: normalise, encode,
find the thread's open log, submit, wait), and the listeners the journal's group commit
calls. Every other job is a collaborator's, to which the public methods delegate; see the
package docstring (`threadlog.store.embedded`) for which one does what.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from typing import TYPE_CHECKING, Any

from threadlog import _faults, _hooks
from threadlog._clock import new_id, rfc3339
from threadlog.errors import StorageError, UsageError
from threadlog.model.policy import durability_of
from threadlog.store._fileops import DEFAULT_FILEOPS, FileOps, remove_orphan_temps
from threadlog.store._home import default_home
from threadlog.store.embedded.aio import AsyncCommits
from threadlog.store.embedded.artifacts import ArtifactStore
from threadlog.store.embedded.blobs import Blobs
from threadlog.store.embedded.checkpoint import CHECKPOINT_EVERY, SPARSE_EVERY, Checkpoints
from threadlog.store.embedded.credentials import CredentialFile
from threadlog.store.embedded.fork import Forker
from threadlog.store.embedded.index import Index
from threadlog.store.embedded.indexer import Committer, Indexer
from threadlog.store.embedded.journal import Journal
from threadlog.store.embedded.layout import (
    ARTIFACT_THRESHOLD,
    COMMIT_INTERVAL,
    MAX_RECORD_BYTES,
    Layout,
    default_open_threads,
)
from threadlog.store.embedded.mailbox import MailboxDir
from threadlog.store.embedded.queries import Queries
from threadlog.store.embedded.reader import Reader
from threadlog.store.embedded.recovery import Recovery
from threadlog.store.embedded.retention import Tombstones
from threadlog.store.embedded.rolloutlog import LogClosed
from threadlog.store.embedded.snapshots import SnapshotKeeper
from threadlog.store.embedded.transfer import Importer, NewThreads
from threadlog.store.embedded.writers import OpenLogs
from threadlog.store.named import archive
from threadlog.store.offload import encode_data, summary_of
from threadlog.store.validate import normalize_append

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from types import EllipsisType, TracebackType

    from threadlog.model.envelope import Record
    from threadlog.model.events import Event
    from threadlog.model.refs import ArtifactRef
    from threadlog.store.embedded.rolloutlog import RolloutLog

__all__ = ["EmbeddedStore"]

log = logging.getLogger("threadlog.store")


class EmbeddedStore(Queries, Blobs):
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
        commit_interval: float = COMMIT_INTERVAL,
        artifact_threshold: int = ARTIFACT_THRESHOLD,
        max_record_bytes: int = MAX_RECORD_BYTES,
        fops: FileOps = DEFAULT_FILEOPS,
        catch_up: bool = True,
        max_open_threads: int | None = None,
    ) -> None:
        self.home = os.path.abspath(os.fspath(home) if home is not None else default_home())
        self._fops = fops
        self.commit_interval = commit_interval
        self.artifact_threshold = artifact_threshold
        self.max_record_bytes = max_record_bytes
        by_fd_limit = default_open_threads()  # (raises the open-files limit: always)
        if max_open_threads is None:
            max_open_threads = by_fd_limit
        self.max_open_threads = max(1, max_open_threads)
        layout = self._layout = Layout.of(self.home)
        secret, since = layout.prepare(fops)
        self.artifacts = ArtifactStore(layout.artifacts, fops)
        self.index = Index.open(layout.index)
        self._closed = False
        self._closed_why = "the store is closed"
        self._listeners: list[Callable[[str, list[Record]], None]] = []
        self._error_listeners: list[Callable[[StorageError], None]] = []
        journal = self._journal = Journal(
            layout.journal, fops, self._on_durable, secret=secret, on_failure=self._on_failure
        )
        self._recovery = Recovery(layout, fops, journal, secret, since)
        self.problems: list[dict[str, Any]] = self._recovery.problems
        """What the open found wrong and skipped (`Recovery.problems`)."""
        # the table of open logs: changed by the writers only, read without a lock here
        self._logs: dict[str, RolloutLog] = {}
        self._snapshots = SnapshotKeeper(layout, self.index, self._logs, journal, max_record_bytes)
        self._checkpoints = Checkpoints(self.index, self._logs, max_record_bytes)
        self._reader = Reader(
            layout, self.index, self._logs, self._snapshots, fops, max_record_bytes, self.problems
        )
        self._reader.checkpoints = self._checkpoints
        # a dead journal's replay reads a rollout from the line its records follow on
        self._recovery.seek = self._checkpoints.seek
        self._recovery.max_record_bytes = max_record_bytes
        self._writers = OpenLogs(
            self._logs,
            layout=layout,
            fops=fops,
            journal=journal,
            recovery=self._recovery,
            reader=self._reader,
            snapshots=self._snapshots,
            max_open_threads=self.max_open_threads,
            max_record_bytes=max_record_bytes,
            checkpoints=self._checkpoints,
        )
        self._indexer = Indexer(self.index, layout, self._reader, self._recovery)
        self._forker = Forker(
            layout, fops, journal, self._logs, self._reader, self._indexer.add_fork
        )
        self._importer = Importer(
            layout,
            fops,
            self._reader,
            self._indexer.add_fork,
            checkpoint=self._checkpoints.put,
            checkpoint_records=CHECKPOINT_EVERY,
            sparse_every=SPARSE_EVERY,
        )
        self._async = AsyncCommits(journal)
        self._mailbox = MailboxDir(self.home, fops, layout.exists)
        self._credentials = CredentialFile(self.home, fops)
        self._tombstones = Tombstones(layout, fops)
        try:
            self._recovery.recover()
            self.artifacts.sweep_temp_files()
            remove_orphan_temps(layout.journal)  # journals a crash left half created
            if catch_up:
                self._indexer.catch_up()
        except BaseException as exc:
            self.index.close()
            if isinstance(exc, OSError):
                raise StorageError(f"cannot open the store at {self.home}: {exc}") from exc
            raise
        _OPEN_STORES.add(self)
        self._committer = Committer(
            journal, self._indexer, commit_interval, after=self._checkpoints.tick
        )
        self._committer.start()

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
        self._committer.stop()
        try:
            self._journal.close()
        finally:
            self._writers.close_all()
            try:
                self._indexer.drain()
            except StorageError as exc:
                # The index is a projection: the next open catches it up from the rollouts.
                log.warning("index not brought up to date at close (%s); it will catch up", exc)
            finally:
                self.index.close()
                self._async.close()

    def flush(self) -> None:
        """Make every buffered append durable and update the index."""
        self._journal.flush()
        self._indexer.drain()

    def acquire(self, thread_id: str) -> None:
        """Open a thread for writing now: take its lease and repair or replay it if needed.

        Raises `LeaseHeld` if another process writes it, `ThreadNotFound`, `IntegrityError`.
        """
        self._check_open()
        self._writers.get(thread_id)

    def release(self, thread_id: str) -> None:
        """Flush and close one thread's log and give up its lease."""
        self._writers.release(thread_id)

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
        self._writers.abandon()
        self._journal.abandon()

    # -- writing ---------------------------------------------------------------------------

    def create_thread(
        self,
        principal: str = "local",
        *,
        title: str | None = None,
        lineage: dict[str, Any] | None = None,
        thread_id: str | None = None,
        **config: Any,
    ) -> str:
        """Create a thread (its ``thread.created`` record is durable on return); its id. A
        caller-chosen ``thread_id`` is idempotent (see `Store.create_thread`)."""
        self._check_open()
        return self._writers.create(
            principal,
            title=title,
            lineage=lineage,
            config=config,
            thread_id=thread_id,
            tombstones=self._tombstones,
        )

    def delete_thread(self, thread_id: str) -> bool:
        """Delete the thread for good (`Retention`; `threadlog.store.embedded.retention`):
        its rollout unlinked, its index rows dropped, its id never reused."""
        self._check_open()
        if not self._layout.exists(thread_id):
            self._layout.path_of(thread_id)  # UsageError for a malformed id
            return False
        self.flush()
        self._writers.release(thread_id)
        self._checkpoints.forget(thread_id)
        return self._tombstones.delete(thread_id, self.index)

    def deleted(self, thread_id: str) -> bool:
        """Whether ``thread_id`` was deleted (`Retention`)."""
        return self._tombstones.deleted(thread_id)

    def archive_thread(self, thread_id: str, archived: bool = True) -> bool:
        """Archive (or restore) the thread: a durable ``thread.archived`` record; it leaves
        the default listing (`Retention`)."""
        return archive(self, thread_id, archived)

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

        Raises:
            InvalidTransition: the reducer refuses the event in the thread's state (checked
                before ``check``; `threadlog.store.admission`): nothing is written.
        """
        metrics = _hooks.METRICS
        start = time.perf_counter() if metrics is not None else 0.0
        seq, record = self._submit(thread_id, type, data, durable, id, parent, expect_ord, check)
        if seq:
            self._journal.wait(seq)
        if metrics is not None:
            metrics.observe("threadlog_append_seconds", time.perf_counter() - start)
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
        metrics = _hooks.METRICS
        start = time.perf_counter() if metrics is not None else 0.0
        seq, record = self._submit(thread_id, type, data, durable, id, parent, expect_ord, check)
        if seq:
            await self._async.wait(seq)
        if metrics is not None:
            metrics.observe("threadlog_append_seconds", time.perf_counter() - start)
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
            rollout = self._logs.get(thread_id) or self._writers.get(thread_id)
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
                self._writers.settle()
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

    # -- listeners: called by the journal's group commit -----------------------------------

    def add_listener(self, listener: Callable[[str, list[Record]], None]) -> None:
        """Call ``listener(thread_id, records)`` whenever records become durable and readable.

        Called from the committing thread, in commit order per thread; it must be quick and
        must not block (hand the records to an event loop with ``call_soon_threadsafe``).
        """
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[str, list[Record]], None]) -> None:
        """Stop calling ``listener``; raises `ValueError` if it was not added."""
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
        """Stop calling ``listener``."""
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
        self._indexer.add(rollout.thread_id, rollout.path, records, end)

    # -- fork, snapshots, recovery, the index -----------------------------------------------

    def fork(
        self,
        thread_id: str,
        at: int | str | None = None,
        *,
        principal: str | None = None,
        title: str | None = None,
        kind: str = "fork",
        changes: dict[str, Any] | None = None,
    ) -> str:
        """A new thread inheriting ``thread_id``'s records up to ``at`` byte for byte (an
        ordinal or an entry id; default: all), its lineage in ``thread.created``; all or
        nothing (`Forker.fork`)."""
        self._check_open()
        return self._forker.fork(
            thread_id, at, principal=principal, title=title, kind=kind, changes=changes
        )

    def adopt_thread(self, records: Sequence[Record]) -> bool:
        """Adopt a thread copied from another store verbatim, as a new rollout written all
        or nothing; False if this store holds exactly these records already (`Importer`)."""
        self._check_open()
        return self._importer.adopt_thread(records)

    def adopt_pages(self, pages: Iterable[Sequence[Record]]) -> bool:
        """`adopt_thread` of a thread given a page of records at a time, held a page at a
        time (`Importer.adopt_pages`)."""
        self._check_open()
        return self._importer.adopt_pages(pages)

    def new_threads(self) -> NewThreads:
        """A batch of new threads whose lines the caller encoded, written whole and made
        durable together (`NewThreads`; ``threadlog import`` uses it)."""
        self._check_open()
        return NewThreads(
            self._layout,
            self._fops,
            self._indexer.add_fork,
            encode=self._encode,
            max_record_bytes=self.max_record_bytes,
            artifact_threshold=self.artifact_threshold,
            checkpoint=self._checkpoints.put,
            checkpoint_records=CHECKPOINT_EVERY,
            sparse_every=SPARSE_EVERY,
        )

    def save_snapshot(
        self, thread_id: str, payload: bytes, *, ord: int, hash: str, version: str
    ) -> bool:
        """Keep a snapshot of reduced state after record ``ord`` (which must have ``hash``);
        the thread must be open for writing here (`SnapshotKeeper.save`)."""
        return self._snapshots.save(thread_id, payload, ord=ord, hash=hash, version=version)

    def recover(self) -> list[str]:
        """Replay the journals of crashed stores into their rollouts and delete them (runs on
        open); the threads repaired (`Recovery.recover`)."""
        return self._recovery.recover()

    def rebuild(self, *, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the index from the rollouts; returns the records indexed. An index found
        damaged on the way is set aside and a new one built. ``progress(n)``: n more rollout
        files done."""
        self.flush()
        return self._indexer.rebuild(progress)


_PLAIN_CUSTOM: set[str] = set()
"""``custom.`` type names already checked: their appends skip the generic checks."""

_OPEN_STORES: weakref.WeakSet[EmbeddedStore] = weakref.WeakSet()
"""Stores open in this process, abandoned in a ``fork()``ed child."""


def _after_fork_in_child() -> None:
    parent = os.getppid()
    for store in list(_OPEN_STORES):
        store._abandon_in_child(parent)
    _OPEN_STORES.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
