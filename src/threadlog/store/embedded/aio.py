"""Waiting for a group commit from asyncio without blocking the event loop (`aappend`).

The journal's group commit is synchronous: a waiter leads a commit or sleeps on a gate
(`Journal.wait`). `AsyncCommits.wait` does it *once per group commit per loop*, not once per
waiting task. Each task waits on a future of its own (cancelling one cancels nobody else's
wait); the commit job settles them all when the commit is done, and each re-checks whether its
sequence is durable (a record queued during that commit waits for the next one). The job
starts on the loop's next turn rather than at once: the tasks the previous commit woke are
already queued to run, and each adds its record to the coming batch first, so that batch is as
large as it can be.

The first task to wait on a loop's turn runs that job itself after one ``await
asyncio.sleep(0)`` (no future of its own, no extra loop turn); the tasks that come during that
turn wait on futures. If it is cancelled during the turn, the job is handed to a loop
callback, so the others are still committed. When the loop has nothing else ready to run (a
lone ``aappend``: CPython's loops keep their ready callbacks in ``_ready``), there is nothing
a turn would add to the batch, and the job runs at once: ~3 µs less an append, 18-20 -> 15-18
µs of CPU on a RAM disk.

When no commit is running and the disk's recent fdatasyncs were fast (under
`LOOP_SYNC_SECONDS` on average, `Journal.sync_seconds`), the job leads the commit *on the
loop* (`Journal.commit_if_idle`): one ``write`` and one ``fdatasync`` (~0.15 ms on the
reference machine) block the loop, where a hop to a worker thread and back cost more than the
fsync itself (a lone ``aappend`` took 1.75x the time of ``append``), and the loop would have
nothing to run meanwhile but the tasks that wait for that very commit. When another thread's
commit is running, or the disk is slow, the job waits (and leads) in a small thread pool
instead: the loop never sleeps on another thread's fsync, nor on a slow one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import weakref
from typing import TYPE_CHECKING

from threadlog.errors import StorageError

if TYPE_CHECKING:
    from threadlog.store.embedded.journal import Journal

__all__ = ["LOOP_SYNC_SECONDS", "AsyncCommits"]

LOOP_SYNC_SECONDS = 0.0005
"""Commit on the loop only while the recent fdatasyncs averaged less than this: a slow disk's
sync (milliseconds) would hold every other task of the loop up, and next to it the hop to a
worker thread costs little."""


class _Turn:
    """One loop's next commit job: whether one is due or running, and who waits for it."""

    __slots__ = ("due", "waiters")

    def __init__(self) -> None:
        self.due = False
        """A task (or a callback) will run the job, or a pool job is running it."""
        self.waiters: list[asyncio.Future[None]] = []


class AsyncCommits:
    """Awaits journal sequences from any number of event loops (module docstring)."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Turn] = (
            weakref.WeakKeyDictionary()
        )
        """Each loop's next commit job; held weakly (a process that runs ``asyncio.run`` over
        and over must not keep every loop it ever made)."""

    async def wait(self, seq: int) -> None:
        """Return once journal sequence ``seq`` is durable; raise what the commit raised."""
        loop = asyncio.get_running_loop()
        journal = self._journal
        while journal.durable_seq < seq:
            turn = self._turns.get(loop)
            if turn is None:
                turn = self._turns[loop] = _Turn()
            # (A commit that failed after its batch was durable, copying it into the
            # rollouts, stops the journal but acknowledges that batch: a waiter it covered
            # returns, whatever error the job hands on.)
            if turn.due:  # another task runs this turn's job: wait for it
                fut: asyncio.Future[None] = loop.create_future()
                turn.waiters.append(fut)
                try:
                    await fut
                except StorageError:
                    if journal.durable_seq < seq:
                        raise
                continue
            turn.due = True
            if _others_ready(loop):
                try:
                    await asyncio.sleep(0)  # the tasks that are ready queue their records first
                except BaseException:  # cancelled: the others' commit must still run
                    loop.call_soon(self._run_job, loop, turn)
                    raise
            error = self._run_job(loop, turn)
            if error is not None:
                if isinstance(error, StorageError) and journal.durable_seq >= seq:
                    return
                raise error
            if turn.due:  # another thread's commit is running: a pool job waits for it
                fut = loop.create_future()
                turn.waiters.append(fut)
                try:
                    await fut
                except StorageError:
                    if journal.durable_seq < seq:
                        raise

    def close(self) -> None:
        """Wait for the commit jobs under way and stop the pool (if one was started)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    def _run_job(self, loop: asyncio.AbstractEventLoop, turn: _Turn) -> Exception | None:
        """Commit what this loop's waiters queued: on the loop when no other commit is
        running (the waiters are settled, and the commit's error returned), else in the pool
        (``turn.due`` stays set until that job settles them)."""
        journal = self._journal
        try:
            idle = journal.commit_if_idle(slower_than=LOOP_SYNC_SECONDS)
        except Exception as exc:  # the commit failed (the journal is poisoned): waiters raise it
            _finish(turn, exc)
            return exc
        if idle:
            _finish(turn, None)
            return None
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=2, thread_name_prefix="threadlog-commit"
            )
        job = loop.run_in_executor(self._executor, journal.wait, journal.submitted)
        job.add_done_callback(functools.partial(_job_done, turn=turn))
        return None


def _others_ready(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether the loop has callbacks ready to run besides this task (whose records a turn
    of the loop would add to the commit). CPython's loops keep them in ``_ready``; a loop
    that does not (uvloop) is assumed to have some: the turn is taken."""
    ready = getattr(loop, "_ready", None)
    return ready is None or len(ready) > 0


def _job_done(job: asyncio.Future[None], turn: _Turn) -> None:
    """A pool job's commit finished: settle its waiters (they re-check their sequence)."""
    _finish(turn, None if job.cancelled() else job.exception())


def _finish(turn: _Turn, exc: BaseException | None) -> None:
    waiters, turn.waiters = turn.waiters, []
    turn.due = False
    for fut in waiters:
        if fut.done():
            continue
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(None)
