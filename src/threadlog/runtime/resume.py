"""How a session starts, as values, and the recovery a resumed one goes through.

Theory of operation
-------------------
*How a session starts is a value, not a set of flags*::

    InitialHistory = New | Resumed | Forked

`New` creates a thread; `Forked` copies a thread's prefix into a new one (`Store.fork`:
lineage recorded, nothing to recover in a byte-for-byte copy); `Resumed` opens an existing
thread, with one of three recovery modes: ``always`` (`Runtime.resume`: after any crash,
record what was repaired), ``if_needed`` (`Runtime.open`: only when the log was left
unfinished) and ``never`` (open as it is). `Runtime` turns each into a live session.

*Recovery* turns the pure plan (`threadlog.model.recovery.plan_recovery`) into events, in an
order that makes every decision on facts:

1. end the processes a dead agent's commands left running (`runtime.procs`), so that the
   effect of a call of unknown outcome is over before anyone decides on it;
2. append ``thread.resumed`` listing every repair (the store's, the orphan processes', the
   plan's), then forget the process records that are over;
3. record interrupted model calls (``provider.interrupted``) and open operations (failed);
4. mark non-idempotent calls of unknown outcome and ask their ``reconcile`` hook (again, for
   calls an earlier run marked);
5. end the running turn ``interrupted`` — unless it is parked on a human decision, which is a
   durable wait and is simply driven again;
6. with ``continue_work``, start a turn that carries on with the interrupted task.

The outcome is a `RecoveryReport` (``session.recovery``); ``threadlog resume --json`` prints
its `RecoveryReport.to_data`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from threadlog.model.events import (
    OperationFinished,
    ProviderInterrupted,
    ThreadResumed,
    TurnEnded,
)
from threadlog.model.recovery import plan_recovery
from threadlog.model.turns import is_parked
from threadlog.runtime import procs
from threadlog.runtime.artifact_audit import damaged_artifacts

if TYPE_CHECKING:
    from threadlog.model.envelope import Record
    from threadlog.model.events import Event
    from threadlog.model.state import ThreadState, ToolCallState
    from threadlog.store.protocol import Store

__all__ = [
    "Forked",
    "InitialHistory",
    "New",
    "RecoveryReport",
    "Resumable",
    "Resumed",
    "recover",
    "reopen",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class New:
    """A new thread (`Store.create_thread`)."""

    principal: str = "local"
    title: str | None = None
    lineage: dict[str, Any] | None = None
    config: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Resumed:
    """An existing thread, opened for writing (see the module docstring for ``recover``)."""

    thread_id: str
    recover: Literal["always", "if_needed", "never"] = "if_needed"
    continue_work: bool = True
    """After recovery, carry on with an interrupted turn's task in a new turn."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Forked:
    """A new thread inheriting ``source``'s records up to ``at`` (`Store.fork`)."""

    source: str
    at: int | None = None
    title: str | None = None
    changes: dict[str, Any] | None = None
    """The child's settings, recorded as a ``config.changed`` written with the copy."""


InitialHistory = New | Resumed | Forked


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryReport:
    """What a resume repaired (``session.recovery``)."""

    thread_id: str
    resumed_ord: int
    """The ordinal of the ``thread.resumed`` record."""
    repairs: tuple[dict[str, Any], ...]
    """Each repair as recorded in ``thread.resumed`` (a ``kind`` and its details; see
    docs/events.md)."""
    reconciled: dict[str, str]
    """Call id → what the tool's ``reconcile`` hook made of a call of unknown outcome
    (``done``, ``retry``, or ``unknown`` when it could not tell)."""
    interrupted_turn: str | None
    """The turn ended ``interrupted``, if one was running (not one parked on a human)."""
    continued_by: str | None
    """The turn that carries on with the interrupted one's task (``continue_work``)."""
    waiting_for_human: tuple[str, ...]
    """Calls of unknown outcome that wait for ``threadlog resolve``."""
    damaged_artifacts: tuple[dict[str, Any], ...] = ()
    """Referenced blobs that are missing or do not match their hash (``ord``, ``sha256``,
    ``problem``): not repairable, reported (`threadlog.runtime.artifact_audit`)."""

    def to_data(self) -> dict[str, Any]:
        """The report as JSON-ready data (``threadlog resume --json``)."""
        return {
            "thread": self.thread_id,
            "resumed_ord": self.resumed_ord,
            "repairs": list(self.repairs),
            "reconciled": dict(self.reconciled),
            "interrupted_turn": self.interrupted_turn,
            "continued_by": self.continued_by,
            "waiting_for_human": list(self.waiting_for_human),
            "damaged_artifacts": list(self.damaged_artifacts),
        }


class Resumable(Protocol):
    """What recovery needs of a session (`threadlog.runtime.session.Session`)."""

    @property
    def thread_id(self) -> str:
        """The thread."""
        ...

    @property
    def state(self) -> ThreadState:
        """The thread's state, current after every append."""
        ...

    @property
    def runs_dir(self) -> str | None:
        """Where the session's tools record the processes they start."""
        ...

    async def append(
        self, event: Event, *, durable: bool | None = None, id: str | None = None
    ) -> Record:
        """Append through the session's pipeline."""
        ...

    async def mark_unknown(self, call: ToolCallState, *, note: str | None = None) -> str:
        """See `Session.mark_unknown`."""
        ...

    async def reconcile(self, call: ToolCallState) -> str:
        """See `Session.reconcile`."""
        ...

    def resume_turn(self) -> None:
        """See `Session.resume_turn`."""
        ...

    async def continue_turn(self, interrupted: str) -> Record:
        """See `Session.continue_turn`."""
        ...


async def reopen(session: Resumable, store: Store) -> RecoveryReport | None:
    """Recover a session opened by `Runtime.open` if its log was left unfinished (and its
    work continued); a turn parked on a human decision waits again. None: nothing to do."""
    orphans = await _runs_left(session)
    if is_parked(session.state) and not orphans:
        session.resume_turn()
    elif orphans or not plan_recovery(session.state).empty:
        return await recover(session, store, continue_work=True)
    return None


async def _runs_left(session: Resumable) -> list[procs.Run]:
    """Records of commands that a dead agent of this thread started (`runtime.procs`)."""
    runs_dir = session.runs_dir
    if runs_dir is None:
        return []
    return await asyncio.to_thread(procs.runs_of, runs_dir, session.thread_id)


async def _reap_orphans(
    session: Resumable,
) -> tuple[list[dict[str, Any]], dict[str, str], list[procs.Run]]:
    """End the processes that commands of a dead agent left running (the caller holds
    the lease, so every recorded run is an orphan). Returns the repairs to record, a
    note per call (for its ``tool_call.unknown`` reason), and the runs now over."""
    repairs: list[dict[str, Any]] = []
    notes: dict[str, str] = {}
    over: list[procs.Run] = []
    for run in await _runs_left(session):
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


async def recover(session: Resumable, store: Store, *, continue_work: bool) -> RecoveryReport:
    """Recover the session's thread (the steps of the module docstring); its report."""
    state = session.state
    parked = is_parked(state)
    plan = plan_recovery(state)
    # First end what a dead agent's commands left running, so that the effect of a call
    # of unknown outcome is over before anyone (a reconcile hook, a human) decides on it.
    orphans, notes, over = await _reap_orphans(session)
    damaged = await damaged_artifacts(store, session.thread_id)
    repairs = (
        store.take_repairs(session.thread_id)
        + orphans
        + [r for r in plan.to_data() if not (parked and r["kind"] == "turn_interrupted")]
    )
    resumed = await session.append(ThreadResumed(repairs=repairs))
    for run in over:
        await asyncio.to_thread(procs.finish, run)
    turn_id = None if parked else plan.interrupt_turn
    for step_id in plan.interrupted_steps:
        await session.append(
            ProviderInterrupted(
                turn_id=state.steps[step_id].turn_id,
                step_id=step_id,
                reason="the process stopped during this model call",
            )
        )
    for op_id in plan.open_operations:
        await session.append(
            OperationFinished(
                op_id=op_id,
                ok=False,
                detail={"error": "the process stopped during this operation"},
            )
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
            TurnEnded(
                turn_id=turn_id, outcome="interrupted", reason="the process running it stopped"
            )
        )
    continued = None
    if parked:
        session.resume_turn()
    elif continue_work and turn_id is not None:
        continued = (await session.continue_turn(turn_id)).data["turn_id"]
    return RecoveryReport(
        thread_id=session.thread_id,
        resumed_ord=resumed.ord,
        repairs=tuple(repairs),
        reconciled=outcomes,
        interrupted_turn=turn_id,
        continued_by=continued,
        waiting_for_human=tuple(
            c.call_id for c in state.tool_calls.values() if c.status == "unknown"
        ),
        damaged_artifacts=tuple(damaged),
    )
