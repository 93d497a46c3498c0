"""The server's live sessions: commands from HTTP requests applied to threads.

Theory of operation
-------------------
*One runtime, sessions on demand.* The service owns one `Runtime` (source ``api``). A command
for a thread (submit, steer, cancel, a decision) opens the thread's session the first time
(`Runtime.open`: a log left unfinished by a crash is recovered, a parked turn waits again,
what the mailbox holds is applied) and applies the command through the session's public
commands, the same checks as any other caller. Commands for one thread are serialized by a
per-thread lock, so two requests never race to open a session or to decide the same call.

*Idle sessions are closed.* A session is kept while its turn runs or waits for a human (it
must stay to drive it), and closed (its close protocol: ``session.closed``, the lease given
back) once it has been idle for ``idle_after`` seconds, so that a long-running server does not
hold every thread it ever touched, and other processes can write the threads it is done with.
The next command opens it again.

*Another process holds the thread.* When `Runtime.open` meets `LeaseHeld`, the command is
checked against the thread's state as the store has it and left in the store's `Mailbox` for
the holder, whose session applies it (checking it again); the answer is then
``{"queued": MESSAGE_ID, "holder": …}``. An idempotency key is not carried through a mailbox
(its message is applied once anyway).

*Idempotent submit.* The event id of the input's record is ``uuid5(NAMESPACE,
"<thread>:<key>")``. A second submit with the key finds that id stored: the store refuses the
append before anything is applied (`DuplicateEventConflict`) and the answer is the stored
record, ``duplicate: true``. The same key twice thus records one ``turn.started`` and runs one
turn, across server restarts too.

*Resume at start.* A server killed mid-turn leaves threads with a turn running and a
``session.opened`` (source ``api``) never closed. `ThreadHost.resume_interrupted` resumes each
of them (`Runtime.resume`) unless another live process holds it (`threadlog.runtime.takeover`,
shared with ``threadlog worker``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import TYPE_CHECKING, Any

from threadlog.errors import DuplicateEventConflict, LeaseHeld
from threadlog.model.commands import Approve, Cancel, Deny, Resolve, Submit
from threadlog.runtime.commands import check_command
from threadlog.runtime.forking import fork_point
from threadlog.runtime.mailbox_watch import apply_command
from threadlog.runtime.takeover import interrupted_threads, take_over
from threadlog.server.errors import ApiError
from threadlog.store.protocol import Mailbox

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from threadlog.model.commands import Command
    from threadlog.model.envelope import Record
    from threadlog.model.state import ThreadState
    from threadlog.runtime.runtime import Runtime
    from threadlog.runtime.session import Session
    from threadlog.store.protocol import Store

__all__ = ["IDEMPOTENCY_NAMESPACE", "ThreadHost", "submit_event_id"]

log = logging.getLogger("threadlog.server")

IDEMPOTENCY_NAMESPACE = uuid.UUID("5b0c6f1e-7d3a-4c52-9a8e-1f2d3c4b5a69")
"""The uuid5 namespace of the event ids derived from idempotency keys (never change it:
a key sent before a change would run its turn again after it)."""


def submit_event_id(thread_id: str, key: str) -> str:
    """The event id of the record an idempotent submit writes."""
    return str(uuid.uuid5(IDEMPOTENCY_NAMESPACE, f"{thread_id}:{key}"))


def accepted(record: Record, *, duplicate: bool | None = None) -> dict[str, Any]:
    """The answer to a command that recorded ``record``."""
    answer: dict[str, Any] = {"ord": record.ord, "event_id": record.id, "type": record.type}
    if record.type == "turn.started" and isinstance(record.data, dict):
        answer["turn_id"] = record.data.get("turn_id")
    if duplicate is not None:
        answer["duplicate"] = duplicate
    return answer


class ThreadHost:
    """The service's sessions over one `Runtime` (see the module docstring)."""

    def __init__(self, runtime: Runtime, *, idle_after: float = 300.0) -> None:
        self.runtime = runtime
        self.idle_after = idle_after
        self._locks: dict[str, asyncio.Lock] = {}
        self._used: dict[str, float] = {}

    @property
    def store(self) -> Store:
        """The runtime's store."""
        return self.runtime.store

    def live(self, thread_id: str) -> Session | None:
        """The thread's session in this server, if one is open and sound (a session stopped
        by a failed append may hold a record that never became durable: never shown)."""
        session = self.runtime.sessions.get(thread_id)
        return session if session is not None and session.broken is None else None

    async def state(self, thread_id: str) -> ThreadState:
        """The thread's state: the live session's, else reduced from the store."""
        session = self.live(thread_id)
        if session is not None:
            return session.state
        return await asyncio.to_thread(self.store.state, thread_id)

    @contextlib.asynccontextmanager
    async def _locked(self, thread_id: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(thread_id, asyncio.Lock())
        async with lock:
            yield

    async def _session(self, thread_id: str) -> Session:
        """The thread's session, opened if needed (lock held). Raises `LeaseHeld`."""
        session = self.live(thread_id)
        if session is None:
            stopped = self.runtime.sessions.get(thread_id)
            if stopped is not None:  # stopped by a failed append: start again from the log
                log.warning("reopening thread %s after: %s", thread_id, stopped.broken)
                await stopped.close()
            session = await self.runtime.open(thread_id)
        self._used[thread_id] = asyncio.get_running_loop().time()
        return session

    # -- commands --------------------------------------------------------------------------

    async def create(
        self, principal: str, *, title: str | None, cwd: str | None, input: str | None
    ) -> str:
        """A new thread of ``principal``, its session open; with ``input``, its first turn."""
        config: dict[str, Any] = {} if cwd is None else {"cwd": cwd}
        session = await self.runtime.create(principal, title=title, **config)
        thread_id = session.thread_id
        async with self._locked(thread_id):
            self._used[thread_id] = asyncio.get_running_loop().time()
            if input is not None:
                await session.submit(input, by=principal)
        return thread_id

    async def submit(
        self, thread_id: str, text: str, *, by: str, key: str | None = None
    ) -> dict[str, Any]:
        """Input for the thread: a turn when idle, steering while one runs (idempotent with
        ``key``; see the module docstring)."""
        event_id = submit_event_id(thread_id, key) if key is not None else None

        async def direct(session: Session) -> dict[str, Any]:
            try:
                record = await session.submit(text, by=by, id=event_id)
            except DuplicateEventConflict as exc:
                return accepted(await self._stored(thread_id, exc), duplicate=True)
            return accepted(record, duplicate=False)

        return await self._command(thread_id, Submit(text=text, by=by), direct)

    async def _stored(self, thread_id: str, exc: DuplicateEventConflict) -> Record:
        """The record a duplicate id names (made durable first if it is not yet)."""
        for attempt in range(2):
            found = await asyncio.to_thread(self.store.read, thread_id, exc.ord - 1, limit=1)
            if found and found[0].id == exc.event_id:
                return found[0]
            if attempt == 0:
                await asyncio.to_thread(self.store.flush)
        raise exc

    async def cancel(self, thread_id: str) -> dict[str, Any]:
        """Cancel the running turn; returns once it has ended (or once queued)."""
        async with self._locked(thread_id):
            try:
                session = await self._session(thread_id)
            except LeaseHeld as exc:
                state = await asyncio.to_thread(self.store.state, thread_id)
                check_command(state, Cancel())
                queued = await self._post(thread_id, Cancel(turn_id=state.active_turn), exc)
                return {"cancelled": False, "turn_id": state.active_turn, **queued}
            check_command(session.state, Cancel())
            turn_id = session.state.active_turn
            await session.cancel(turn_id=turn_id)
            return {"cancelled": True, "turn_id": turn_id}

    async def decide(self, thread_id: str, command: Approve | Deny | Resolve) -> dict[str, Any]:
        """Approve, deny or resolve a tool call (``command.by`` is the caller's principal)."""

        async def direct(session: Session) -> dict[str, Any]:
            record = await apply_command(session, command)
            assert record is not None  # only a Cancel records nothing
            return accepted(record)

        return await self._command(thread_id, command, direct)

    async def branch(self, thread_id: str, entry: str, *, summary: str | None) -> dict[str, Any]:
        """Move the thread's active leaf back to ``entry`` (``leaf.moved``; with ``summary``, a
        ``branch.summarized`` too), between turns. A thread another process holds is 409
        (`LeaseHeld`): the mailbox carries no tree commands."""
        async with self._locked(thread_id):
            session = await self._session(thread_id)
            return accepted(await session.branch(entry, summary=summary))

    async def _command(
        self,
        thread_id: str,
        command: Command,
        direct: Callable[[Session], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        async with self._locked(thread_id):
            try:
                session = await self._session(thread_id)
            except LeaseHeld as exc:
                state = await asyncio.to_thread(self.store.state, thread_id)
                _check(state, command)
                return await self._post(thread_id, command, exc)
            _check(session.state, command)
            return await direct(session)

    async def _post(self, thread_id: str, command: Command, held: LeaseHeld) -> dict[str, Any]:
        """Leave the command in the thread's mailbox for the process that holds it."""
        store = self.store
        if not isinstance(store, Mailbox):
            raise held  # nobody can reach that process's session
        message_id = await asyncio.to_thread(store.post, thread_id, command)
        return {"queued": message_id, "holder": held.holder}

    async def fork(
        self, thread_id: str, at: int | str | None, *, title: str | None, principal: str
    ) -> str:
        """Fork the thread at ``at`` (an ordinal or an entry id; default its end), moved back
        to the start of a turn running there (`threadlog.runtime.forking`); the new thread."""
        async with self._locked(thread_id):
            live = self.live(thread_id)
            if live is not None:
                point = fork_point(self.store, thread_id, at, live=live.state)
                await asyncio.to_thread(self.store.flush)
            else:
                point = await asyncio.to_thread(fork_point, self.store, thread_id, at)
        return await asyncio.to_thread(
            self.store.fork, thread_id, point.ord, principal=principal, title=title
        )

    # -- start and stop --------------------------------------------------------------------

    async def resume_interrupted(self) -> list[str]:
        """Resume the threads whose turn was running in a server (or worker) that died (see
        the module docstring and `threadlog.runtime.takeover`); the threads resumed."""
        resumed = []
        for thread_id in await asyncio.to_thread(interrupted_threads, self.store):
            async with self._locked(thread_id):
                if await take_over(self.runtime, thread_id) is None:
                    continue  # a live process has it (its own session carries on), or damage
                self._used[thread_id] = asyncio.get_running_loop().time()
            log.info("resumed thread %s (its server stopped mid-turn)", thread_id)
            resumed.append(thread_id)
        return resumed

    async def reap(self) -> int:
        """Close the sessions idle for ``idle_after`` seconds; how many."""
        now = asyncio.get_running_loop().time()
        closed = 0
        for thread_id, session in list(self.runtime.sessions.items()):
            if session.busy:
                self._used[thread_id] = now
                continue
            lock = self._locks.get(thread_id)
            if now - self._used.get(thread_id, now) < self.idle_after or (lock and lock.locked()):
                continue
            async with self._locked(thread_id):
                if session.busy or self.runtime.sessions.get(thread_id) is not session:
                    continue
                await session.close()
                self._used.pop(thread_id, None)
                closed += 1
        return closed

    async def run_reaper(self, interval: float) -> None:
        """Reap idle sessions every ``interval`` seconds, until cancelled."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.reap()
            except Exception:
                log.exception("closing idle sessions failed")

    async def close(self) -> None:
        """Every live session's close protocol (`Runtime.close`); the store stays open."""
        await self.runtime.close()


def _check(state: ThreadState, command: Command) -> None:
    """`check_command`, with a call the thread does not have answered 404."""
    if isinstance(command, Approve | Deny | Resolve) and command.call_id not in state.tool_calls:
        raise ApiError(
            404, "NotFound", f"no tool call {command.call_id!r} in thread {state.thread_id}"
        )
    check_command(state, command)
