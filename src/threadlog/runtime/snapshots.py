"""Snapshots written while a session runs, so that a killed session resumes at tail cost.

Theory of operation
-------------------
A snapshot is the session's reduced state (`ThreadState` and model `Context`) after record
N, serialized by `threadlog.model.snapshot` and kept by a store with the `Snapshots`
capability, anchored at record N's hash. Opening the thread later reads the snapshot and only
the records after N. A snapshot saved only at a clean close leaves a killed session's thread
to be read, verified and reduced whole; so a session also saves one while it runs:

*Cadence* (`SnapshotPolicy`): after an append, when ``every_records`` records came since the
last snapshot, or ``every_seconds`` passed since it and at least one record came (checked on
appends: a quiet session writes nothing, and its tail stays short). The clock is
``threadlog._clock.monotonic`` (tests inject one; nothing sleeps).

*Off the append path.* The append that crosses the threshold only schedules the snapshot
(a task) and returns. The task serializes the state *on the event loop*, where every change
to the state is made (`Session._apply` runs there, synchronously), so what it serializes is
one consistent state, the one after record ``state.last_ord``, without copying it; it then
packs the bytes (`threadlog.model.nodes`: compressing a long thread's nodes is most of the
work, and zlib releases the GIL) and saves them in a worker thread, where the store's ``save_snapshot`` makes the anchor
durable first (the embedded store flushes its journal) and refuses an anchor it does not hold
with that hash (PostgreSQL: a record its writer has not committed yet). A refused save is
tried once more after `Store.flush`. Serializing is what the loop pays: a few ms per MB of
state and context (a 500-turn conversation, 1.7 MB: 3-4 ms; see docs/benchmarks.md).

*Bounded share of the session's time.* A snapshot's cost is the state's size, which grows
with the thread (the context keeps a node per record), so a fixed count would make a long
thread's appends pay ever more for them. After a snapshot that took *d* seconds (from
serializing to saved), the next one waits until *d* / ``max_share`` seconds have passed since
it started: at most ``max_share`` of the session's time goes to snapshots, and the tail a
resume reduces stays what the session appends in that time.

*At most one in flight* per session: a threshold crossed while one is being saved waits for
the next append after it. *Errors never break the session*: a failed or refused snapshot is
logged and counted (`SnapshotWriter.failed`), the next one is tried after another full
interval, and resume simply reads more of the log.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from threadlog import _clock
from threadlog._dataclass import dataclass
from threadlog.model import snapshot
from threadlog.store.protocol import Snapshots

if TYPE_CHECKING:
    from threadlog.model.context import Context
    from threadlog.model.state import ThreadState
    from threadlog.store.protocol import Store

__all__ = ["DEFAULT_SNAPSHOTS", "SnapshotPolicy", "SnapshotWriter"]

log = logging.getLogger("threadlog.runtime")


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotPolicy:
    """When a running session saves a snapshot of its state (``Runtime(snapshots=…)``).

    Args:
        every_records: after this many records since the last snapshot (None: never by
            count). The default keeps a killed session's tail under ~20 ms of reducing.
        every_seconds: after this long since the last snapshot, if a record came since
            (None: never by time).
        max_share: the most of the session's time snapshots may take (see the module
            docstring): a snapshot that took d seconds delays the next by d / max_share.
        on_close: a closing session saves one when this many records came since the last
            (fewer cost a resume less to reduce than the snapshot costs to write: its size
            is the state's, which grows with the thread).
    """

    every_records: int | None = 2_000
    every_seconds: float | None = 60.0
    max_share: float = 0.05
    on_close: int = 2_000

    @classmethod
    def off(cls) -> SnapshotPolicy:
        """No snapshot while the session runs (only at close)."""
        return cls(every_records=None, every_seconds=None)

    @classmethod
    def never(cls) -> SnapshotPolicy:
        """No snapshot at all: a brief session (a CLI command appending a few records),
        for which saving a long thread's state would cost more than it saves. The next
        session that runs saves one at its first append if the tail is long by then."""
        return cls(every_records=None, every_seconds=None, on_close=1 << 62)


DEFAULT_SNAPSHOTS = SnapshotPolicy()


class SnapshotWriter:
    """One session's snapshots (see the module docstring).

    Args:
        store: the session's store; without the `Snapshots` capability nothing is saved.
        thread_id: the thread.
        policy: the cadence.
        base_ord: the ordinal of the snapshot the session started from (0: none).
    """

    def __init__(
        self, store: Store, thread_id: str, policy: SnapshotPolicy, base_ord: int = 0
    ) -> None:
        self._store = store
        self._thread_id = thread_id
        self.policy = policy
        self.saved_ord = base_ord
        """The anchor of the latest snapshot (0: none)."""
        self._tried_ord = base_ord
        self._tried_at = _clock.monotonic()
        self._not_before = self._tried_at
        self._task: asyncio.Task[None] | None = None
        self.saved = 0
        """Snapshots this writer saved."""
        self.failed = 0
        """Snapshots that failed or that the store refused."""

    @property
    def enabled(self) -> bool:
        """Whether the store keeps snapshots."""
        return isinstance(self._store, Snapshots)

    def due(self, last_ord: int) -> bool:
        """Whether a snapshot is due after record ``last_ord`` (and none is in flight)."""
        if self._task is not None or not self.enabled:
            return False
        since = last_ord - self._tried_ord
        if since <= 0:
            return False
        now = _clock.monotonic()
        if now < self._not_before:
            return False
        every, seconds = self.policy.every_records, self.policy.every_seconds
        if every is not None and since >= every:
            return True
        return seconds is not None and now - self._tried_at >= seconds

    def schedule(self, state: ThreadState, context: Context) -> None:
        """Start a snapshot of ``state`` and ``context`` (the caller checked `due`); returns
        at once. The task serializes them when it first runs, on this loop."""
        self._tried_ord = state.last_ord
        self._tried_at = _clock.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._run(state, context))

    async def _run(self, state: ThreadState, context: Context) -> None:
        started = self._tried_at
        try:
            last_hash = state.last_hash
            if last_hash is None:
                return
            ord_ = state.last_ord
            # on the loop: no change to the state can interleave with this (module docstring)
            parts = snapshot.take(state, context)  # packed and saved in the worker thread
            if await asyncio.to_thread(self._save, parts, ord_, last_hash):
                self.saved += 1
                self.saved_ord = max(self.saved_ord, ord_)
            else:
                self.failed += 1
                log.warning(
                    "thread %s: the store refused a snapshot at ord %d (its anchor is not "
                    "durable there); resume will read more of the log",
                    self._thread_id,
                    ord_,
                )
        except Exception:
            self.failed += 1
            log.exception(
                "thread %s: could not save a snapshot (resume will read more of the log)",
                self._thread_id,
            )
        finally:
            took = _clock.monotonic() - started
            self._not_before = started + took / max(self.policy.max_share, 1e-6)
            self._task = None

    def _save(self, parts: snapshot.Parts, ord_: int, last_hash: str) -> bool:
        payload = snapshot.pack(parts)
        store = self._store
        assert isinstance(store, Snapshots)
        version = snapshot.SNAPSHOT_VERSION
        if store.save_snapshot(self._thread_id, payload, ord=ord_, hash=last_hash, version=version):
            return True
        # not durable there yet (a store that commits in the background): once more after
        # a flush
        self._store.flush()
        return store.save_snapshot(
            self._thread_id, payload, ord=ord_, hash=last_hash, version=version
        )

    async def wait(self) -> None:
        """Wait for the snapshot in flight, if any (a closing session)."""
        task = self._task
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    def save_now(self, state: ThreadState, context: Context) -> None:
        """Save a snapshot synchronously (a closing session, in a worker thread, after
        `wait`), if ``policy.on_close`` records came since the last; errors are logged."""
        if not self.enabled or state.last_hash is None:
            return
        if state.last_ord - self.saved_ord < self.policy.on_close:
            return
        try:
            if self._save(snapshot.take(state, context), state.last_ord, state.last_hash):
                self.saved += 1
                self.saved_ord = state.last_ord
        except Exception:
            self.failed += 1
            log.exception(
                "thread %s: could not save a snapshot (resume will replay the log)",
                self._thread_id,
            )
