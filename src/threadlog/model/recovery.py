"""Recovery planning: what a resumed session must repair, decided from the state alone (pure).

Every tool call without a final result falls in exactly one class (MISSION §4):

1. **has a durable result** — reused; the tool is never called again (nothing to plan);
2. **certainly not started** (proposed or approved, no ``tool_call.started``) — decided and run
   again by the normal turn loop, per policy;
3. **started, no result** — the outcome is unknown:

   * ``read_only`` and ``idempotent`` tools are run again (attempt + 1);
   * ``non_idempotent`` tools are asked through their ``reconcile`` hook, when they have one,
     whether the effect happened; otherwise the call becomes ``unknown`` and the thread waits
     for a human (``threadlog resolve``). Nothing is ever marked failed and retried blindly.

A model call that started and has no response is recorded as ``provider.interrupted`` and
issued again; a turn still running is ended ``interrupted``.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Any

from threadlog._dataclass import dataclass

if TYPE_CHECKING:
    from threadlog.model.state import ThreadState

__all__ = ["RecoveryPlan", "continuation_cut_short", "left_by_a_clean_close", "plan_recovery"]


@dataclass(frozen=True, slots=True)
class RecoveryPlan:
    """What resume will do, and why (it is recorded in ``thread.resumed``)."""

    interrupt_turn: str | None = None
    """The turn that was running when the process died."""
    interrupted_steps: tuple[str, ...] = ()
    """Model calls that started and never got a response."""
    reuse: tuple[str, ...] = ()
    """Calls of the interrupted turn with a durable result (class 1)."""
    not_started: tuple[str, ...] = ()
    """Calls proposed or approved but never started (class 2): run by the loop."""
    rerun: tuple[str, ...] = ()
    """Read-only or idempotent calls that started without a result (class 3): run again."""
    unknown: tuple[str, ...] = ()
    """Non-idempotent calls that started without a result (class 3): reconcile, or a human."""
    already_unknown: tuple[str, ...] = ()
    """Calls already waiting for a human decision."""
    pending_inputs: tuple[str, ...] = ()
    """Queued input not consumed yet (kept, consumed by the next turn)."""
    open_operations: tuple[str, ...] = ()
    """Operations (sub-agent spawns, reconcile calls, summaries) that never finished."""
    notes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (
            self.interrupt_turn
            or self.interrupted_steps
            or self.rerun
            or self.unknown
            or self.not_started
            or self.open_operations
        )

    @property
    def in_flight(self) -> bool:
        """Whether a dead process left something half done: a model call, a tool call that
        started, an operation."""
        return bool(self.interrupted_steps or self.rerun or self.unknown or self.open_operations)

    def to_data(self) -> list[dict[str, Any]]:
        """The plan as the ``repairs`` list of ``thread.resumed``."""
        out: list[dict[str, Any]] = list(self.notes)
        if self.interrupt_turn:
            out.append({"kind": "turn_interrupted", "turn_id": self.interrupt_turn})
        out += [{"kind": "step_interrupted", "step_id": s} for s in self.interrupted_steps]
        out += [{"kind": "result_reused", "call_id": c} for c in self.reuse]
        out += [{"kind": "not_started", "call_id": c} for c in self.not_started]
        out += [{"kind": "rerun", "call_id": c} for c in self.rerun]
        out += [{"kind": "outcome_unknown", "call_id": c} for c in self.unknown]
        out += [{"kind": "awaiting_resolution", "call_id": c} for c in self.already_unknown]
        if self.pending_inputs:
            out.append({"kind": "queued_input", "input_ids": list(self.pending_inputs)})
        out += [{"kind": "operation_interrupted", "op_id": o} for o in self.open_operations]
        return out


def plan_recovery(state: ThreadState) -> RecoveryPlan:
    """Classify every unfinished fact of the thread (see the module docstring)."""
    turn_id = state.active_turn
    steps: list[str] = []
    reuse: list[str] = []
    if turn_id is not None:
        turn = state.turns[turn_id]
        steps = [s for s in turn.steps if state.steps[s].status in ("started", "provider_started")]
        reuse = [c for c in turn.tool_calls if state.tool_calls[c].status == "finished"]
    not_started: list[str] = []
    rerun: list[str] = []
    unknown: list[str] = []
    already: list[str] = []
    for call in state.tool_calls.values():
        if call.status in ("proposed", "approved"):
            not_started.append(call.call_id)
        elif call.status == "running":
            (unknown if call.side_effect == "non_idempotent" else rerun).append(call.call_id)
        elif call.status == "unknown":
            already.append(call.call_id)
    return RecoveryPlan(
        interrupt_turn=turn_id,
        interrupted_steps=tuple(steps),
        reuse=tuple(reuse),
        not_started=tuple(not_started),
        rerun=tuple(rerun),
        unknown=tuple(unknown),
        already_unknown=tuple(already),
        pending_inputs=tuple(i.input_id for i in state.pending_inputs),
        open_operations=tuple(o.op_id for o in state.operations.values() if o.ok is None),
    )


def continuation_cut_short(state: ThreadState) -> str | None:
    """The turn a resume ended ``interrupted`` whose continuation never started: the process
    died between the two records (`threadlog.runtime.resume`, steps 5 and 6). No turn runs,
    the thread's last turn ended ``interrupted``, and the session that ended it never closed
    (a resume that chose not to continue and closed cleanly is left as it is). The next
    resume with ``continue_work`` starts the continuation; without it the task would be
    dropped, and steering queued for it started as a turn of its own."""
    last = state.last_turn
    if state.active_turn is not None or state.session is None or last is None:
        return None
    return last.turn_id if last.status == "interrupted" else None


def left_by_a_clean_close(state: ThreadState) -> bool:
    """Whether the running turn, started by a session of this thread, was left by a clean
    close: no session is open (the last one wrote ``session.closed``). A clean close leaves
    a turn running only when it waits for a human, with nothing in flight; a decision
    recorded since (``threadlog approve``, ``deny`` or ``resolve`` while no session was
    live) lets it go on, and nothing of it was interrupted. A turn a fork or a salvage copy
    inherited (no session of this thread started it) may have been cut anywhere, e.g.
    between a response and its proposals: it is not one."""
    turn_id = state.active_turn
    return turn_id is not None and state.session is None and state.turns[turn_id].source is not None
