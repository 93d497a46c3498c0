"""The runtime: opens threads as live sessions and owns the model, the tools and the store.

Example::

    async with Runtime(home, model=ScriptedModel([...])) as runtime:
        session = await runtime.create("alice", cwd="/srv/work")
        await session.submit("Summarise README.md")
        await session.wait_idle()

``Runtime(ephemeral=True)`` keeps everything in memory and writes no file.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

from threadlog.errors import UsageError
from threadlog.model import snapshot
from threadlog.model.recovery import plan_recovery
from threadlog.model.turns import is_parked
from threadlog.runtime import procs
from threadlog.runtime.approvals import check_policy
from threadlog.runtime.models import Model, ModelSummarizer, ScriptedModel, Summarizer
from threadlog.runtime.session import Session
from threadlog.runtime.tools import BUILTIN_TOOLS, Tool, ToolRegistry
from threadlog.store.open import open_store
from threadlog.store.protocol import Snapshots, Store

if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import TracebackType

__all__ = ["Runtime"]


class Runtime:
    """Live sessions over one store.

    Args:
        target: the store: a `Store` you opened (the runtime will not close it), or what
            `threadlog.open_store` takes (a directory, ``file://…``, ``memory://``; default
            ``$THREADLOG_HOME`` or ``~/.threadlog``), which the runtime opens and closes.
        store: the same as passing a `Store` as ``target`` (kept for existing callers).
        model: the model every session calls (default: a scripted model that just answers).
        tools: the tools offered (default: the built-in file and command tools).
        ephemeral: keep everything in memory (``memory://``); nothing is written to disk.
    """

    def __init__(
        self,
        target: Store | str | os.PathLike[str] | None = None,
        *,
        store: Store | None = None,
        model: Model | None = None,
        tools: Iterable[Tool] = BUILTIN_TOOLS,
        ephemeral: bool = False,
        summarizer: Summarizer | None = None,
    ) -> None:
        """See the class docstring; ``summarizer`` compacts long contexts (default: the
        model's own ``summarize``, else one request to the model)."""
        if sum((target is not None, store is not None, ephemeral)) > 1:
            raise UsageError("pass one of: a store or a target, store=, ephemeral=True")
        if (
            store is None
            and isinstance(target, Store)
            and not isinstance(target, str | os.PathLike)
        ):
            store = target
        self._owns_store = store is None
        if store is None:
            where = "memory://" if ephemeral else target
            assert not isinstance(where, Store)
            store = open_store(where)
        self.store: Store = store
        self.model: Model = model or ScriptedModel([])
        if summarizer is None:
            summarizer = (
                self.model if isinstance(self.model, Summarizer) else ModelSummarizer(self.model)
            )
        self.summarizer: Summarizer = summarizer
        self.tools = ToolRegistry.of(tools)
        self.sessions: dict[str, Session] = {}
        self._closed = False

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def create(
        self,
        principal: str = "local",
        *,
        title: str | None = None,
        lineage: dict[str, Any] | None = None,
        **config: Any,
    ) -> Session:
        """Create a thread and open it as a session. Config keys: model, instructions, cwd,
        tools (names), approval_policy, thinking, max_steps, and any of your own."""
        self._check_open()
        if config.get("approval_policy") is not None:
            check_policy(config["approval_policy"])
        if "cwd" in config and config["cwd"] is not None:
            config["cwd"] = os.fspath(config["cwd"])
        thread_id = await asyncio.to_thread(
            self.store.create_thread, principal, title=title, lineage=lineage, **config
        )
        return self._open_session(thread_id)

    async def open(self, thread_id: str, *, resume: bool = True) -> Session:
        """Open an existing thread. Takes its lease (`LeaseHeld` if another process has it).

        With ``resume`` (the default), a log left unfinished by a crash is recovered as by
        `resume` (and its work continued); a turn parked on a human decision waits again.
        """
        self._check_open()
        session = self.sessions.get(thread_id)
        if session is not None:
            return session
        session = self._open_session(thread_id)
        if not resume:
            return session
        orphans = await self._runs_left(session)
        if is_parked(session.state) and not orphans:
            session.resume_turn()
        elif orphans or not plan_recovery(session.state).empty:
            await self._recover(session, continue_work=True)
        return session

    async def resume(self, thread_id: str, *, continue_work: bool = True) -> Session:
        """Resume a thread after any crash, and record what was repaired.

        Load and verify the log (a torn final record is cut, a crashed store's journal is
        replayed) → reduce → classify every unfinished tool call (`threadlog.model.recovery`)
        → kill the processes that the dead agent's commands left running (`runtime.procs`)
        → append ``thread.resumed`` listing the repairs → record interrupted model calls →
        mark non-idempotent calls of unknown outcome (asking their ``reconcile`` hook) → end a
        running turn ``interrupted``. With ``continue_work``, a new turn then carries on with
        the interrupted task: results already recorded are reused, calls that never started
        run per policy, read-only and idempotent calls that were cut off run again, and calls
        of unknown outcome wait for ``resolve``.

        The session's ``recovery`` attribute holds the report. Damage in the middle of the
        log raises `IntegrityError` (ordinal and byte offset) before anything is written.
        """
        self._check_open()
        if thread_id in self.sessions:
            raise UsageError(f"thread {thread_id} is already open in this runtime")
        session = self._open_session(thread_id)
        await self._recover(session, continue_work=continue_work)
        return session

    async def _runs_left(self, session: Session) -> list[procs.Run]:
        """Records of commands that a dead agent of this thread started (`runtime.procs`)."""
        runs_dir = session.runs_dir
        if runs_dir is None:
            return []
        return await asyncio.to_thread(procs.runs_of, runs_dir, session.thread_id)

    async def _reap_orphans(
        self, session: Session
    ) -> tuple[list[dict[str, Any]], dict[str, str], list[procs.Run]]:
        """End the processes that commands of a dead agent left running (the caller holds
        the lease, so every recorded run is an orphan). Returns the repairs to record, a
        note per call (for its ``tool_call.unknown`` reason), and the runs now over."""
        repairs: list[dict[str, Any]] = []
        notes: dict[str, str] = {}
        over: list[procs.Run] = []
        for run in await self._runs_left(session):
            reaped = await asyncio.to_thread(procs.reap, run)
            if reaped.checked and not reaped.survivors:
                over.append(run)
            call = session.state.tool_calls.get(run.call_id)
            cut_off = call is not None and call.status == "running"
            if not (cut_off or reaped.killed or reaped.survivors):
                continue  # the record of a command that finished (its removal was lost)
            if not reaped.checked:
                note = "this system cannot look for the command's processes: it may still run"
            elif reaped.survivors:
                note = (
                    f"processes {reaped.survivors} of the command are still running and could "
                    "not be killed: its effect may not be over; end them before deciding"
                )
            elif reaped.killed:
                note = (
                    f"{len(reaped.killed)} process(es) of the command outlived the agent and "
                    "were killed on resume: the command is no longer running"
                )
            else:
                note = "no process of the command was left running: the command is over"
            repairs.append(
                {
                    "kind": "orphan_processes",
                    "call_id": run.call_id,
                    "attempt": run.attempt,
                    "pgid": run.pgid,
                    "killed": reaped.killed,
                    "survivors": reaped.survivors,
                    "note": note,
                }
            )
            if cut_off:
                notes[run.call_id] = note
        return repairs, notes, over

    async def _recover(self, session: Session, *, continue_work: bool) -> None:
        state = session.state
        parked = is_parked(state)
        plan = plan_recovery(state)
        # First end what a dead agent's commands left running, so that the effect of a call
        # of unknown outcome is over before anyone (a reconcile hook, a human) decides on it.
        orphans, notes, over = await self._reap_orphans(session)
        repairs = (
            self.store.take_repairs(session.thread_id)
            + orphans
            + [r for r in plan.to_data() if not (parked and r["kind"] == "turn_interrupted")]
        )
        resumed = await session.append("thread.resumed", {"repairs": repairs})
        for run in over:
            await asyncio.to_thread(procs.finish, run)
        turn_id = None if parked else plan.interrupt_turn
        for step_id in plan.interrupted_steps:
            await session.append(
                "provider.interrupted",
                {
                    "turn_id": state.steps[step_id].turn_id,
                    "step_id": step_id,
                    "reason": "the process stopped during this model call",
                },
            )
        for op_id in plan.open_operations:
            await session.append(
                "operation.finished",
                {
                    "op_id": op_id,
                    "ok": False,
                    "detail": {"error": "the process stopped during this operation"},
                },
            )
        outcomes = {}
        for call_id in plan.unknown:
            outcomes[call_id] = await session.mark_unknown(
                state.tool_calls[call_id], note=notes.get(call_id)
            )
        for call_id in plan.already_unknown:
            # marked in an earlier run (a resume cut short, a close mid-tool): ask again
            verdict = await session.reconcile(state.tool_calls[call_id])
            if verdict != "unknown":
                outcomes[call_id] = verdict
        if turn_id is not None:
            await session.append(
                "turn.ended",
                {
                    "turn_id": turn_id,
                    "outcome": "interrupted",
                    "reason": "the process running it stopped",
                },
            )
        continued = None
        if parked:
            session.resume_turn()
        elif continue_work and turn_id is not None:
            continued = (await session.continue_turn(turn_id)).data["turn_id"]
        session.recovery = {
            "thread": session.thread_id,
            "resumed_ord": resumed.ord,
            "repairs": repairs,
            "reconciled": outcomes,
            "interrupted_turn": turn_id,
            "continued_by": continued,
            "waiting_for_human": [
                c.call_id for c in state.tool_calls.values() if c.status == "unknown"
            ],
        }

    async def fork(
        self, thread_id: str, at: int | None = None, *, title: str | None = None, **changes: Any
    ) -> Session:
        """Fork a thread (see `Store.fork`) and open the new one as a session.

        ``changes`` are the child's settings (model, instructions, …), recorded as a
        ``config.changed`` written atomically with the copied prefix.
        """
        self._check_open()
        child = await asyncio.to_thread(
            self.store.fork, thread_id, at, title=title, changes=changes or None
        )
        return await self.open(child, resume=False)

    def _open_session(self, thread_id: str) -> Session:
        store = self.store
        base = None
        store.acquire(thread_id)
        if isinstance(store, Snapshots):
            saved = store.load_snapshot(thread_id, snapshot.SNAPSHOT_VERSION)
            loaded = snapshot.load(saved[1]) if saved is not None else None
            if saved is not None and loaded is not None:
                base = (saved[0], *loaded)
        records = store.read(thread_id, after=base[0] if base else 0)
        session = Session(self, thread_id, records, base)
        self.sessions[thread_id] = session
        return session

    def _forget(self, session: Session) -> None:
        self.sessions.pop(session.thread_id, None)

    async def close(self) -> None:
        """Close every session (the close protocol), then the store if the runtime made it."""
        if self._closed:
            return
        self._closed = True
        for session in list(self.sessions.values()):
            await session.close()
        if self._owns_store:
            await asyncio.to_thread(self.store.close)

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("the runtime is closed")
