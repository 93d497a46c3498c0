"""Reading a thread back: verified records, never past what is durable, nothing lost unnoticed.

A read scans the rollout file itself (`threadlog.store.embedded.rollout`), not the index, and
holds it to three rules:

* **Durable before visible.** A live writer (this store, or another process, through its
  lease's notice) publishes how far the file is durable (`Reader.durable_end`: its records
  on disk in the writer's journal); readers stop there, since bytes past it may not be
  durable yet and a failed fsync would cut them. With no
  live writer, a killed one may have left records it never synced: the file is synced after it
  is read (`Reader.sync_file`), so nothing returned can be lost by a power cut.
* **Nothing acknowledged goes missing unnoticed.** The index keeps, per thread, the furthest
  ordinal and hash ever acknowledged (`Reader.acknowledged`); a log that holds fewer records,
  or another record at that ordinal (a file cut at a line boundary, or restored from an old
  copy), is damage no scan can see by itself (`lost_acknowledged`).
* **Damage raises; a torn tail does not.** An interrupted final write is not returned;
  anything else is `IntegrityError` with the first bad ordinal.

Shortcuts that keep those rules: the scan a thread was just opened for writing with (one read
after an open is usually a session replaying it), the first ``limit`` lines alone for a read
from the start, a window read from the end of the file or the sparse index for a read after
or before an ordinal (`threadlog.store.embedded.tailread`), and the tail after a snapshot's
anchor. `Reader.verify` streams the file (`threadlog.store.embedded.verify`). `Reader.follow`
tails a thread that another process may be writing. `Reader.verify` reports instead of
raising, and also replays the events through the reducer.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING

from threadlog.errors import (
    IntegrityError,
    StorageError,
    ThreadNotFound,
)
from threadlog.store.embedded.leases import read_durable_end
from threadlog.store.embedded.rollout import Scan, scan, scan_file
from threadlog.store.embedded.tailread import read_forward, read_window, select
from threadlog.store.embedded.verify import verify_log

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    from threadlog.model.envelope import Record
    from threadlog.model.refs import ArtifactRef
    from threadlog.store._fileops import FileOps
    from threadlog.store.embedded.checkpoint import Checkpoints
    from threadlog.store.embedded.index import Index
    from threadlog.store.embedded.layout import Layout
    from threadlog.store.embedded.rolloutlog import RolloutLog
    from threadlog.store.embedded.schema import AckMark
    from threadlog.store.embedded.snapshots import SnapshotKeeper
    from threadlog.store.protocol import VerifyReport

__all__ = ["FOLLOW_PAGE", "Reader", "lost_acknowledged"]

log = logging.getLogger("threadlog.store")

FOLLOW_PAGE = 4096
"""Records `Reader.follow` reads at a time (one window each: its memory stays bounded)."""


def _changed_under(thread_id: str, ord_: int) -> IntegrityError:
    """The log a follower reads no longer holds the records it yielded (replaced, restored
    from an older copy): what it yields next would not continue them."""
    return IntegrityError(
        thread_id,
        ord_,
        "the log changed under a follower: it no longer continues the records already yielded",
    )


class Reader:
    """Reads and verifies threads' rollouts (see the module docstring).

    Args:
        layout: where the rollouts and the lease notices are.
        index: the acknowledged marks.
        logs: the threads this store has open for writing (read only here).
        snapshots: anchors to read after.
        fops: the file-operation layer (for the syncs).
        max_record_bytes: the longest line a rollout may hold.
        problems: what the store's open skipped (`verify` reports a thread a refused journal
            names as damaged).
    """

    def __init__(
        self,
        layout: Layout,
        index: Index,
        logs: dict[str, RolloutLog],
        snapshots: SnapshotKeeper,
        fops: FileOps,
        max_record_bytes: int,
        problems: list[dict[str, Any]],
    ) -> None:
        self._layout = layout
        self._index = index
        self._logs = logs
        self._snapshots = snapshots
        self._fops = fops
        self._max_record_bytes = max_record_bytes
        self._problems = problems
        self.checkpoints: Checkpoints | None = None
        """The store's checkpoints and sparse index (the tail reads seek with them)."""

    def read(
        self,
        thread_id: str,
        after: int = 0,
        *,
        limit: int | None = None,
        before: int | None = None,
    ) -> list[Record]:
        """Durable records of a thread with ``after < ord < before``, verified, in order.

        A torn tail (an interrupted write) is not returned; damage raises `IntegrityError`.
        ``limit`` keeps the first ones, or with ``before`` the ones nearest it. With
        ``limit`` from the start of the log, only the lines needed are read and verified;
        a window after an ordinal or before one is read from the end of the file or from the
        sparse index (`threadlog.store.embedded.tailread`; damage elsewhere is not looked for).
        """
        path = self._layout.path_of(thread_id)
        rollout = self._logs.get(thread_id)
        fresh = rollout.take_fresh(after) if rollout is not None else None
        if fresh is not None:  # just verified by opening the thread (and synced), only this
            # store writes it
            return select(fresh, after, before, limit)
        known = self.acknowledged(thread_id)
        end = self.durable_end(thread_id)
        records = self._read_file(path, thread_id, after, limit, end, known, before)
        if end is None:
            # Durable before visible: no live writer says how far the file is durable, and a
            # killed one may have left records it never synced; sync the file now that it is
            # read, so that nothing returned here can be lost by a power cut.
            self.sync_file(path)
        return records

    def follow(self, thread_id: str, after: int = 0, *, interval: float = 0.2) -> Iterator[Record]:
        """`Store.follow`: the durable records after ``after``, then each new one. Reads the
        rollout itself, so it works beside a live writer in another process; it stops where
        the writer publishes its records durable (`durable_end`).

        It reads windows of at most `FOLLOW_PAGE` records, each chained on the last record
        it yielded: the first by `read_window` (a seek by the sparse index, or back from the
        end of the file), the next ones forward from where the last one ended
        (`read_forward`), so following a long thread from near its end reads only its end,
        and from its start holds one window at a time, never the whole log, whatever its
        sparse index holds. A file no window can be
        read from with certainty (no sparse entry near the cursor, damage) is scanned whole
        once, which reports damage with its ordinal, and then tailed from its end."""
        path = self._layout.path_of(thread_id)
        last: Record | None = None
        cursor: tuple[int, int, str] | None = None  # where the next record's line starts
        while True:
            end = self.durable_end(thread_id)
            known, checkpoints = self.acknowledged(thread_id), self.checkpoints
            limit, most = FOLLOW_PAGE, self._max_record_bytes
            got = None
            if cursor is not None:
                got = read_forward(
                    path, thread_id, cursor, limit,
                    end=end, known=known, checkpoints=checkpoints, max_record_bytes=most,
                )  # fmt: skip
            if got is None:
                at = after if last is None else last.ord
                got = read_window(
                    path, thread_id, at, None, limit,
                    end=end, known=known, checkpoints=checkpoints, max_record_bytes=most,
                )  # fmt: skip
            if got is None:
                yield from self._follow_file(path, thread_id, after, last, interval)
                return
            page, next_at = got
            if page:
                if last is not None and page[0].prev != last.hash:
                    raise _changed_under(thread_id, page[0].ord)
                if end is None:
                    self.sync_file(path)  # durable before visible (as `read`)
                yield from page
                last = page[-1]
                cursor = (last.ord + 1, next_at, last.hash)
            if len(page) < FOLLOW_PAGE:
                time.sleep(interval)

    def _follow_file(
        self, path: str, thread_id: str, after: int, last: Record | None, interval: float
    ) -> Iterator[Record]:
        """`follow` from the whole file: scanned once (damage raises), the records after
        ``last`` (or ordinal ``after``) yielded, then the file tailed from where it ended."""
        scanned = self.scan_whole(
            path, thread_id, self.durable_end(thread_id), self.acknowledged(thread_id)
        )
        if last is not None:
            known = scanned.records[last.ord - 1] if last.ord <= len(scanned.records) else None
            if known is None or known.hash != last.hash:
                raise _changed_under(thread_id, last.ord)
            after = last.ord
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
                        self.sync_file(path)  # durable before visible (as `read`)
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
        return read_durable_end(self._layout.locks, thread_id)

    def sync_file(self, path: str) -> None:
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
        known: AckMark | None,
        before: int | None = None,
    ) -> list[Record]:
        if limit is not None and after == 0 and before is None:
            head = self._read_head(path, thread_id, limit, end)
            if head is not None:
                return head
        if after > 0 or before is not None:
            window = read_window(
                path,
                thread_id,
                after,
                before,
                limit,
                end=end,
                known=known,
                checkpoints=self.checkpoints,
                max_record_bytes=self._max_record_bytes,
            )
            if window is not None:
                return window[0]
        if after > 0 and before is None and self._snapshots.covers(thread_id, after):
            fast = self._snapshots.anchored_tail(thread_id, path, end)
            if fast is not None:  # read only what follows the snapshot's anchor
                lost = lost_acknowledged(thread_id, fast[1], known, fast[0])
                if lost is not None:
                    raise lost
                records = [r for r in fast[1].records if r.ord > after]
                return records[:limit] if limit is not None else records
        scanned = self.scan_whole(path, thread_id, end, known)
        if before is not None:
            return select(scanned.records, after, before, limit)
        records = scanned.records[after:] if after > 0 else scanned.records
        return records[:limit] if limit is not None else records

    def scan_whole(self, path: str, thread_id: str, end: int | None, known: AckMark | None) -> Scan:
        """The whole log up to ``end``, checked as a reader must: damage, records lost below
        the acknowledged mark ``known`` (taken before ``end``), a thread that has none. The
        records up to the thread's checkpoint are not re-encoded (`scan_file`'s ``verified``):
        their chain must reach the checkpoint's hash; the lines of the sparse index's verified
        chunks are not hashed one by one (`scan_file`'s ``chunks``)."""
        checkpoints = self.checkpoints
        verified = None if checkpoints is None else checkpoints.verified(thread_id)
        chunks = () if checkpoints is None else checkpoints.chunks(thread_id)
        try:
            scanned = scan_file(path, thread_id, end=end, verified=verified, chunks=chunks)
        except FileNotFoundError:
            raise ThreadNotFound(thread_id) from None
        if scanned.error is not None:
            raise scanned.error
        lost = lost_acknowledged(thread_id, scanned, known)
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
                    line = f.readline(self._max_record_bytes + 2)
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

    def acknowledged(self, thread_id: str) -> AckMark | None:
        """The index's acknowledged mark of a thread ``(last_ord, last_hash, bytes)``, if any.

        Take it *before* `durable_end` and the read it bounds: a writer publishes an end before
        its index acknowledges anything up to it, so a mark taken first is never ahead of the
        file read after it (taken after, a busy writer's mark is, and reads as lost records)."""
        try:
            return self._index.acknowledged(thread_id).get(thread_id)
        except StorageError as exc:
            log.warning(
                "thread %s: the index cannot say what was acknowledged (%s)", thread_id, exc
            )
            return None

    def missing_threads(self) -> list[str]:
        """Threads with acknowledged records whose rollout file is gone (deleted or moved):
        `verify` reports them as damaged, since nothing of threadlog deletes a rollout."""
        try:
            known = self._index.acknowledged()
        except StorageError:
            return []
        path_of = self._layout.path_of
        return sorted(t for t in known if not os.path.exists(path_of(t)))

    def verify(
        self,
        thread_id: str,
        *,
        check_events: bool = True,
        check_artifact: Callable[[ArtifactRef], str | None] | None = None,
    ) -> VerifyReport:
        """Check a thread's framing, hashes, chain and ordinals (and, by default, that every
        event is legal for the reducer; with ``check_artifact``, that every blob a record
        references is there and sound). Reports; never repairs."""
        path = self._layout.path_of(thread_id)
        known = self.acknowledged(thread_id)
        end = self.durable_end(thread_id)
        journal = next((p for p in self._problems if p["thread"] == thread_id), None)
        return verify_log(
            thread_id,
            path,
            end=end,
            known=known,
            journal_problem=journal["message"] if journal is not None else None,
            missing=not os.path.exists(path) and thread_id in self.missing_threads(),
            check_events=check_events,
            check_artifact=check_artifact,
            lost=lost_acknowledged,
        )


def lost_acknowledged(
    thread_id: str,
    scanned: Scan,
    known: AckMark | None,
    anchor: Record | None = None,
    prefix: int = 0,
) -> IntegrityError | None:
    """Damage no scan can see: the log holds fewer records than ``known`` (the thread's
    `Reader.acknowledged` mark) says were acknowledged (a cut at a line boundary, a file
    restored from an old copy), or another record at the last acknowledged ordinal. None when
    it holds them all (or the index, only a projection, cannot say)."""
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
