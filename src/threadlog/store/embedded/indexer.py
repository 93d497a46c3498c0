"""Keeping the SQLite index up to date with the rollouts: backlog, committer, catch-up, rebuild.

The index (`threadlog.store.embedded.index`) is a projection, never the truth, and it is
kept off the append path. A group commit hands each thread's newly durable records to
`Indexer.add` (a list append under a lock); forks are handed over whole (`add_fork`). `drain`
applies the backlog in one transaction: forks first, then what was appended since (each
thread's batches, one per commit, joined into one: `_by_thread`). It runs
on the background `Committer` thread every ``commit_interval`` (after committing whatever
buffered appends queued), before every index query (so that a query sees every acknowledged
record: `threads`, `turns`…), and at flush and close.

What a store did not index itself (records written by another process, by a store that
crashed, or before the index was damaged and set aside) is found by `catch_up`, which every
open runs: for each rollout the index is behind on, it scans what follows the index's
position (or the whole file when the index is wrong about the prefix), never past a live
writer's durable end, and applies it. On the way it marks damaged threads, removes unborn
ones and forgets threads whose file is gone. `rebuild` empties the projections (setting a
damaged index aside) and catches up from scratch; the acknowledged marks survive both.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any

from threadlog.errors import StorageError, ThreadNotFound
from threadlog.model.memory import MemoryFact, shared_facts
from threadlog.store.embedded.reader import lost_acknowledged
from threadlog.store.embedded.rollout import Scan, scan, scan_file
from threadlog.store.embedded.schema import DamagedIndex

if TYPE_CHECKING:
    from collections.abc import Callable

    from threadlog.model.envelope import Record
    from threadlog.store.embedded.fork import Forked
    from threadlog.store.embedded.index import Index, IndexedThread
    from threadlog.store.embedded.journal import Journal
    from threadlog.store.embedded.layout import Layout
    from threadlog.store.embedded.reader import Reader
    from threadlog.store.embedded.recovery import Recovery
    from threadlog.store.embedded.schema import IndexBatch

__all__ = ["Committer", "Indexer"]

log = logging.getLogger("threadlog.store")

_CATCH_UP_BATCH = 50_000
"""Records applied per transaction by a catch-up."""


class Indexer:
    """Feeds the index: the backlog of durable records, catch-up and rebuild, and the
    queries that must see every acknowledged record (module docstring)."""

    def __init__(self, index: Index, layout: Layout, reader: Reader, recovery: Recovery) -> None:
        self.index = index
        self._layout = layout
        self._reader = reader
        self._recovery = recovery
        self._backlog: list[_Appended] = []
        self._forked: list[Forked] = []
        """Forks written by this store, to index from the bytes they were written from."""
        self._backlog_lock = threading.Lock()
        self._drain_lock = threading.Lock()  # held while a drain runs, so flush waits for it

    def add(self, thread_id: str, path: str, records: list[Record], end: int) -> None:
        """Records that just became durable, to index at the next drain."""
        with self._backlog_lock:
            self._backlog.append((thread_id, path, records, end))

    def add_fork(self, fork: Forked) -> None:
        """A fork this store wrote, to index at the next drain."""
        with self._backlog_lock:
            self._forked.append(fork)

    def drain(self) -> None:
        """Apply the backlog to the index, in one transaction."""
        with self._drain_lock:
            with self._backlog_lock:
                appended, self._backlog = self._backlog, []
                forked, self._forked = self._forked, []
            # forks first (written whole, and verified as they were written), then what was
            # appended since
            batches = [fork.batch() for fork in forked]
            batches += _by_thread(appended)
            if batches:
                self.index.apply(batches)

    def catch_up(self, progress: Callable[[int], None] | None = None) -> int:
        """Bring the index up to date with the rollouts; returns the records applied.
        ``progress(1)`` is called after each rollout file is looked at."""
        positions = self.index.positions()
        seen: set[str] = set()
        applied = 0
        batches: list[IndexBatch] = []
        pending = 0
        for thread_id, path in self._layout.rollout_files():
            if progress is not None and seen:
                progress(1)
            seen.add(thread_id)
            try:
                size = os.stat(path).st_size
            except FileNotFoundError:
                continue
            known = positions.get(thread_id)
            if known is not None and known[0] == size:
                continue
            mark = self._reader.acknowledged(thread_id)  # (before the durable end: see there)
            durable = self._reader.durable_end(thread_id)  # a live writer's unsynced records wait
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
                    if str(scanned.error) == self.index.damage_of(thread_id):
                        continue  # found (and said) before: the rows up to it stand
                    scanned = None  # the index was wrong about the prefix: redo the thread
            prefix = known[1] if scanned is not None and known is not None else 0
            if scanned is None:
                scanned = scan_file(path, thread_id, end=durable)
                if known is not None:
                    self.index.reset_thread(thread_id)
            if scanned.error is None:
                scanned.error = lost_acknowledged(thread_id, scanned, mark, prefix=prefix)
            if scanned.error is None and not scanned.records:
                if not prefix:
                    self._recovery.remove_unborn(thread_id, path)
                continue
            if scanned.error is not None:
                self.index.mark_damaged(thread_id, path, str(scanned.error))
                log.warning("index: %s", scanned.error)
            if scanned.records:
                batches.append((thread_id, path, scanned.records, scanned.end))
                applied += len(scanned.records)
                pending += len(scanned.records)
            if pending >= _CATCH_UP_BATCH:
                self.index.apply(batches, acknowledged=False)
                batches, pending = [], 0
        if progress is not None and seen:
            progress(1)  # the last file's
        if batches:
            self.index.apply(batches, acknowledged=False)
        gone = [tid for tid in positions if tid not in seen]
        if gone:
            self.index.forget(gone)
        return applied

    def rebuild(self, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the index from the rollouts (the caller flushed first); returns the records
        indexed. An index found damaged on the way is set aside and a new one built."""
        with self._drain_lock:
            try:
                self.index.clear()
            except DamagedIndex as exc:
                self.index.replace(exc)
        return self.catch_up(progress)

    # -- queries: the backlog first, so that they see every acknowledged record ---------------

    def threads(
        self,
        *,
        principal: str | None = None,
        limit: int | None = None,
        archived: bool | None = False,
        metadata: dict[str, Any] | None = None,
    ) -> list[IndexedThread]:
        """Threads from the index, most recently active first (see `Catalog.threads`)."""
        self.drain()
        return self.index.threads(
            principal=principal, limit=limit, archived=archived, metadata=metadata
        )

    def thread_info(self, thread_id: str) -> IndexedThread:
        """One thread's row; raises `ThreadNotFound`."""
        self.drain()
        info = self.index.thread(thread_id)
        if info is None:
            raise ThreadNotFound(thread_id)
        return info

    def memories(
        self, *, principal: str | None = None, include_revoked: bool = False
    ) -> list[dict[str, Any]]:
        """Remembered facts of every thread (from the index), oldest first."""
        self.drain()
        return self.index.memories(principal=principal, include_revoked=include_revoked)

    def shared_memories(self, principal: str, project: str | None = None) -> list[MemoryFact]:
        """Live facts other threads of ``principal`` may be offered: its ``principal`` facts
        and, given ``project``, its ``project`` facts of that project; never another
        principal's (`threadlog.model.memory`)."""
        return shared_facts(self.memories(principal=principal), principal, project)

    def turns(self, thread_id: str) -> list[dict[str, Any]]:
        """The thread's turns from the index, in order."""
        self.drain()
        return self.index.turns(thread_id)

    def tool_calls(self, thread_id: str) -> list[dict[str, Any]]:
        """The thread's tool calls from the index, in order."""
        self.drain()
        return self.index.tool_calls(thread_id)


_Appended = tuple[str, str, "list[Record]", int]
"""An `IndexBatch` of records that became durable."""


def _by_thread(backlog: list[_Appended]) -> list[IndexBatch]:
    """The backlog with each thread's batches joined into one, in their order: a thread
    appended to by many commits since the last drain is applied as one batch (one lookup and
    one update of its row, not one per commit: with one record per commit, the drain cost
    three statements per record). The result is the same: a thread's batches follow one
    another in ordinal order, and the last one carries its latest end."""
    if len(backlog) < 2:
        return list(backlog)
    joined: dict[str, tuple[str, list[Record], int]] = {}
    for thread_id, path, records, end in backlog:
        seen = joined.get(thread_id)
        if seen is None:
            joined[thread_id] = (path, list(records), end)
        else:
            seen[1].extend(records)
            joined[thread_id] = (path, seen[1], end)
    return [(thread_id, path, records, end) for thread_id, (path, records, end) in joined.items()]


class Committer:
    """The background thread: every ``interval`` seconds, commit what buffered appends have
    queued in the journal, then drain the index backlog. Failures are logged, never raised:
    a failed commit poisons the journal (the appends' own waits raise it), and an index that
    falls behind catches up on the next open."""

    def __init__(
        self,
        journal: Journal,
        indexer: Indexer,
        interval: float,
        after: Callable[[], None] | None = None,
    ) -> None:
        self._journal = journal
        self._after = after
        """Run after each drain (the store's checkpoints, `threadlog.store.embedded.checkpoint`)."""
        self._indexer = indexer
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="threadlog-committer", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self, timeout: float | None = 10) -> None:
        """Stop the thread and wait for it (at most ``timeout`` seconds)."""
        self._stop.set()
        self._thread.join(timeout=timeout)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            if self._journal.has_pending:
                try:
                    self._journal.flush()
                except StorageError as exc:
                    log.error("background commit failed: %s", exc)
            try:
                self._indexer.drain()
            except StorageError as exc:  # e.g. another process holds the index too long
                log.warning("index update failed (%s); it will catch up on the next open", exc)
            except Exception:
                log.exception("index update failed; it will catch up on the next open")
            if self._after is not None:
                try:
                    self._after()
                except Exception:
                    log.exception("taking checkpoints failed; opens read the whole log")
