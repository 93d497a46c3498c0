"""Snapshots of reduced state, kept in the index, and the anchor check that makes them safe.

A snapshot is the runtime's reduced state after some record, the *anchor*, kept in the index
with the anchor's ordinal, hash and end offset (`SnapshotRow`). It lets opening a long thread
read only what follows the anchor (`SnapshotKeeper.anchored_tail`): the anchor is verified
against the rollout first (same ordinal, same hash, a record of this thread or of one it
inherited from, the file's ord 1 this thread's), and the tail is scanned chained onto it. Any
doubt returns None and the caller falls back to the whole file: a snapshot is an optimisation,
never a source of truth. The index being only a projection, a snapshot lost with it costs a
full read, nothing more.

Used by the writers (opening a thread for writing from the anchor), the reader (reading after
an ordinal the snapshot covers) and the `Snapshots` capability (`save`, `load`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from threadlog.model import snapshot
from threadlog.model.envelope import BadRecord, Record, parse_line
from threadlog.store.embedded.rollout import Scan, inherited_prefix, scan

if TYPE_CHECKING:
    from collections.abc import Callable

    from threadlog.model.state import ThreadState
    from threadlog.store.embedded.index import Index
    from threadlog.store.embedded.journal import Journal
    from threadlog.store.embedded.layout import Layout
    from threadlog.store.embedded.rolloutlog import RolloutLog

__all__ = ["SnapshotKeeper", "tail_after"]


class SnapshotKeeper:
    """Saves and loads snapshots over the index's rows and checks their anchors.

    Args:
        layout: where the rollouts are.
        index: where snapshots are kept.
        logs: the threads this store has open for writing (read only here).
        journal: flushed before a snapshot is saved, so that its anchor is durable.
        max_record_bytes: the longest line a rollout may hold.
    """

    def __init__(
        self,
        layout: Layout,
        index: Index,
        logs: dict[str, RolloutLog],
        journal: Journal,
        max_record_bytes: int,
    ) -> None:
        self._layout = layout
        self._index = index
        self._logs = logs
        self._journal = journal
        self._max_record_bytes = max_record_bytes

    def save(self, thread_id: str, payload: bytes, *, ord: int, hash: str, version: str) -> bool:
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
        self._index.put_snapshot(thread_id, ord, hash, end, version, payload)
        return True

    def load(
        self, thread_id: str, version: str, durable_end: Callable[[str], int | None]
    ) -> tuple[int, bytes] | None:
        """``(ord, payload)`` of the thread's snapshot, if it is of ``version`` and its anchor
        record is still in the rollout (read up to ``durable_end(thread_id)``) with the same
        hash."""
        snap = self._index.get_snapshot(thread_id, payload=False)
        if snap is None or snap.version != version:
            return None
        rollout = self._logs.get(thread_id)
        if rollout is None or rollout.opened_at != (snap.ord, snap.hash):
            # (a log this store opened from this very anchor checked it against the file
            # then, and only grows under its lease: no second scan of the tail)
            path = self._layout.path_of(thread_id)
            if self.anchored_tail(thread_id, path, durable_end(thread_id)) is None:
                return None
        full = self._index.get_snapshot(thread_id)
        if full is None or (full.ord, full.hash, full.version) != (snap.ord, snap.hash, version):
            return None  # replaced meanwhile: the caller reads the whole log
        return full.ord, full.payload

    def state_at(self, thread_id: str, anchor: Record) -> ThreadState | None:
        """The reduced state the thread's snapshot holds (a fresh copy), if the snapshot is
        anchored at ``anchor`` and in this threadlog's format; else None. The store checks
        appends against it (`threadlog.store.admission`)."""
        snap = self._index.get_snapshot(thread_id, payload="line")  # the state's line
        if snap is None or (snap.ord, snap.hash) != (anchor.ord, anchor.hash):
            return None
        if snap.version != snapshot.SNAPSHOT_VERSION:
            return None
        return snapshot.load_state(snap.payload + b"\n")

    def covers(self, thread_id: str, after: int) -> bool:
        """Whether the thread has a snapshot whose anchor is at or before ord ``after``."""
        snap = self._index.get_snapshot(thread_id, payload=False)
        return snap is not None and snap.ord <= after

    def anchored_tail(
        self, thread_id: str, path: str, durable: int | None = None
    ) -> tuple[Record, Scan] | None:
        """The thread's snapshot anchor (verified against the rollout) and the scan of what
        follows it; None when there is no usable snapshot."""
        snap = self._index.get_snapshot(thread_id, payload=False)
        if snap is None:
            return None
        return tail_after(
            thread_id, path, snap.ord, snap.hash, snap.end, self._max_record_bytes, durable
        )


def tail_after(
    thread_id: str,
    path: str,
    ord_: int,
    digest: str,
    end: int,
    max_record_bytes: int,
    durable: int | None = None,
    *,
    keep_damage: bool = False,
) -> tuple[Record, Scan] | None:
    """The record ``ord_`` ending at byte ``end``, verified against the rollout (that ord,
    that hash ``digest``, a record of this thread or of one it inherited from, the file's
    ord 1 this thread's), and the scan of what follows it up to ``durable``; None at any
    doubt (the caller then reads the whole file). Used for snapshots' anchors and the store's
    own checkpoints (`threadlog.store.embedded.checkpoint`). With ``keep_damage``, damage
    after the anchor is returned in the scan (its ``error``) instead of None: what a dead
    journal's replay restores (`threadlog.store.embedded.deadjournals.recover_rollout`)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if end > size:
                return None
            start = max(0, end - max_record_bytes - 1)
            first = f.readline(max_record_bytes + 1)
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
    if scanned.error is not None and not keep_damage:
        return None  # let the full scan find and report it
    return anchor, scanned
