"""The reducer: the one place that says what an event does to a thread's state.

Theory of operation
-------------------
``apply(state, record)`` decodes the record's typed event, checks that it is legal in the
current state, and only then changes the state. An illegal event raises `InvalidTransition`
(naming the ordinal, the entity and the rule) and leaves the state exactly as it was: every
check happens before the first mutation. ``replay(records)`` folds ``apply`` over a log, so
``replay(a + b)`` equals ``apply_all(replay(a), b)``.

Rules enforced here (the rest of threadlog relies on them):

* ord 1 is ``thread.created`` and there is exactly one; ordinals follow each other by one.
* A turn starts only when no turn is running, and ends exactly once.
* Steps, proposals and consumed input belong to the running turn.
* Tool calls follow `threadlog.model.toolcalls.TRANSITIONS` (no result before a start, no
  approval for an unknown call, …); a re-start must raise the attempt number.
* Queued input is consumed at most once.
* Plan versions count up by one; one that names a tool call names a call of the thread.

Beyond the rules, the reducer folds in what a restarted session must know: the token usage
and cost of every model response (`threadlog.model.budget`), and the branch-carried settings
of the active leaf (`threadlog.model.settings`).
* Only the open session closes (``session.closed`` names the last ``session.opened``).

The reducer does no I/O and keeps no clock: time comes from the records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, assert_never

from threadlog.errors import InvalidTransition
from threadlog.model import settings
from threadlog.model.budget import add_usage
from threadlog.model.eventdata import from_data
from threadlog.model.events import (
    ArtifactStored,
    BranchSummarized,
    Compaction,
    ConfigChanged,
    Custom,
    Event,
    InputConsumed,
    InputQueued,
    LabelSet,
    LeafMoved,
    MemoryRevoked,
    MemoryWritten,
    ModelResponded,
    OperationFinished,
    OperationStarted,
    PlanVersioned,
    ProviderInterrupted,
    ProviderStarted,
    SessionClosed,
    SessionOpened,
    StepStarted,
    ThreadArchived,
    ThreadCreated,
    ThreadResumed,
    ToolCallApproved,
    ToolCallCancelled,
    ToolCallDenied,
    ToolCallFinished,
    ToolCallProposed,
    ToolCallResolved,
    ToolCallStarted,
    ToolCallUnknown,
    TurnEnded,
    TurnStarted,
)
from threadlog.model.state import (
    InputState,
    MemoryState,
    OperationState,
    StepState,
    ThreadState,
    ToolCallState,
    TurnState,
)
from threadlog.model.toolcalls import next_state
from threadlog.model.tree import ENTRY_TYPES

if TYPE_CHECKING:
    from collections.abc import Iterable

    from threadlog.model.envelope import Record

from threadlog.model.envelope import FORMAT_VERSION
from threadlog.model.lineage import inherits
from threadlog.model.plans import plan_source
from threadlog.model.upcast import upcast

__all__ = ["apply", "apply_all", "replay"]


def replay(records: Iterable[Record]) -> ThreadState:
    """Reduce a whole log from empty state."""
    state: ThreadState | None = None
    for record in records:
        state = apply(state, record)
    if state is None:
        raise InvalidTransition("an empty log has no state: ord 1 must be thread.created")
    return state


def apply_all(state: ThreadState, records: Iterable[Record]) -> ThreadState:
    """Apply more records to an existing state."""
    for record in records:
        state = apply(state, record)
    return state


def apply(state: ThreadState | None, record: Record, event: Event | None = None) -> ThreadState:
    """Apply one record (and its decoded event, if the caller has it) to the state.

    Raises:
        InvalidTransition: the event is illegal now; the state is unchanged.
        InvalidData / InvalidEventType: the record's data does not fit its type.
    """
    if record.v != FORMAT_VERSION:
        record = upcast(record)
        event = None
    if event is None:
        if state is not None and record.type.startswith("custom."):
            # An application's own event has no schema and no rule (`_apply_event`), and
            # it is not kept: one placeholder stands for every one, none is built.
            event = _CUSTOM
        else:
            event = from_data(record.type, record.data)
    if state is None:
        if not isinstance(event, ThreadCreated) or record.ord != 1:
            raise InvalidTransition(
                "the first record must be thread.created at ord 1", ord=record.ord
            )
        return ThreadState(
            thread_id=record.thread,
            principal=event.principal,
            created_at=record.ts,
            format=event.format,
            config=dict(event.config),
            lineage=event.lineage,
            title=event.title,
            last_ord=1,
            last_hash=record.hash,
            last_id=record.id,
            leaf=record.id,
        )
    if record.thread != state.thread_id and not inherits(state.lineage, record.thread, record.ord):
        raise InvalidTransition(
            f"record of thread {record.thread} in thread {state.thread_id}", ord=record.ord
        )
    if record.ord != state.last_ord + 1:
        raise InvalidTransition(
            f"expected ord {state.last_ord + 1} after {state.last_ord}", ord=record.ord
        )
    try:
        _apply_event(state, record, event)
    except InvalidTransition as exc:
        if exc.ord is None:
            raise InvalidTransition(str(exc), ord=record.ord) from None
        raise
    state.last_ord = record.ord
    state.last_hash = record.hash
    state.last_id = record.id
    entry = event.type in ENTRY_TYPES  # entries move the active leaf; bookkeeping does not
    if entry:
        state.leaf = record.id
    if state.branch_settings or state.branch_anchor:  # (else `follow` has nothing to do)
        settings.follow(state, record, entry or isinstance(event, LeafMoved))
    return state


_CUSTOM = Custom(type="custom.", data=None)
"""What `apply` passes on for a ``custom.*`` record it was given no event for."""


def _illegal(message: str) -> InvalidTransition:
    return InvalidTransition(message)


def _running_turn(state: ThreadState, turn_id: str, what: str) -> TurnState:
    turn = state.turns.get(turn_id)
    if turn is None:
        raise _illegal(f"{what}: unknown turn {turn_id!r}")
    if turn.status != "running":
        raise _illegal(f"{what}: turn {turn_id!r} already ended ({turn.status})")
    return turn


def _step(state: ThreadState, step_id: str, what: str, turn_id: str | None = None) -> StepState:
    step = state.steps.get(step_id)
    if step is None:
        raise _illegal(f"{what}: unknown step {step_id!r}")
    if turn_id is not None and step.turn_id != turn_id:
        raise _illegal(
            f"{what}: step {step_id!r} belongs to turn {step.turn_id!r}, not {turn_id!r}"
        )
    return step


def _call(state: ThreadState, call_id: str, what: str) -> ToolCallState:
    call = state.tool_calls.get(call_id)
    if call is None:
        raise _illegal(f"{what} for unknown tool call {call_id!r}")
    return call


def _apply_event(state: ThreadState, record: Record, event: Event) -> None:
    if event.__class__ is Custom:  # an application's own event (the common case): no rule
        return
    ord_ = record.ord
    match event:
        # (the most frequent types first: each case is a class test, tried in order)
        case StepStarted(turn_id=turn_id, step_id=step_id, context_hash=context_hash):
            turn = _running_turn(state, turn_id, "step.started")
            if step_id in state.steps:
                raise _illegal(f"step {step_id!r} already exists")
            state.steps[step_id] = StepState(
                step_id=step_id,
                turn_id=turn_id,
                status="started",
                started_ord=ord_,
                context_hash=context_hash,
            )
            turn.steps.append(step_id)
        case ModelResponded(turn_id=turn_id, step_id=step_id, stop_reason=stop_reason, usage=usage):
            turn = _running_turn(state, turn_id, "model.responded")
            step = _step(state, step_id, "model.responded", turn_id)
            if step.status not in ("started", "provider_started"):
                raise _illegal(f"model.responded: step {step_id!r} is {step.status}")
            step.status = "responded"
            step.stop_reason = stop_reason
            add_usage(turn.usage, usage)
            add_usage(state.usage, usage)
        case ToolCallProposed() as proposal:
            turn = _running_turn(state, proposal.turn_id, "tool_call.proposed")
            if proposal.step_id is not None:
                _step(state, proposal.step_id, "tool_call.proposed", proposal.turn_id)
            if proposal.call_id in state.tool_calls:
                raise _illegal(f"tool call {proposal.call_id!r} was already proposed")
            state.tool_calls[proposal.call_id] = ToolCallState(
                call_id=proposal.call_id,
                turn_id=proposal.turn_id,
                tool=proposal.tool,
                args=proposal.args,
                side_effect=proposal.side_effect,
                status="proposed",
                proposed_ord=ord_,
                last_ord=ord_,
                idempotency_key=proposal.idempotency_key,
            )
            turn.tool_calls.append(proposal.call_id)
            if proposal.step_id is not None:
                state.steps[proposal.step_id].tool_calls.append(proposal.call_id)
        case ToolCallApproved(call_id=call_id, by=by) | ToolCallDenied(call_id=call_id, by=by):
            call = _call(state, call_id, event.type)
            call.status = next_state(call.status, event.type, call_id)
            call.decided_by = by
            call.last_ord = ord_
        case ToolCallStarted(call_id=call_id, attempt=attempt, idempotency_key=key, intent=intent):
            call = _call(state, call_id, "tool_call.started")
            status = next_state(call.status, "tool_call.started", call_id)
            if attempt <= call.attempt:
                raise _illegal(
                    f"tool call {call_id!r} attempt {attempt} after attempt {call.attempt}"
                )
            call.status = status
            call.attempt = attempt
            if key is not None:
                call.idempotency_key = key
            call.intent = intent
            call.last_ord = ord_
        case ToolCallFinished(call_id=call_id, ok=ok, result=result, error=error):
            call = _call(state, call_id, "tool_call.finished")
            call.status = next_state(call.status, "tool_call.finished", call_id)
            call.ok, call.result, call.error = ok, result, error
            call.last_ord = ord_
        case TurnStarted(turn_id=turn_id, input=text, input_id=input_id):
            if state.archived:
                raise _illegal(f"turn {turn_id!r} cannot start: the thread is archived")
            if state.active_turn is not None:
                raise _illegal(
                    f"turn {turn_id!r} cannot start: turn {state.active_turn!r} is running"
                )
            if turn_id in state.turns:
                raise _illegal(f"turn {turn_id!r} already exists")
            queued = None
            if input_id is not None:
                queued = state.inputs.get(input_id)
                if queued is None or queued.consumed_by is not None:
                    raise _illegal(
                        f"turn {turn_id!r} cannot start from input {input_id!r}: not queued"
                    )
            state.turns[turn_id] = TurnState(
                turn_id=turn_id,
                input=text,
                status="running",
                started_ord=ord_,
                source=state.session_source,
            )
            state.active_turn = turn_id
            if queued is not None:
                queued.consumed_by, queued.consumed_ord = turn_id, ord_
        case TurnEnded(turn_id=turn_id, outcome=outcome, reason=reason):
            turn = _running_turn(state, turn_id, "turn.ended")
            turn.status = outcome
            turn.ended_ord = ord_
            turn.reason = reason
            state.active_turn = None
        case ThreadCreated():
            raise _illegal("thread.created may only be ord 1")
        case ConfigChanged(changes=changes):
            # model, thinking and tools follow the branch (`threadlog.model.settings`)
            settings.apply_change(state, record, changes)
        case InputQueued(input_id=input_id, text=text):
            if input_id in state.inputs:
                raise _illegal(f"input {input_id!r} was already queued")
            state.inputs[input_id] = InputState(input_id=input_id, text=text, queued_ord=ord_)
        case InputConsumed(input_id=input_id, turn_id=turn_id):
            item = state.inputs.get(input_id)
            if item is None:
                raise _illegal(f"input.consumed for unknown input {input_id!r}")
            if item.consumed_by is not None:
                raise _illegal(
                    f"input {input_id!r} was already consumed by turn {item.consumed_by!r}"
                )
            turn = _running_turn(state, turn_id, "input.consumed")
            item.consumed_by = turn_id
            item.consumed_ord = ord_
            turn.inputs.append(input_id)
        case ProviderStarted(turn_id=turn_id, step_id=step_id):
            _running_turn(state, turn_id, "provider.started")
            step = _step(state, step_id, "provider.started", turn_id)
            if step.status != "started":
                raise _illegal(f"provider.started: step {step_id!r} is {step.status}")
            step.status = "provider_started"
        case ProviderInterrupted(turn_id=turn_id, step_id=step_id, retryable=retryable):
            _running_turn(state, turn_id, "provider.interrupted")
            step = _step(state, step_id, "provider.interrupted", turn_id)
            if step.status not in ("started", "provider_started"):
                raise _illegal(f"provider.interrupted: step {step_id!r} is {step.status}")
            # a request tried again: the step waits for its next provider.started
            step.status = "started" if retryable else "interrupted"
        case ToolCallUnknown(call_id=call_id):
            call = _call(state, call_id, "tool_call.unknown")
            call.status = next_state(call.status, "tool_call.unknown", call_id)
            call.last_ord = ord_
        case ToolCallResolved(call_id=call_id, decision=decision, by=by):
            call = _call(state, call_id, "tool_call.resolved")
            call.status = next_state(call.status, f"tool_call.resolved:{decision}", call_id)
            call.decided_by = by
            call.last_ord = ord_
        case ToolCallCancelled(call_id=call_id):
            call = _call(state, call_id, "tool_call.cancelled")
            call.status = next_state(call.status, "tool_call.cancelled", call_id)
            call.last_ord = ord_
        case PlanVersioned(version=version, plan=plan) as planned:
            if version != state.plan_version + 1:
                raise _illegal(f"plan version {version} does not follow {state.plan_version}")
            if planned.call_id is not None and planned.call_id not in state.tool_calls:
                raise _illegal(f"plan version {version}: unknown tool call {planned.call_id!r}")
            state.plan_version = version
            state.plan = plan
            state.plan_source = plan_source(planned)
        case Compaction() as compaction:
            state.compactions.append(
                {
                    "ord": ord_,
                    "id": record.id,
                    "first_entry": compaction.first_entry,
                    "last_entry": compaction.last_entry,
                    "tokens_before": compaction.tokens_before,
                    "tokens_after": compaction.tokens_after,
                }
            )
        case BranchSummarized():
            pass
        case LeafMoved(to=to):
            # The record itself is not a conversation entry; the leaf moves to its target.
            state.leaf = to
        case LabelSet(entry=entry, label=label):
            if label is None:
                state.labels.pop(entry, None)
            else:
                state.labels[entry] = label
        case MemoryWritten() as memory:
            if memory.memory_id in state.memories:
                raise _illegal(f"memory {memory.memory_id!r} was already written")
            state.memories[memory.memory_id] = MemoryState(
                memory_id=memory.memory_id,
                fact=memory.fact,
                source_event=memory.source_event,
                scope=memory.scope,
                written_at=memory.written_at,
                expires_at=memory.expires_at,
                key=memory.key,
                project=memory.project,
            )
        case MemoryRevoked(memory_id=memory_id):
            mem = state.memories.get(memory_id)
            if mem is None or mem.revoked:
                raise _illegal(f"memory {memory_id!r} is not live")
            mem.revoked = True
        case OperationStarted(op_id=op_id, kind=kind):
            if op_id in state.operations:
                raise _illegal(f"operation {op_id!r} already started")
            state.operations[op_id] = OperationState(op_id=op_id, kind=kind, started_ord=ord_)
        case OperationFinished(op_id=op_id, ok=ok):
            op = state.operations.get(op_id)
            if op is None or op.ok is not None:
                raise _illegal(f"operation {op_id!r} is not open")
            op.ok = ok
        case ThreadResumed():
            state.resumes += 1
        case SessionOpened(session_id=session_id, source=source):
            # A fork's inherited records name sessions of its source: only this thread's
            # own sessions open and close it.
            if record.thread == state.thread_id:
                state.session, state.session_source = session_id, source
        case SessionClosed(session_id=session_id):
            if record.thread == state.thread_id:
                if state.session != session_id:
                    raise _illegal(f"session.closed: session {session_id!r} is not open")
                state.session = state.session_source = None
        case ThreadArchived(archived=archived) if record.thread == state.thread_id:
            # (an archive inherited by a fork is its source's, not the fork's)
            if archived and state.active_turn is not None:
                raise _illegal(f"cannot archive: turn {state.active_turn!r} is running")
            if archived == state.archived:
                raise _illegal(f"the thread is {'already' if archived else 'not'} archived")
            state.archived = archived
        case ArtifactStored() | ThreadArchived() | Custom():
            pass
        case _:
            assert_never(event)
