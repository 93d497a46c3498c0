"""Read models: the state of a thread and of its turns, steps, tool calls and inputs.

The reducer owns these objects and updates them in place (one event costs O(1), so a 100,000
event replay stays linear); everything else treats them as read-only. Use `copy.deepcopy` to
keep a snapshot.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from threadlog._dataclass import dataclass

__all__ = [
    "InputState",
    "MemoryState",
    "OperationState",
    "StepState",
    "ThreadState",
    "ToolCallState",
    "TurnState",
    "trim",
]


@dataclass(slots=True, kw_only=True)
class TurnState:
    turn_id: str
    input: str
    status: str
    """``running``, or the terminal outcome: completed | aborted | failed | interrupted."""
    started_ord: int
    ended_ord: int | None = None
    reason: str | None = None
    steps: list[str] = field(default_factory=list)
    tool_calls: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    """Steering inputs consumed into this turn, in order."""
    usage: dict[str, Any] = field(default_factory=dict)
    """Tokens (and cost) this turn's model responses used (`threadlog.model.budget`)."""
    source: str | None = None
    """What opened the session that started the turn (``cli``, ``api``, ``sdk``; None for a
    turn a fork inherited): a service drives on only the turns a service started."""


@dataclass(slots=True, kw_only=True)
class StepState:
    step_id: str
    turn_id: str
    status: str
    """``started`` → ``provider_started`` → ``responded`` | ``interrupted`` (a retried
    request goes back from ``provider_started`` to ``started``)."""
    started_ord: int
    context_hash: str | None = None
    stop_reason: str | None = None
    tool_calls: list[str] = field(default_factory=list)
    """Calls proposed from this step's response, in order."""


@dataclass(slots=True, kw_only=True)
class ToolCallState:
    call_id: str
    turn_id: str
    tool: str
    args: dict[str, Any]
    side_effect: str
    status: str
    """See `threadlog.model.toolcalls.TRANSITIONS`."""
    proposed_ord: int
    last_ord: int
    idempotency_key: str | None = None
    attempt: int = 0
    intent: dict[str, Any] | None = None
    """The latest attempt's recorded intent (``tool_call.started``), for its reconcile hook."""
    ok: bool | None = None
    result: Any = None
    error: str | None = None
    decided_by: str | None = None


@dataclass(slots=True, kw_only=True)
class InputState:
    input_id: str
    text: str
    queued_ord: int
    consumed_by: str | None = None
    consumed_ord: int | None = None


@dataclass(slots=True, kw_only=True)
class MemoryState:
    memory_id: str
    fact: str
    source_event: str
    scope: str
    written_at: str
    expires_at: str | None
    revoked: bool = False
    key: str | None = None
    project: str | None = None


@dataclass(slots=True, kw_only=True)
class OperationState:
    op_id: str
    kind: str
    started_ord: int
    ok: bool | None = None


@dataclass(slots=True, kw_only=True)
class ThreadState:
    thread_id: str
    principal: str
    created_at: str
    format: int
    config: dict[str, Any]
    lineage: dict[str, Any] | None = None
    title: str | None = None
    last_ord: int = 0
    last_hash: str | None = None
    last_id: str | None = None
    turns: dict[str, TurnState] = field(default_factory=dict)
    active_turn: str | None = None
    steps: dict[str, StepState] = field(default_factory=dict)
    tool_calls: dict[str, ToolCallState] = field(default_factory=dict)
    inputs: dict[str, InputState] = field(default_factory=dict)
    plan_version: int = 0
    plan: Any = None
    leaf: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    memories: dict[str, MemoryState] = field(default_factory=dict)
    operations: dict[str, OperationState] = field(default_factory=dict)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    resumes: int = 0
    archived: bool = False
    """Whether the thread is archived (``thread.archived``): no new turn starts then."""
    usage: dict[str, Any] = field(default_factory=dict)
    """Tokens (and cost) of every model response in the log (`threadlog.model.budget`):
    ``input_tokens``, ``output_tokens``, ``cost`` when known, and any other counter a
    provider reports. A fork's totals include the responses it inherited."""
    plan_source: dict[str, Any] = field(default_factory=dict)
    """What produced the current plan version: its ``by``, ``reason``, ``caused_by`` and
    ``call_id``, where recorded (`threadlog.model.plans`)."""
    branch_anchor: dict[str, str] = field(default_factory=dict)
    """Record id → the ``config.changed`` that set the branch-carried settings on its path
    (records without one use the thread's initial settings; `threadlog.model.settings`)."""
    branch_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``config.changed`` id → the branch-carried settings in effect after it (``""``: the
    thread's initial ones, kept once the first such change is made)."""
    session: str | None = None
    """The session that opened the thread (``session.opened``) and has not closed it: the
    live one, or one whose process stopped without closing."""
    session_source: str | None = None
    """What opened `session` (its ``session.opened``'s ``source``: ``cli``, ``api``,
    ``sdk``): a service takes over only the threads a service left (`threadlog.runtime.
    takeover`), and learns it here without reading the log back to that record."""
    trimmed: bool = False
    """Whether `trim` dropped payloads of this state's finished history (then it decides
    what may be appended next exactly as the whole state would, but it does not describe
    every past call and turn)."""

    @property
    def last_turn(self) -> TurnState | None:
        """The turn started last (the running one, when one runs), or None."""
        return next(reversed(self.turns.values()), None)

    @property
    def pending_inputs(self) -> list[InputState]:
        """Queued input not yet consumed by a turn, oldest first."""
        return [i for i in self.inputs.values() if i.consumed_by is None]

    @property
    def open_tool_calls(self) -> list[ToolCallState]:
        """Tool calls without a terminal state, in proposal order."""
        from threadlog.model.toolcalls import TERMINAL

        return [c for c in self.tool_calls.values() if c.status not in TERMINAL]


def trim(state: ThreadState) -> bool:
    """Drop, in place, the payloads of what is over and done in ``state``: the input of every
    turn that ended before the latest one, the text of the inputs those turns consumed (the
    steering they took in, and the queued input one started from), and the arguments,
    intent, result and error of their tool calls that reached a terminal status. True if anything was dropped (``state.trimmed`` is then set).

    What the reducer checks an event against (statuses, ordinals, which ids exist) is all
    kept, so a trimmed state admits and refuses exactly what the whole one does; it is what
    a store keeps to check appends with (its checkpoints), where the whole history's
    payloads would make the state as large as the log. Views of past turns and calls read
    the log instead (`threadlog.store.protocol.Store.state`). One pass over the turns, one
    over the inputs.
    """
    from threadlog.model.toolcalls import TERMINAL

    dropped = False
    latest = next(reversed(state.turns), None)
    calls = state.tool_calls
    done: set[str] = set()
    for turn_id, turn in state.turns.items():
        if turn_id == latest or turn.status == "running":
            continue
        done.add(turn_id)
        if turn.input:
            turn.input = ""
            dropped = True
        for call_id in turn.tool_calls:
            call = calls.get(call_id)
            if call is None or call.status not in TERMINAL:
                continue
            if call.args or call.result is not None or call.intent is not None or call.error:
                call.args, call.result, call.intent, call.error = {}, None, None, None
                dropped = True
    # the inputs those turns consumed: steering (``input.consumed``), and the queued input a
    # turn started from (``turn.started``'s ``input_id``, which the turn does not list)
    for queued in state.inputs.values():
        if queued.text and queued.consumed_by in done:
            queued.text = ""
            dropped = True
    if dropped:
        state.trimmed = True
    return dropped
