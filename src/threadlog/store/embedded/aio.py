"""Waiting for a group commit from asyncio without blocking the event loop (`aappend`).

The journal's group commit is synchronous: a waiter leads a commit or sleeps on a gate
(`Journal.wait`). `AsyncCommits.wait` does it *once per group commit per loop*, not once per
waiting task. Each task waits on a future of its own (cancelling one cancels nobody else's
wait); the commit job settles them all when the commit is done, and each re-checks whether its
sequence is durable (a record queued during that commit waits for the next one). The job
starts on the loop's next turn rather than at once: the tasks the previous commit woke are
already queued to run, and each adds its record to the coming batch first, so that batch is as
large as it can be.

When no commit is running, the job leads it *on the loop* (`Journal.commit_if_idle`): one
``write`` and one ``fdatasync`` (~0.15 ms here) block the loop, where a hop to a worker thread
and back cost more than the fsync itself (a lone ``aappend`` took 1.75x the time of
``append``), and the loop would have nothing to run meanwhile but the tasks that wait for that
very commit. Only when another thread's commit is running does the job wait for it in a small
thread pool, so that the loop never sleeps on another thread's fsync.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from threadlog.store.embedded.journal import Journal

__all__ = ["AsyncCommits"]


class AsyncCommits:
    """Awaits journal sequences from any number of event loops (module docstring)."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._waiters: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}

    async def wait(self, seq: int) -> None:
        """Return once journal sequence ``seq`` is durable; raise what the commit raised."""
        loop = asyncio.get_running_loop()
        journal = self._journal
        while journal.durable_seq < seq:
            waiters = self._waiters.get(loop)
            if waiters is None:
                waiters = self._waiters[loop] = []
            if not waiters:
                loop.call_soon(self._start_commit, loop, waiters)
            fut: asyncio.Future[None] = loop.create_future()
            waiters.append(fut)
            await fut

    def close(self) -> None:
        """Wait for the commit jobs under way and stop the pool (if one was started)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    def _start_commit(
        self, loop: asyncio.AbstractEventLoop, waiters: list[asyncio.Future[None]]
    ) -> None:
        journal = self._journal
        try:
            idle = journal.commit_if_idle()
        except Exception as exc:  # the commit failed (the journal is poisoned): waiters raise it
            _settle(waiters, exc)
            return
        if idle:
            _settle(waiters, None)
            return
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=2, thread_name_prefix="threadlog-commit"
            )
        job = loop.run_in_executor(self._executor, journal.wait, journal.submitted)
        job.add_done_callback(functools.partial(_wake, waiters=waiters))


def _wake(job: asyncio.Future[None], waiters: list[asyncio.Future[None]]) -> None:
    """A group commit finished: settle every waiter of it (they re-check their sequence)."""
    _settle(waiters, None if job.cancelled() else job.exception())


def _settle(waiters: list[asyncio.Future[None]], exc: BaseException | None) -> None:
    batch = waiters[:]
    waiters.clear()
    for fut in batch:
        if fut.done():
            continue
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(None)
