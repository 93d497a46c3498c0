"""Group commit across threads: the store's journal (the per-thread side is `RolloutLog`).

Theory of operation
-------------------
Every record is written twice: first to the store's **journal** (one append-only file per open
store, shared by all the threads it writes), then to its thread's **rollout**. Durability comes
from the journal: a batch of records from any number of threads is made durable by *one*
``write`` and *one* ``fdatasync`` of the journal, and only then copied into the rollouts (plain
writes, no fsync). So 64 conversations written at once share fsyncs exactly like 64 writers on
one conversation do, instead of paying one fsync per file (which, in Python, is also paid in GIL
hand-offs: on a 2-core machine per-file fsyncs from 64 threads top out near 20k/s).

*Leader/follower.* `Journal.wait(seq)` blocks until journal sequence ``seq`` is durable. The
first waiter that finds no flush running becomes the leader: it takes every queued line, writes
and fsyncs the journal without holding the lock, copies the lines into their rollouts, marks
them durable and wakes the waiters *that commit covered*, each on a gate of its own (a lock it
sleeps on): a waiter whose record came in during the flush is not woken to find it still
pending and sleep again (with 64 threads, waking all of them cost ~40 futex calls per append).
One of those, the oldest, is woken instead to lead the next commit. A woken waiter returns
without taking the journal's lock again. The waiters a commit covered are woken in a *relay*:
the leader wakes the first, and each woken waiter wakes the next before it returns. Woken all
at once, they would all queue for the GIL, which only one of them can hold: each then slept
about twice more on it (with 64 threads, ~1.8 GIL waits per append); woken one after another,
each mostly finds the GIL free, or one other thread before it. Every gate put in the relay is
released: the leader starts a chain each time it adds gates, and a chain ends only when the
relay is empty. `RolloutLog.submit`
(`threadlog.store.embedded.rolloutlog`) assigns the ordinal and queues the line *under the
rollout's lock*, so each thread's records reach the journal (and its rollout) in ordinal order.

*Checkpoints.* When the journal passes ``rotate_bytes``, and when the store closes, the leader
fsyncs every rollout written since the last checkpoint and only then deletes the old journal
(RELIABILITY B2); a new journal is created under a temporary name, locked, renamed into place
and its directory fsynced before it takes records. It starts with a header keyed by the
home's secret (`threadlog.store._perms.journal_header`): recovery replays no other journal.

*Recovery.* A journal belongs to a live store while that store holds an exclusive ``flock`` on
it. A journal nobody holds is *dead*: its store crashed before its checkpoint. Before a thread
is opened for writing, its records from dead journals are copied into its rollout: the rollout's
valid prefix is kept, and if the journal continues it (its first record for the thread is at or
before the prefix's next ordinal, and the hashes agree) the rollout is truncated to that prefix
and the journal's later records are appended and fsynced. Damage in a rollout that the journal
does not cover stays an `IntegrityError`.

*Fail-stop.* Any write or fsync error poisons the journal: the batch's waiters and every later
append get `StorageError`, and nothing more is acknowledged until the store is reopened, which
re-reads the files and replays the journal. fsync is never retried. A failure once the batch
is durable in the journal (copying it into the rollouts, or the checkpoint after) stops the
journal the same way, but the batch's waiters return: their records are acknowledged, and
the next open replays them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from threading import Lock
from typing import TYPE_CHECKING, NoReturn

from threadlog import _hooks
from threadlog.errors import StorageError
from threadlog.model.envelope import Record
from threadlog.store._fileops import temporary_path
from threadlog.store._perms import journal_header

if TYPE_CHECKING:
    from threadlog.store._fileops import FileOps
    from threadlog.store.embedded.rolloutlog import RolloutLog

__all__ = ["DurableCallback", "Journal"]

log = logging.getLogger("threadlog.store")

RESERVE_BYTES = 1024 * 1024
"""At most how many bytes of zeros the journal writes ahead of its records at a time
(`Journal._reserve`): a 1 MiB write and its flush cost ~0.8 ms here, once per ~1,200 records
of 870 bytes (4 MiB cost 12 ms: past the host's write cache)."""
MIN_RESERVE_BYTES = 64 * 1024
"""At least how many (a store that appends a few records writes few zeros)."""

DurableCallback = Callable[["RolloutLog", list[Record], int], None]
"""``on_durable(rollout, records, end)``: records are durable and in the file up to ``end``."""


class Journal:
    """The store's shared journal and group committer. See the module docstring."""

    def __init__(
        self,
        directory: str,
        fops: FileOps,
        on_durable: DurableCallback,
        *,
        rotate_bytes: int = 64 * 1024 * 1024,
        reserve_bytes: int = RESERVE_BYTES,
        secret: bytes = b"",
        on_failure: Callable[[StorageError], None] | None = None,
    ) -> None:
        """``secret`` is the home's (see `threadlog.store._perms`): each journal starts with a
        header keyed by it, so that recovery replays only journals this home wrote.
        ``on_failure(error)`` is called once, from the failing thread and without the
        journal's lock, when the journal stops (fail-stop), so that whoever waits for records
        that will now never come (subscribers) is told instead of waiting forever."""
        self.directory = directory
        self._secret = secret
        self._fops = fops
        self._on_durable = on_durable
        self._on_failure = on_failure
        self._rotate_bytes = rotate_bytes
        self._mutex = threading.Lock()
        self._sleepers: list[tuple[int, Lock]] = []
        """Waiters asleep on their gates, with the sequence each waits for, oldest first."""
        self._relay: deque[Lock] = deque()
        """Gates of waiters a commit covered, not yet woken: each woken waiter wakes the next
        (`_pass_relay`; the deque's appends and pops are atomic, so no lock is taken)."""
        self._pending: list[tuple[RolloutLog, bytes, Record]] = []
        self._submitted = 0
        self.durable_seq = 0
        self._flushing = False
        self._poisoned: StorageError | None = None
        self._fd: int | None = None
        self.path: str | None = None
        self._size = 0
        """Bytes of records in the current journal (it is retired past ``rotate_bytes``)."""
        self._end = 0
        """Where the next batch is written in the journal (its header, then its records)."""
        self._zeroed = 0
        """How far the journal holds zeros written ahead of its records (`_reserve`)."""
        self._reserve_limit = self._reserve_bytes = reserve_bytes
        self._dirty: dict[str, RolloutLog] = {}
        self.sync_seconds = 0.0
        """A moving average of the recent fdatasyncs' durations (1/8 weight to the latest)."""
        self.closed = False

    @property
    def submitted(self) -> int:
        return self._submitted

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def _poison(self, what: str, failure: BaseException) -> NoReturn:
        """Fail-stop (A4): no write is acknowledged after this one failed. Lock held."""
        error = self._stop(what, failure)
        raise error from failure

    def _stop(self, what: str, failure: BaseException) -> StorageError:
        """`_poison` without raising: the journal stops, every waiter not yet covered wakes
        and raises the error (`check`), which is returned. Lock held."""
        first = self._poisoned is None
        self._poisoned = error = StorageError(
            f"{what} and the store stopped acknowledging writes ({failure}); "
            "close and reopen the store to continue"
        )
        log.error("journal %s: %s", self.path, failure)
        self._wake_all()  # every waiter wakes and raises it (`check`)
        if first and self._on_failure is not None:
            self._mutex.release()  # the callback may call into the store
            try:
                self._on_failure(error)
            except Exception:
                log.exception("a store failure listener failed")
            finally:
                self._mutex.acquire()
        return error

    @property
    def error(self) -> StorageError | None:
        """The error that stopped the journal, if one did."""
        return self._poisoned

    def check(self) -> None:
        """Raise the error that stopped the journal, if one did."""
        if self._poisoned is not None:
            raise self._poisoned

    def enqueue(self, rollout: RolloutLog, line: bytes, record: Record) -> int:
        """Queue a line (the caller holds ``rollout``'s lock); returns its sequence number."""
        with self._mutex:
            self.check()
            if self.closed:
                raise StorageError("the store's journal is closed")
            self._pending.append((rollout, line, record))
            self._submitted += 1
            return self._submitted

    def wait(self, seq: int) -> None:
        """Block until ``seq`` is durable, leading a group commit when none is running."""
        if self.durable_seq >= seq:
            return
        mutex = self._mutex
        mutex.acquire()
        held = True
        try:
            while self.durable_seq < seq:
                self.check()
                if not self._flushing:
                    self._flush_locked()
                    continue
                held = False
                self._sleep(seq)  # returns without the lock
                if self.durable_seq >= seq:
                    return
                mutex.acquire()  # woken to lead the next commit, or to raise the failure
                held = True
        finally:
            if held:
                mutex.release()

    def _sleep(self, seq: int) -> None:
        """Sleep (lock held, released here) until a commit covering ``seq`` ends, this waiter
        is picked to lead the next one, or the journal fails. Returns without the lock."""
        gate = threading.Lock()
        gate.acquire()
        self._sleepers.append((seq, gate))
        self._mutex.release()
        try:
            gate.acquire()  # released by the leader, or by the waiter woken before this one
            self._pass_relay()  # (inside the try: an interrupt before it is passed on below)
        except BaseException:  # interrupted (KeyboardInterrupt): leave, passing the lead on
            with self._mutex:
                try:
                    self._sleepers.remove((seq, gate))
                except ValueError:  # already woken, or in the relay to be
                    try:
                        self._relay.remove(gate)  # now nobody will wake it
                    except ValueError:  # woken (or being woken): wake the next in its place
                        self._pass_relay()
                    self._wake_leader()  # maybe it was woken to lead: pass that on
            raise

    def _wake_covered(self) -> None:
        """After a commit (lock held): wake the waiters it made durable, and the oldest of the
        rest to lead the next commit."""
        if not self._sleepers:  # a lone writer: nobody to wake
            return
        durable = self.durable_seq
        keep = []
        covered = []
        for entry in self._sleepers:
            if entry[0] <= durable:
                covered.append(entry[1])
            else:
                keep.append(entry)
        self._sleepers = keep
        if covered:
            self._relay.extend(covered)
            self._pass_relay()  # a chain of its own: whatever else runs, none is left asleep
        self._wake_leader()

    def _pass_relay(self) -> None:
        """Wake the next waiter of the relay, if any (the lock is not needed)."""
        try:
            gate = self._relay.popleft()
        except IndexError:
            return
        gate.release()

    def _wake_leader(self) -> None:
        """Wake the oldest sleeper, to lead the commit of what is queued (lock held)."""
        if self._sleepers and not self._flushing:
            self._sleepers.pop(0)[1].release()

    def _wake_all(self) -> None:
        sleepers, self._sleepers = self._sleepers, []
        for _, gate in sleepers:
            gate.release()

    def _wait_idle(self) -> None:
        """Wait (lock held, and held again on return) until no commit is running."""
        while self._flushing:
            try:
                self._sleep(0)
            finally:
                self._mutex.acquire()  # also when interrupted: the caller's ``with`` releases it

    def commit_if_idle(self, slower_than: float | None = None) -> bool:
        """Lead a commit of everything queued, unless another one is running: never waits
        for one. True if everything queued so far is now durable, False if another thread's
        commit is running, or if the recent fdatasyncs took longer than ``slower_than``
        seconds on average (`sync_seconds`); the caller then waits with `wait`. Raises what
        the commit raised.
        """
        if slower_than is not None and self.sync_seconds > slower_than:
            return False
        with self._mutex:
            self.check()
            if self._flushing:
                return False
            self._flush_locked()
            return True

    def flush(self) -> None:
        """Make everything queued so far durable."""
        self.wait(self._submitted)

    def _flush_locked(self) -> None:
        batch = self._pending
        if not batch:
            return
        self._pending = []
        upto = self._submitted
        self._flushing = True
        failure: BaseException | None = None
        after: BaseException | None = None  # a failure once the batch was durable
        self._mutex.release()
        try:
            self._commit(batch)
        except _Committed as exc:
            after = exc.__cause__ or exc
        except BaseException as exc:
            failure = exc
        finally:
            self._mutex.acquire()
            self._flushing = False
        if failure is not None:
            self._poison("append failed", failure)
        self.durable_seq = upto
        self._wake_covered()
        if after is not None:
            # The batch is durable (in the journal, which the next open replays): its appends
            # are acknowledged, and nothing after them is.
            self._stop("copying acknowledged records into their rollouts failed", after)
            if not isinstance(after, Exception):
                raise after  # (KeyboardInterrupt, SystemExit: the leader's caller gets it)
        metrics = _hooks.METRICS
        if metrics is not None:
            metrics.observe("threadlog_commit_records", len(batch))
            metrics.set("threadlog_queue_depth", len(self._pending))

    def _commit(self, batch: list[tuple[RolloutLog, bytes, Record]]) -> None:
        """Make a batch durable in the journal (one write, one ``fdatasync``, over space
        written before: `_reserve`), then copy the lines into the rollouts. No lock held.

        A batch of one thread's records goes through the journal too: an ``fdatasync`` of
        the journal, which only overwrites zeros, flushes the data alone, while one of a
        rollout, which grows, also commits its new size to the file system's journal (on
        ext4 here: ~85 µs against ~125 µs), more than the second, unsynced write costs.
        """
        fops = self._fops
        # Group by rollout, keeping each thread's order.
        groups: dict[str, tuple[RolloutLog, list[bytes], list[Record]]] = {}
        for rollout, line, record in batch:
            group = groups.get(rollout.thread_id)
            if group is None:
                groups[rollout.thread_id] = (rollout, [line], [record])
            else:
                group[1].append(line)
                group[2].append(record)
        for rollout, _, _ in groups.values():
            _check_unchanged(rollout)  # before the journal makes any of the batch durable
        if self._fd is None:
            self._open_new()
        assert self._fd is not None
        data = b"".join([line for _, line, _ in batch]) if len(batch) > 1 else batch[0][1]
        if self._end + len(data) > self._zeroed:
            self._reserve(len(data))
        try:
            fops.write_all(self._fd, data)
            self._fdatasync(self._fd)
        except BaseException:
            # Nothing of the batch was acknowledged. Cut it off the journal, which the next
            # open replays: after a failed fdatasync the kernel may call those pages clean
            # without their being on disk ("fsyncgate"), and a replay must not take them for
            # records. (The zeros written ahead go with them.)
            with contextlib.suppress(OSError):
                fops.ftruncate(self._fd, self._end)
                self._zeroed = self._end
            raise
        self._size += len(data)
        self._end += len(data)
        try:
            for rollout, lines, records in groups.values():
                chunk = b"".join(lines) if len(lines) > 1 else lines[0]
                self._dirty[rollout.thread_id] = rollout
                fops.write_all(rollout.fd, chunk)
                rollout.written(records, len(chunk))
                self._on_durable(rollout, records, rollout.size)
            if self._size >= self._rotate_bytes:
                self._checkpoint(reopen=True)
        except BaseException as exc:  # (an interrupt too: the leader raises it after)
            raise _Committed from exc

    def _reserve(self, need: int) -> None:
        """Write zeros past the journal's end, enough for ``need`` more bytes and a margin
        (as many bytes as the journal holds, from 64 KiB up to `reserve_bytes`), and come back
        to the end. The commit's ``fdatasync`` makes them durable with its data (the one
        commit of a margin that commits a new size); the commits after it only overwrite
        them. Recovery reads a journal up to its first line that is not a record
        (`threadlog.store.embedded.deadjournals`): zeros end it as a torn tail does.

        A disk too full for the zeros is no failure (nothing of the batch was written): the
        batch grows the file instead, and this journal writes no more zeros ahead."""
        assert self._fd is not None
        if self._reserve_bytes <= 0:
            return
        start = self._zeroed
        margin = min(self._reserve_bytes, max(MIN_RESERVE_BYTES, self._size))
        size = self._end + need - start + margin
        try:
            os.lseek(self._fd, start, os.SEEK_SET)
            self._fops.write_all(self._fd, bytes(size))
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise  # (fail-stop: the commit fails, the journal stops)
            log.warning("journal %s: no room to write ahead (%s); growing it", self.path, exc)
            self._reserve_bytes = 0  # (until the next journal)
            size = 0
        finally:
            os.lseek(self._fd, self._end, os.SEEK_SET)
        self._zeroed = start + size

    def _fdatasync(self, fd: int) -> None:
        """``fdatasync``, timed: `sync_seconds`, and the metric when metrics are on."""
        start = time.perf_counter()
        self._fops.fdatasync(fd)
        elapsed = time.perf_counter() - start
        self.sync_seconds += (elapsed - self.sync_seconds) / 8
        metrics = _hooks.METRICS
        if metrics is not None:
            metrics.observe("threadlog_fsync_seconds", elapsed)

    def _open_new(self) -> None:
        """Create a journal file: temp name, lock, rename into place, fsync the directory."""
        fops = self._fops
        try:
            fops.makedirs(self.directory)
            if not os.path.isdir(self.directory):
                raise NotADirectoryError(errno.ENOTDIR, "not a folder")
        except OSError as exc:
            raise StorageError(
                f"cannot create the journal folder {self.directory} ({exc}), through which "
                "every commit goes: move away what is there and reopen the store"
            ) from exc
        name = f"{os.getpid()}-{secrets.token_hex(8)}"
        tmp = temporary_path(self.directory, name)  # (swept if orphaned)
        final = os.path.join(self.directory, f"{name}.wal")
        fd = fops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # The header is made durable before the file takes its name and any record is
            # written after it: a journal cut before that (no header, or part of it, maybe
            # zeros after) acknowledged nothing, and recovery deletes it; and a power cut that
            # kept a later page of the first commit but lost the header's would leave a
            # journal that no longer reads as this home's (refused and reported, though it
            # acknowledged nothing).
            header = journal_header(self._secret, os.path.basename(final))
            fops.write_all(fd, header)
            fops.fdatasync(fd)
            fops.rename(tmp, final)
            fops.fsync_dir(self.directory)
        except BaseException:
            fops.close(fd)
            raise
        self._fd, self.path, self._size = fd, final, 0
        self._end = self._zeroed = len(header)
        self._reserve_bytes = self._reserve_limit

    def _checkpoint(self, *, reopen: bool) -> None:
        """fsync every rollout written since the last checkpoint, then retire the journal."""
        fops = self._fops
        # Closed ones too: a log being released or evicted is marked closed before its own
        # sync, and its file stays open until that sync has returned (and dropped it from
        # ``_dirty``); the journal must not go while it is the only durable copy.
        for rollout in self._dirty.values():
            fops.fsync(rollout.fd)
        self._dirty.clear()
        old_fd, old_path = self._fd, self.path
        self._fd, self.path, self._size = None, None, 0
        try:
            if reopen:
                self._open_new()
            if old_path is not None:
                fops.unlink(old_path)
                fops.fsync_dir(self.directory)
        finally:
            if old_fd is not None:  # (its lock with it: a journal left behind is dead)
                fops.close(old_fd)

    def sync_rollout(self, rollout: RolloutLog) -> None:
        """Before a rollout is closed on its own: make its file durable (leader role held)."""
        with self._mutex:
            self._wait_idle()
            self.check()
            self._flush_locked()
            self.check()  # (a flush that stopped the journal: the release fails, lease kept)
            try:
                self._fops.fsync(rollout.fd)
            except OSError as exc:
                # the pages may now be marked clean without being on disk; the journal, left
                # in place, is what the next open replays
                self._poison(f"syncing thread {rollout.thread_id} failed", exc)
            self._dirty.pop(rollout.thread_id, None)

    def abandon(self) -> None:
        """In a ``fork()``ed child: close this process's copy of the journal (and its lock)
        without touching the file, which the parent still holds. No lock is taken: another
        thread of the parent may have held one at the fork."""
        self.closed = True
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        """Flush, checkpoint every rollout and delete the journal. Idempotent.

        A poisoned journal is left on disk for the next open to replay.
        """
        with self._mutex:
            if self.closed:
                return
            self.closed = True  # from now on nothing is queued (an append racing close fails)
            self._wait_idle()
            try:
                if self._poisoned is None:
                    self._flush_locked()
                if self._poisoned is None:  # (the flush may have stopped it)
                    self._checkpoint(reopen=False)
            finally:
                if self._fd is not None:
                    self._fops.close(self._fd)
                    self._fd = None


class _Committed(Exception):
    """Raised from `Journal._commit` for a failure after its batch was durable (copying it
    into the rollouts, or the checkpoint after): the batch is acknowledged, and the journal
    stops (its ``__cause__`` is the failure)."""


def _check_unchanged(rollout: RolloutLog) -> None:
    """Refuse to append to a rollout whose size is not what this store wrote: another
    process cut it or wrote to it behind the lease (a record acknowledged after garbage
    would be unreadable). The commit fails, and the journal stops (fail-stop); reopening
    the store reports the damage with its ordinal."""
    # (the file's end from ``lseek``, not ``fstat``: on ext4 here an ``fstat`` before the
    # commit's ``fdatasync`` made that take ~35 µs longer, an ``lseek`` nothing)
    size = os.lseek(rollout.fd, 0, os.SEEK_END)
    if size != rollout.size:
        raise StorageError(
            f"thread {rollout.thread_id}: its rollout is {size} bytes where this store wrote "
            f"{rollout.size}: another process changed it (threadlog verify "
            f"{rollout.thread_id}); nothing more is written"
        )
