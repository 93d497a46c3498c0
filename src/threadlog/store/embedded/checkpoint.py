"""The store's own verification checkpoints and its sparse ordinal → offset index.

Theory of operation
-------------------
A *checkpoint* is kept per thread in the index (table ``checkpoints``): the ordinal, hash and
end offset of a record this store wrote and had verified, and the thread's reduced
`ThreadState` after it (what an append is checked against, `threadlog.store.admission`).
Opening a thread for writing starts from it the way it starts from a runtime snapshot
(`threadlog.store.embedded.snapshots.tail_after`): the line ending at that offset must parse
and carry that ord and hash, the file's ord 1 must be this thread's, and only what follows it
is scanned, chained onto it. When a runtime snapshot exists too, the later of the two is
tried first. Any doubt (no row, another threadlog's format, a file shorter than the offset, a
line that does not match, damage after it) returns None and the caller reads the whole file:
a checkpoint is an optimisation, never the truth, and lost with the index it costs one full
read.

Checkpoints are taken off the append path: by the background committer every
`CHECKPOINT_EVERY` records a log has made durable since its last one, and when a log is
released, evicted or closed. Taking one holds the log's lock for as long as it takes to
serialize the state, and only when everything the log admitted is in the file (the state
then describes exactly the records up to the durable end).

The *sparse index* (table ``sparse_offsets``) keeps the line offset of every
`SPARSE_EVERY`-th record, written with each checkpoint from the offsets the log knows, and
the id block of the records that end there (`threadlog.store.iddigest`: where an explicit id
or a parent may be among the records before a log's anchor). A
read after an ordinal seeks to the nearest entry before it (`Checkpoints.seek`) and scans
from there; the entry is only a hint: the reader checks that the line there parses and holds
that ordinal, and reads from the start of the file otherwise.

An entry also keeps its *chunk digest*: the SHA-256 of the file's bytes from the entry before
it (from the file's start, for the first) up to its own line, taken once those lines were
verified on their bytes (each line's hash, and the chain within the chunk) when the
checkpoint was taken (`chunk_digests`), or as a thread written whole was built. A read of
the whole log (`Checkpoints.chunks`, `threadlog.store.embedded.rollout.scan_file`) hashes a
chunk's bytes in one go instead of every line in it, and parses its lines up to the
checkpoint's record without hashing them (a 50,000-record read 15 % faster:
`docs/benchmarks.md`). Bytes that differ from the digest (or an entry that points elsewhere)
only cost the read a second scan with every check.
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING, BinaryIO, NamedTuple

from threadlog.errors import StorageError
from threadlog.model import snapshot
from threadlog.model.envelope import BadRecord, verify_lines
from threadlog.store.embedded.rollout import FILE_CHUNK, LinePieces
from threadlog.store.embedded.snapshots import tail_after

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import EllipsisType

    from threadlog.model.envelope import Record
    from threadlog.model.state import ThreadState
    from threadlog.store.embedded.index import Index
    from threadlog.store.embedded.rollout import Scan
    from threadlog.store.embedded.rolloutlog import RolloutLog
    from threadlog.store.embedded.snapshots import SnapshotKeeper
    from threadlog.store.transfer import Checkpointed

__all__ = ["CHECKPOINT_EVERY", "SPARSE_EVERY", "Checkpoint", "Checkpoints", "chunk_digests"]

log = logging.getLogger("threadlog.store")

CHECKPOINT_EVERY = 10_000
"""Records a log makes durable before the committer takes its next checkpoint."""

SPARSE_EVERY = 1000
"""One sparse-index entry per this many records (ords 1000, 2000, ...)."""


class Checkpoint(NamedTuple):
    """A thread's checkpoint row: record ``ord`` has ``hash`` and ends at byte ``end``."""

    ord: int
    hash: str
    end: int
    version: str
    state: bytes


class Checkpoints:
    """Takes, checks and serves the store's checkpoints and sparse index (module docstring).

    Args:
        index: where both are kept.
        logs: the threads this store has open for writing (read only here).
        max_record_bytes: the longest line a rollout may hold.
    """

    def __init__(self, index: Index, logs: dict[str, RolloutLog], max_record_bytes: int) -> None:
        self._index = index
        self._logs = logs
        self._max_record_bytes = max_record_bytes
        self._taken: dict[str, int] = {}
        """Per thread, the ord of the last checkpoint this store took or opened from."""

    # -- taking ------------------------------------------------------------------------------

    def take(self, rollout: RolloutLog, *, digests: bool = True) -> bool:
        """Checkpoint ``rollout`` at its durable end, if its state can be had; never raises
        (a checkpoint not taken costs a longer open, nothing more). Without ``digests``, its
        new sparse entries get no chunk digest (their lines are not read back: an eviction,
        under the store's lock)."""
        thread_id = rollout.thread_id
        last = self._taken.get(thread_id, 0)
        try:
            view = rollout.checkpoint_view(
                snapshot.dump_trimmed, sparse_after=last, every=SPARSE_EVERY
            )
            if view is None or view[0] <= last:
                return False
            ord_, digest, end, payload, points = view
            if not digests:
                points = [(o, off, ids, None) for o, off, ids, _ in points]
            elif points and points[0][3] is None:  # where its chunk starts: the entry before's
                o, off, ids, _ = points[0]
                rows = self._index.run(
                    "SELECT offset FROM sparse_offsets WHERE thread_id = ? AND ord = ?",
                    (thread_id, o - SPARSE_EVERY),
                )
                if rows and rows[0][0].__class__ is int:
                    points[0] = (o, off, ids, rows[0][0])
            sparse = chunk_digests(rollout.path, thread_id, points)
            self._write(thread_id, ord_, digest, end, payload, sparse)
        except StorageError as exc:
            log.warning("thread %s: no checkpoint taken (%s)", thread_id, exc)
            return False
        return True

    def put(self, thread_id: str, taken: Checkpointed, end: int) -> None:
        """Keep a checkpoint made where a new thread's log was built (`NewThreads`: a long
        imported session), once its rollout is durable; never raises."""
        try:
            self._write(thread_id, taken.ord, taken.hash, end, taken.state, taken.sparse)
        except StorageError as exc:
            log.warning("thread %s: its checkpoint was not kept (%s)", thread_id, exc)

    def _write(
        self,
        thread_id: str,
        ord_: int,
        digest: str,
        end: int,
        state: bytes,
        sparse: list[tuple[int, int, bytes | None, bytes | None]],
    ) -> None:
        """Write a checkpoint row and its sparse entries; `StorageError` if the index fails."""
        if sparse:
            self._index.run(
                "INSERT OR REPLACE INTO sparse_offsets (thread_id, ord, offset, ids, digest) "
                "VALUES (?, ?, ?, ?, ?)",
                [(thread_id, o, off, ids, chunk) for o, off, ids, chunk in sparse],
                many=True,
            )
        self._index.run(
            "INSERT OR REPLACE INTO checkpoints "
            "(thread_id, ord, hash, end_offset, version, state) VALUES (?, ?, ?, ?, ?, ?)",
            (thread_id, ord_, digest, end, snapshot.SNAPSHOT_VERSION, state),
        )
        self._taken[thread_id] = ord_

    def tick(self) -> None:
        """The committer's turn: checkpoint every open log `CHECKPOINT_EVERY` records on."""
        try:
            logs = list(self._logs.values())
        except RuntimeError:  # the table changed under the copy: next time
            return
        for rollout in logs:
            if rollout.durable_ord - self._taken.get(rollout.thread_id, 0) >= CHECKPOINT_EVERY:
                self.take(rollout)

    def forget(self, thread_id: str) -> None:
        """Forget what this store took of a thread (deleted, or its log found damaged)."""
        self._taken.pop(thread_id, None)

    # -- using -------------------------------------------------------------------------------

    def get(self, thread_id: str, *, state: bool = True) -> Checkpoint | None:
        """The thread's checkpoint row, if any (unchecked), or None if the index fails;
        without its state (``b""``) unless ``state`` (the state is most of the row)."""
        columns = (
            "ord, hash, end_offset, version, state" if state else "ord, hash, end_offset, version"
        )
        try:
            rows = self._index.run(
                f"SELECT {columns} FROM checkpoints WHERE thread_id = ?", (thread_id,)
            )
        except StorageError:
            return None
        if not rows:
            return None
        ord_, digest, end, version = rows[0][:4]
        return Checkpoint(ord_, digest, end, version, bytes(rows[0][4]) if state else b"")

    def verified(self, thread_id: str) -> tuple[int, str] | None:
        """``(ord, hash)`` of the thread's checkpoint, if any: a record this store verified
        with all before it, canonical bytes included (`scan_file`'s ``verified``); unchecked
        against the rollout. None if the index fails or the row is another version's."""
        try:
            rows = self._index.run(
                "SELECT ord, hash, version FROM checkpoints WHERE thread_id = ?", (thread_id,)
            )
        except StorageError:
            return None
        if not rows:
            return None
        ord_, digest, version = rows[0]
        if version != snapshot.SNAPSHOT_VERSION or ord_.__class__ is not int or ord_ < 1:
            return None  # another threadlog's row, or not one this store wrote
        return ord_, digest

    def anchored_tail(
        self, thread_id: str, path: str, durable: int | None = None
    ) -> tuple[Record, Scan, Checkpoint] | None:
        """The checkpoint's record (verified against the rollout) and the scan of what
        follows it; None when there is no usable checkpoint (see the module docstring)."""
        row = self.get(thread_id, state=False)
        if row is None or row.version != snapshot.SNAPSHOT_VERSION:
            return None
        fast = tail_after(
            thread_id, path, row.ord, row.hash, row.end, self._max_record_bytes, durable
        )
        if fast is None:
            log.info(
                "thread %s: checkpoint at ord %d not usable; reading it whole", thread_id, row.ord
            )
            return None
        self._taken[thread_id] = max(self._taken.get(thread_id, 0), row.ord)
        return fast[0], fast[1], row

    def open_from(
        self, thread_id: str, path: str, snapshots: SnapshotKeeper
    ) -> tuple[Record, Scan, Callable[[], ThreadState | None]] | None:
        """Where opening a thread for writing may start: the later of this checkpoint and
        the runtime's snapshot that checks out against the rollout, as ``(anchor, scan of
        what follows, how to get the state at the anchor)``; None for neither."""
        row = self.get(thread_id, state=False)
        try:
            snap = self._index.get_snapshot(thread_id, payload=False)  # its anchor only
        except StorageError:
            snap = None
        snap_first = snap is not None and (row is None or snap.ord > row.ord)
        fast = None if snap_first or row is None else self._from_checkpoint(thread_id, path)
        if fast is None and snap is not None:
            fast = self._from_snapshot(thread_id, path, snapshots)
        if fast is None and snap_first and row is not None:
            fast = self._from_checkpoint(thread_id, path)
        return fast

    def _from_checkpoint(
        self, thread_id: str, path: str
    ) -> tuple[Record, Scan, Callable[[], ThreadState | None]] | None:
        fast = self.anchored_tail(thread_id, path)
        if fast is None:
            return None
        anchor, scanned, _ = fast
        return anchor, scanned, lambda: self._state_at(thread_id, anchor)

    def _state_at(self, thread_id: str, anchor: Record) -> ThreadState | None:
        """The state of the thread's checkpoint, read now, if it is still the one at
        ``anchor`` (the state is read only when a first append needs it)."""
        row = self.get(thread_id)
        return None if row is None else state_of(row, anchor)

    @staticmethod
    def _from_snapshot(
        thread_id: str, path: str, snapshots: SnapshotKeeper
    ) -> tuple[Record, Scan, Callable[[], ThreadState | None]] | None:
        got = snapshots.anchored_tail(thread_id, path)
        if got is None:
            return None
        anchor, scanned = got
        return anchor, scanned, lambda: snapshots.state_at(thread_id, anchor)

    def chunks(self, thread_id: str) -> list[tuple[int, int, bytes]]:
        """``(start, end, digest)`` of the byte ranges of the thread's rollout whose lines
        were verified when they were written (the sparse entries' chunk digests, module
        docstring), in order: hints `scan_file` checks; none if the index fails."""
        try:
            rows = self._index.run(
                "SELECT ord, offset, digest FROM sparse_offsets WHERE thread_id = ? ORDER BY ord",
                (thread_id,),
            )
        except StorageError:
            return []
        chunks: list[tuple[int, int, bytes]] = []
        before: tuple[int, int] | None = (0, 0)  # (ord, offset) of the entry before: none yet
        for o, off, digest in rows:
            if off.__class__ is not int or o.__class__ is not int:
                before = None  # (a damaged row: a hint, never an error)
                continue
            if (
                before is not None
                and o - before[0] == SPARSE_EVERY
                and digest.__class__ is bytes
                and len(digest) == 32
                and before[1] < off
            ):
                chunks.append((before[1], off, digest))
            before = (o, off)
        return chunks

    def points(self, thread_id: str, before: int) -> list[tuple[int, int, object]]:
        """The sparse entries ``(ord, offset, id block or None)`` of the records before
        ``before`` (hints: `RolloutLog._find_in_prefix` checks them); `StorageError` if the
        index fails."""
        rows = self._index.run(
            "SELECT ord, offset, ids FROM sparse_offsets WHERE thread_id = ? AND ord < ?",
            (thread_id, before),
        )
        return [(o, off, None if ids is None else bytes(ids)) for o, off, ids in rows]

    def seek(self, thread_id: str, ord_: int) -> tuple[int, int, str | None] | None:
        """``(ord, offset, prev)`` of the nearest known line start at or before record
        ``ord_`` (a sparse entry, or the line after the checkpoint, which must then be
        chained on ``prev``, the checkpoint's hash): a hint the caller checks."""
        best: tuple[int, int, str | None] | None = None
        try:
            rows = self._index.run(
                "SELECT ord, offset FROM sparse_offsets WHERE thread_id = ? AND ord <= ? "
                "ORDER BY ord DESC LIMIT 1",
                (thread_id, ord_),
            )
        except StorageError:
            rows = []
        if rows:
            best = (rows[0][0], rows[0][1], None)
        row = self.get(thread_id, state=False)
        if row is not None and row.ord < ord_ and (best is None or best[0] <= row.ord + 1):
            best = (row.ord + 1, row.end, row.hash)
        return best


def state_of(row: Checkpoint, anchor: Record) -> ThreadState | None:
    """The reduced state a checkpoint holds, if it is this threadlog's and describes exactly
    the log up to ``anchor``; else None (the caller reduces the file)."""
    state = state_at(row)
    return state if state is not None and state.last_hash == anchor.hash else None


def state_at(row: Checkpoint) -> ThreadState | None:
    """The reduced state a checkpoint row holds (a fresh copy), if this threadlog's and its
    own ord and hash; else None. Only the caller can check the row against the rollout."""
    if row.version != snapshot.SNAPSHOT_VERSION:
        return None
    loaded = snapshot.load(row.state)
    if loaded is None:
        return None
    state = loaded[0]
    if state.last_ord != row.ord or state.last_hash != row.hash:
        return None
    return state


def chunk_digests(
    path: str, thread_id: str, points: list[tuple[int, int, bytes | None, int | None]]
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """The sparse entries ``(ord, offset, id block, start)`` of a checkpoint being taken, with
    each one's chunk digest in place of ``start``: the SHA-256 of the file's bytes from
    ``start`` (the entry before's offset; None when it is not known) up to ``offset``, once
    they are verified (each line's hash and the chain within them, `verify_lines`, a piece of
    lines at a time), else None. Never raises (a digest not taken costs a read its hashing)."""
    out: list[tuple[int, int, bytes | None, bytes | None]] = []
    if all(start is None for *_, start in points):
        return [(o, off, ids, None) for o, off, ids, _ in points]
    try:
        f = open(path, "rb")
    except OSError as exc:
        log.warning("thread %s: no chunk digests taken (%s)", thread_id, exc)
        return [(o, off, ids, None) for o, off, ids, _ in points]
    with f:
        for o, off, ids, start in points:
            digest = None
            if start is not None and start < off:
                try:
                    digest = _verified_digest(f, start, off)
                except Exception as exc:  # (a hint not kept: logged, never raised)
                    log.warning("thread %s: no chunk digest for ord %d (%s)", thread_id, o, exc)
            out.append((o, off, ids, digest))
    return out


def _verified_digest(f: BinaryIO, start: int, end: int) -> bytes:
    """The SHA-256 of bytes ``start`` to ``end`` of ``f``, whole lines that must verify."""
    f.seek(start)
    chunk = hashlib.sha256()
    prev: str | None | EllipsisType = ...
    read = 0
    for _, data, final in LinePieces(f, FILE_CHUNK, end - start):
        if final:
            if data:
                raise BadRecord(f"the lines up to byte {end} end inside a line")
            break
        prev = verify_lines(data, 0, len(data), prev=prev)
        chunk.update(data)
        read += len(data)
    if read != end - start:
        raise BadRecord(f"the file ends before byte {end}")
    return chunk.digest()
