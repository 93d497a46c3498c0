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
5. end the running turn ``interrupted`` — unless it can simply be driven again: parked on a
   human decision (a durable wait), *fresh* (it has not called the model yet: a crash
   right after it started, or the turn ``threadlog resume`` left for the next session), or
   left by a clean close (it was parked when its session closed, and a decision recorded
   since with no session live lets it go on);
6. with ``continue_work``, start a turn that carries on with the interrupted task (or
   with the task of a turn that an earlier resume ended ``interrupted`` and died before
   continuing: `continuation_cut_short`).

*Hand-over* (`hand_over`, ``threadlog resume``): the CLI has no model, so it repairs and
continues the interrupted task in a new turn that it does not drive: the turn stays running
(fresh) in the log, and the next `Runtime.resume` or `Runtime.open` drives it with no
further repair. When there is nothing to repair it writes nothing at all (idempotent).

*Abort* (`abort_undriven`, ``threadlog cancel`` when no session is live): the turn the log
shows running ends ``aborted`` instead, every call that has not started is cancelled first,
and a call cut off by a dead process is settled (marked unknown, or finished ``cancelled``
when it is safe to run again) rather than re-run.

The outcome is a `RecoveryReport` (``session.recovery``); ``threadlog resume --json`` prints
its `RecoveryReport.to_data`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any, Literal, Protocol

from threadlog._dataclass import dataclass
from threadlog.model.events import (
    OperationFinished,
    ProviderInterrupted,
    ThreadResumed,
    ToolCallCancelled,
    ToolCallFinished,
    TurnEnded,
)
from threadlog.model.recovery import (
    continuation_cut_short,
    left_by_a_clean_close,
    plan_recovery,
)
from threadlog.model.turns import is_parked
from threadlog.runtime import procs
from threadlog.runtime.artifact_audit import damaged_artifacts

if TYPE_CHECKING:
    from collections.abc import Sequence

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
    "abort_undriven",
    "hand_over",
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
    mailbox: bool = True
    """Apply and watch the commands other processes post to the store's mailbox."""


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

    @property
    def base_ord(self) -> int:
        """The snapshot the session started from (0: it reduced the whole log)."""
        ...

    @property
    def referencing(self) -> Sequence[Record]:
        """Of the records the session opened with (those after ``base_ord``), the ones that
        reference a blob (`threadlog.runtime.artifact_audit`)."""
        ...

    async def append(
        self, event: Event, *, durable: bool | None = None, id: str | None = None
    ) -> Record:
        """Append through the session's pipeline."""
        ...

    async def propose_unrecorded(self, records: list[Record]) -> int:
        """Propose the calls of a durable response whose proposals a crash cut off."""
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

    async def continue_turn(self, interrupted: str, *, drive: bool = True) -> Record:
        """See `Session.continue_turn`."""
        ...


def _in_flight(state: ThreadState) -> bool:
    """Whether a dead process left something half done (`RecoveryPlan.in_flight`)."""
    return plan_recovery(state).in_flight


def _fresh(state: ThreadState) -> bool:
    """Whether the running turn has not called the model yet (nothing of it to interrupt)."""
    turn_id = state.active_turn
    return turn_id is not None and not state.turns[turn_id].steps


def _abort_cut_short(state: ThreadState) -> bool:
    """Whether the process died while aborting the running turn: a call was cancelled after
    the turn started (only an abort cancels calls, right before the turn's end). The abort
    is then finished; the cancelled task is never continued."""
    turn_id = state.active_turn
    if turn_id is None:
        return False
    started = state.turns[turn_id].started_ord
    return any(c.status == "cancelled" and c.last_ord > started for c in state.tool_calls.values())


def _carries_on(state: ThreadState) -> bool:
    """Whether the running turn can simply be driven again: nothing is in flight, and it
    waits for a human, is fresh, or was left by a clean close (see the module docstring)."""
    if state.active_turn is None or _in_flight(state) or _abort_cut_short(state):
        return False
    return is_parked(state) or _fresh(state) or left_by_a_clean_close(state)


async def reopen(session: Resumable, store: Store) -> RecoveryReport | None:
    """Recover a session opened by `Runtime.open` if its log was left unfinished (and its
    work continued); a turn parked on a human decision waits again, a fresh one (left by
    ``threadlog resume``) is driven. None: nothing to do."""
    orphans = await _runs_left(session)
    if _carries_on(session.state) and not orphans:
        session.resume_turn()
    elif (
        orphans
        or not plan_recovery(session.state).empty
        or continuation_cut_short(session.state) is not None
    ):
        return await recover(session, store, continue_work=True)
    return None


async def hand_over(session: Resumable, store: Store) -> RecoveryReport | None:
    """``threadlog resume``: repair what a dead process left and leave the task to the next
    session (see the module docstring); None when there was nothing to repair, in which
    case nothing is written."""
    taken = await asyncio.to_thread(store.take_repairs, session.thread_id)
    state = session.state
    if (
        not taken
        and not await _runs_left(session)
        and not _in_flight(state)
        and (state.active_turn is None or _carries_on(state))
        and continuation_cut_short(state) is None
    ):
        return None
    return await recover(session, store, continue_work=True, drive=False, taken=taken)


async def abort_undriven(session: Resumable, store: Store, *, reason: str) -> None:
    """End ``aborted`` the turn the log shows running that no session drives (see the
    module docstring); what a dead process left is recovered first."""
    taken = await asyncio.to_thread(store.take_repairs, session.thread_id)
    if taken or _in_flight(session.state) or await _runs_left(session):
        await recover(session, store, continue_work=False, drive=False, end="aborted", taken=taken)
        return
    turn_id = session.state.active_turn
    if turn_id is None:
        return
    await _cancel_unstarted(session, reason)
    await session.append(TurnEnded(turn_id=turn_id, outcome="aborted", reason=reason))


async def _cancel_unstarted(session: Resumable, reason: str) -> None:
    """``tool_call.cancelled`` for every call that has not started (000 §17.7)."""
    for call in list(session.state.tool_calls.values()):
        if call.status in ("proposed", "approved"):
            await session.append(ToolCallCancelled(call_id=call.call_id, reason=reason))


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


async def recover(
    session: Resumable,
    store: Store,
    *,
    continue_work: bool,
    drive: bool = True,
    end: Literal["interrupted", "aborted"] = "interrupted",
    taken: list[dict[str, Any]] | None = None,
) -> RecoveryReport:
    """Recover the session's thread (the steps of the module docstring); its report.

    ``drive``: drive the turn that goes on (False: leave it running in the log for the next
    session). ``end``: ``aborted`` ends the running turn as cancelled (`abort_undriven`).
    ``taken``: the store's repairs, when the caller took them already.
    """
    state = session.state
    aborting = end == "aborted" or _abort_cut_short(state)
    plan = plan_recovery(state)
    # parked, fresh or left by a clean close: the running turn goes on as it is, nothing of
    # it is interrupted
    parked = not aborting and (
        is_parked(state) or _fresh(state) or (left_by_a_clean_close(state) and not plan.in_flight)
    )
    # (before anything is appended: this session's session.opened changes state.session)
    uncontinued = None if aborting else continuation_cut_short(state)
    # First end what a dead agent's commands left running, so that the effect of a call
    # of unknown outcome is over before anyone (a reconcile hook, a human) decides on it.
    orphans, notes, over = await _reap_orphans(session)
    damaged = await damaged_artifacts(store, session.thread_id, session.referencing)
    repairs = (
        (taken if taken is not None else store.take_repairs(session.thread_id))
        + orphans
        + [r for r in plan.to_data() if not (parked and r["kind"] == "turn_interrupted")]
    )
    resumed = await session.append(ThreadResumed(repairs=repairs))
    for run in over:
        await asyncio.to_thread(procs.finish, run)
    turn_id = None if parked else plan.interrupt_turn
    if turn_id is not None and not aborting:
        # a response made durable with its proposals cut off: propose its calls now, so
        # that the next turn settles them instead of carrying on as if they had run
        responded = [
            state.steps[s]
            for s in state.turns[turn_id].steps
            if state.steps[s].status == "responded"
        ]
        if responded:
            after = responded[-1].started_ord
            await session.propose_unrecorded(store.read(session.thread_id, after=after))
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
    if aborting and turn_id is not None:
        for call_id in plan.rerun:  # safe to run again, but the task was cancelled
            await session.append(
                ToolCallFinished(
                    call_id=call_id, ok=False, error="cancelled: the process running it stopped"
                )
            )
        await _cancel_unstarted(session, "cancelled")
        await session.append(TurnEnded(turn_id=turn_id, outcome="aborted", reason="cancelled"))
    elif turn_id is not None:
        await session.append(
            TurnEnded(
                turn_id=turn_id, outcome="interrupted", reason="the process running it stopped"
            )
        )
    continued = None
    if parked:
        if drive:
            session.resume_turn()
    elif continue_work and turn_id is not None and not aborting:
        continued = (await session.continue_turn(turn_id, drive=drive)).data["turn_id"]
    elif continue_work and uncontinued is not None:
        # an earlier resume died right after ending the turn: start its continuation now
        continued = (await session.continue_turn(uncontinued, drive=drive)).data["turn_id"]
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
