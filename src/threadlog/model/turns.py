"""The turn loop's decisions, as a pure function of the thread's state (sans-I/O).

`next_action(state)` answers "what should happen next in the running turn?"; the runtime
performs the action, which appends events, which change the state, and asks again. Because the
answer depends only on the reduced log, a resumed session asks the same question and carries
on from exactly where the log says it was.

Order of precedence, within the running turn:

1. an undecided proposal → `Decide` (the approval policy, or wait for a human);
2. an approved call → `RunTool`;
3. a call whose outcome is unknown → `AwaitResolution` (never re-run on a guess);
4. a call that started in a process that is gone → `AwaitTool` (the runtime re-runs it if
   it is read-only or idempotent, asks its reconcile hook, or marks it unknown);

(1–4 look at every open call of the thread, so calls left by an interrupted turn are settled
by the next one.)
5. queued steering input → `ConsumeInput` (a safe point: no call in flight);
6. no step yet, or the last step's calls are all settled, or the last step was interrupted
   → `CallModel`;
7. the last response proposed nothing → `EndTurn("completed")`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from threadlog._dataclass import dataclass
from threadlog.model.approvals import decide

if TYPE_CHECKING:
    from threadlog.model.state import InputState, ThreadState, ToolCallState

__all__ = [
    "Action",
    "is_parked",
    "AwaitResolution",
    "AwaitTool",
    "CallModel",
    "ConsumeInput",
    "Decide",
    "EndTurn",
    "Idle",
    "RunTool",
    "next_action",
    "startable_input",
]


@dataclass(frozen=True, slots=True)
class Idle:
    """No turn is running."""


@dataclass(frozen=True, slots=True)
class Decide:
    call: ToolCallState


@dataclass(frozen=True, slots=True)
class RunTool:
    call: ToolCallState


@dataclass(frozen=True, slots=True)
class AwaitResolution:
    call: ToolCallState


@dataclass(frozen=True, slots=True)
class AwaitTool:
    call: ToolCallState


@dataclass(frozen=True, slots=True)
class ConsumeInput:
    input_id: str


@dataclass(frozen=True, slots=True)
class CallModel:
    turn_id: str
    step_number: int
    """1 for the turn's first model call, and so on."""


@dataclass(frozen=True, slots=True)
class EndTurn:
    turn_id: str
    outcome: str
    reason: str | None = None


Action = Idle | Decide | RunTool | AwaitResolution | AwaitTool | ConsumeInput | CallModel | EndTurn

_OPEN = frozenset({"proposed", "approved", "unknown", "running"})


def next_action(state: ThreadState) -> Action:
    """The next thing the running turn needs (see the module docstring)."""
    turn_id = state.active_turn
    if turn_id is None:
        return Idle()
    turn = state.turns[turn_id]
    # Calls left unfinished by an earlier (interrupted) turn are settled first, whatever turn
    # proposed them: the log must not keep an open tool call behind a new turn's back.
    calls = [c for c in state.tool_calls.values() if c.status in _OPEN]
    for status, action in (
        ("proposed", Decide),
        ("approved", RunTool),
        ("unknown", AwaitResolution),
        ("running", AwaitTool),
    ):
        for call in calls:
            if call.status == status:
                return action(call)
    pending = state.pending_inputs
    if pending:
        return ConsumeInput(pending[0].input_id)
    steps = [state.steps[s] for s in turn.steps]
    if not steps:
        return CallModel(turn_id, 1)
    last = steps[-1]
    if last.status == "responded":
        steered = any((state.inputs[i].consumed_ord or 0) > last.started_ord for i in turn.inputs)
        if last.tool_calls or steered:
            return CallModel(turn_id, len(steps) + 1)
        return EndTurn(turn_id, "completed")
    # started or provider_started without a response (a crash) or interrupted: ask again
    return CallModel(turn_id, len(steps) + 1)


def startable_input(state: ThreadState) -> InputState | None:
    """The input that starts a turn when the thread, no turn running, is next opened: the
    oldest pending input sent after its last turn ended (``threadlog send``; a submit by a
    process that found no turn running). Steering queued for a turn that then ended without
    taking it (aborted, failed) starts nothing: it waits, and the next turn takes it at its
    first safe point (`ConsumeInput`), as in the live session that queued it. None when a
    turn runs or nothing was sent since."""
    if state.active_turn is not None:
        return None
    last = state.last_turn
    after = 0 if last is None else last.ended_ord or 0
    return next((i for i in state.pending_inputs if i.queued_ord > after), None)


def is_parked(state: ThreadState) -> bool:
    """Whether the running turn waits for a human (an approval, or a resolution).

    Such a wait is durable and harmless: nothing is in flight, so a session that closes or
    dies while parked leaves nothing to repair.
    """
    action = next_action(state)
    if isinstance(action, AwaitResolution):
        return True
    if isinstance(action, Decide):
        policy = state.config.get("approval_policy")
        return (
            decide(
                policy if isinstance(policy, dict) else None,
                action.call.tool,
                action.call.side_effect,
            )
            == "ask"
        )
    return False
