"""A worker: a process that drives whatever threads need driving, on any backend.

Theory of operation
-------------------
Many workers (on many hosts, over one PostgreSQL database; or processes beside one embedded
store) share the threads of a store without knowing of each other. Each runs `Worker.run`,
a loop that every ``poll`` seconds (`Worker.step`):

1. **closes** its sessions whose turn has ended (their close protocol writes
   ``session.closed`` and gives the lease back, so that any worker may take the thread's next
   turn), logging why a turn stopped if it failed (`LeaseLost` when the lease passed to
   another worker), and those whose turn waits for a human: the wait is durable (the close
   leaves the turn parked), a decision may take days, and a parked session would hold one of
   the worker's ``max_sessions`` slots all that time;
2. **takes over** interrupted threads: a running turn whose service session never closed
   (`threadlog.runtime.takeover.interrupted_threads`), resumed with `Runtime.resume`;
3. **accepts new work**: threads with input queued while nobody drove them (``threadlog
   send``), commands in the store's mailbox, or a turn a service left parked that a decision
   recorded since lets go on (``threadlog approve`` with no session live; `waiting_threads`),
   opened with `Runtime.open`, which starts a turn with the oldest queued input or drives the
   decided turn on;

each only while it holds fewer than ``max_sessions`` sessions. A session drives its turn by
itself (a task of the runtime); the loop only opens and closes sessions.

Who drives a thread is decided by the thread's single-writer **lease** alone: opening a
thread takes it, and a thread another live worker holds is refused (`LeaseHeld`) and skipped.
A worker that dies (kill -9) loses its leases (embedded: the kernel drops its ``flock``;
PostgreSQL: the server ends its session and with it the holder's presence lock, else its
lease row expires, as the database's clock says), and the next step of any other worker
finds its threads interrupted and resumes them. A worker only paused past its
lease (SIGSTOP) finds its appends refused when it wakes (fencing tokens, on PostgreSQL), and
its sessions fail-stop. Two workers may thus look at the same thread at once: only one can
write it, and every log stays a single gap-free chain.

Each step lists the threads and their mailboxes, and reads the state of those with new
records since the worker last found them with nothing to do (`waiting_threads`' ``checked``):
a store-side queue of runnable threads would be the next step beyond that.

Sessions are opened with source ``api``: a worker is the back end of the service, and the
server's own start-up resumption (`ThreadHost.resume_interrupted`) and a worker's take over
each other's threads alike.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import field
from typing import TYPE_CHECKING

from threadlog._dataclass import dataclass
from threadlog.runtime.takeover import interrupted_threads, take_over, waiting_threads

if TYPE_CHECKING:
    from collections.abc import Callable

    from threadlog.runtime.runtime import Runtime

__all__ = ["Step", "Worker"]

log = logging.getLogger("threadlog.worker")


@dataclass(slots=True)
class Step:
    """What one `Worker.step` did."""

    resumed: list[str] = field(default_factory=list)
    """Interrupted threads taken over."""
    started: list[str] = field(default_factory=list)
    """Threads opened for queued work."""
    closed: list[str] = field(default_factory=list)
    """Threads whose turn had ended or waits for a human, closed (their lease given back)."""


class Worker:
    """Drives the threads of ``runtime``'s store that need driving (module docstring).

    Args:
        runtime: the runtime whose sessions the worker opens (source ``api``); the worker
            closes the sessions it opened, never the runtime.
        poll: seconds between steps.
        max_sessions: at most this many sessions open at once.
    """

    def __init__(self, runtime: Runtime, *, poll: float = 0.5, max_sessions: int = 16) -> None:
        self.runtime = runtime
        self.poll = poll
        self.max_sessions = max_sessions
        self._checked: dict[str, int] = {}
        """Threads found with no work, and where their log ended then (`waiting_threads`)."""
        self._settled: dict[str, int] = {}
        """Threads found with nothing to take over, and where their log ended then
        (`interrupted_threads`)."""

    async def step(self) -> Step:
        """One round: close finished sessions, take over interrupted threads, start queued
        work (module docstring)."""
        done = Step()
        sessions = self.runtime.sessions
        for thread_id, session in list(sessions.items()):
            if not session.busy or session.waiting_for_human:
                try:
                    await session.wait_idle(0)  # a turn that failed says why (LeaseLost…)
                except Exception as exc:
                    log.warning("thread %s: its turn stopped: %r", thread_id, exc)
                await session.close()
                done.closed.append(thread_id)
        store = self.runtime.store
        if len(sessions) >= self.max_sessions:
            return done
        for thread_id in await asyncio.to_thread(
            interrupted_threads, store, skip=list(sessions), checked=self._settled
        ):
            if len(sessions) >= self.max_sessions:
                return done
            if await take_over(self.runtime, thread_id) is not None:
                log.info("took over thread %s (its worker stopped mid-turn)", thread_id)
                done.resumed.append(thread_id)
        for thread_id in await asyncio.to_thread(
            waiting_threads, store, skip=list(sessions), checked=self._checked
        ):
            if len(sessions) >= self.max_sessions:
                return done
            if await take_over(self.runtime, thread_id, resume=False) is not None:
                done.started.append(thread_id)
        return done

    async def run(
        self, stop: asyncio.Event | None = None, *, on_step: Callable[[Step], None] | None = None
    ) -> None:
        """Step every ``poll`` seconds until ``stop`` is set (or the task is cancelled); then
        close the worker's sessions (the close protocol: a running turn is cancelled, one
        parked on a human decision stays parked for the next session). ``on_step`` is called
        with each step that did something."""
        stop = stop or asyncio.Event()
        try:
            while not stop.is_set():
                try:
                    done = await self.step()
                except Exception:
                    log.exception("a worker step failed")
                else:
                    if on_step is not None and (done.resumed or done.started or done.closed):
                        on_step(done)
                try:
                    async with asyncio.timeout(self.poll):
                        await stop.wait()
                except TimeoutError:
                    pass
        finally:
            for session in list(self.runtime.sessions.values()):
                await session.close()
