"""The event catalogue: one frozen, keyword-only dataclass per event type, and the `Event` union.

Each class carries its type name as ``type: Literal["…"]``. `threadlog.model.eventdata`
converts between an event and the ``(type, data)`` pair stored in a record's envelope, checking
every field, so a record whose data does not fit its type is refused with the field's name.

Types outside the catalogue are allowed under the ``custom.`` prefix and stay plain dicts
(`Custom`). The catalogue is documented in ``docs/events.md``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, get_args

from threadlog._dataclass import dataclass

__all__ = [
    "CATALOGUE",
    "SESSION_SOURCES",
    "SIDE_EFFECTS",
    "TURN_OUTCOMES",
    "ArtifactStored",
    "BranchSummarized",
    "Compaction",
    "ConfigChanged",
    "Custom",
    "Event",
    "EventBase",
    "InputConsumed",
    "InputQueued",
    "LabelSet",
    "LeafMoved",
    "MemoryRevoked",
    "MemoryWritten",
    "ModelResponded",
    "OperationFinished",
    "OperationStarted",
    "PlanVersioned",
    "ProviderInterrupted",
    "ProviderStarted",
    "SessionClosed",
    "SessionOpened",
    "SessionSource",
    "SideEffect",
    "StepStarted",
    "ThreadArchived",
    "ThreadCreated",
    "ThreadResumed",
    "ToolCallApproved",
    "ToolCallCancelled",
    "ToolCallDenied",
    "ToolCallFinished",
    "ToolCallProposed",
    "ToolCallResolved",
    "ToolCallStarted",
    "ToolCallUnknown",
    "TurnEnded",
    "TurnOutcome",
    "TurnStarted",
    "known_type",
]

SideEffect = Literal["read_only", "idempotent", "non_idempotent"]
TurnOutcome = Literal["completed", "aborted", "failed", "interrupted"]
Resolution = Literal["done", "retry", "abort"]
SessionSource = Literal["cli", "api", "sdk"]
SIDE_EFFECTS: tuple[str, ...] = get_args(SideEffect)
SESSION_SOURCES: tuple[str, ...] = get_args(SessionSource)
TURN_OUTCOMES: tuple[str, ...] = get_args(TurnOutcome)


@dataclass(frozen=True, slots=True, kw_only=True)
class EventBase:
    """What every catalogued event carries besides its own fields.

    The session stamp lives in the record's data, not in the envelope: the envelope's fields
    are fixed (every reader refuses a record with another key, and the verifiers find
    ``prev`` and ``thread`` by their place in the canonical bytes), so an envelope field
    would be a format change every backend and every older reader would have to follow.
    """

    session: str | None = None
    """The live session that wrote the record (the ``session_id`` of its
    ``session.opened``), set by the runtime (000 §17.1); None for a record written outside a
    session (``thread.created``, a fork's settings, an application's direct append)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadCreated(EventBase):
    """Ord 1 of every thread: who owns it, its first config, where it came from."""

    type: Literal["thread.created"] = "thread.created"
    format: int
    """Format version the thread was written with."""
    principal: str
    """Who owns the thread (immutable)."""
    config: dict[str, Any]
    """Initial mutable config: model, instructions, cwd, tools, approval policy, …"""
    lineage: dict[str, Any] | None = None
    """For forks and sub-agents: ``{"thread", "ord", "entry", "kind"}`` of the source."""
    title: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigChanged(EventBase):
    """Some config keys changed (between turns). ``None`` removes a key."""

    type: Literal["config.changed"] = "config.changed"
    changes: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnStarted(EventBase):
    """A user goal starts being handled."""

    type: Literal["turn.started"] = "turn.started"
    turn_id: str
    input: str
    """The user input that started the turn."""
    input_id: str | None = None
    """Set when the turn starts from queued input: that input is consumed by this turn."""
    resumes: str | None = None
    """Set when the turn continues a turn that a crash interrupted (that turn's id)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InputQueued(EventBase):
    """Input arrived (steering while a turn runs, or the next turn's input)."""

    type: Literal["input.queued"] = "input.queued"
    input_id: str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class InputConsumed(EventBase):
    """Queued input was taken into a turn at a safe point."""

    type: Literal["input.consumed"] = "input.consumed"
    input_id: str
    turn_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StepStarted(EventBase):
    """A model call is about to be made with this exact context (`threadlog.model.stepcontext`:
    recorded whole, or by reference to the step before)."""

    type: Literal["step.started"] = "step.started"
    turn_id: str
    step_id: str
    context: Any = None
    """The whole context snapshot (a step with no ``base``), inline, or an artifact reference
    when large."""
    context_hash: str | None = None
    """SHA-256 of the exact context's canonical JSON: what a rebuild is checked against."""
    base: str | None = None
    """The record id of the thread's previous ``step.started``, which ``delta`` is relative to."""
    delta: dict[str, Any] | None = None
    """What changed since ``base``: ``messages`` (slices of the base's and new messages),
    ``set``/``unset`` (other keys), ``compaction`` (a compaction applied since)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderStarted(EventBase):
    """The request left for the provider (operation journal)."""

    type: Literal["provider.started"] = "provider.started"
    turn_id: str
    step_id: str
    provider: str
    model: str
    attempt: int | None = None
    """Set on a retry (2, 3, …) after a ``provider.interrupted`` that was ``retryable``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderInterrupted(EventBase):
    """The provider stream died before a full response; ``partial`` is what arrived."""

    type: Literal["provider.interrupted"] = "provider.interrupted"
    turn_id: str
    step_id: str
    reason: str
    partial: Any = None
    retryable: bool | None = None
    """True when the runtime tries the request again: the step waits for its next
    ``provider.started`` (see `threadlog.runtime.retry`); otherwise the step ends here."""
    attempt: int | None = None
    """Which attempt failed, when the request is tried again."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelResponded(EventBase):
    """The model's full response to a step."""

    type: Literal["model.responded"] = "model.responded"
    turn_id: str
    step_id: str
    message: dict[str, Any]
    usage: dict[str, Any] = dataclasses.field(default_factory=dict)
    stop_reason: str = "end_turn"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallProposed(EventBase):
    """The model proposed a tool call."""

    type: Literal["tool_call.proposed"] = "tool_call.proposed"
    turn_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    side_effect: SideEffect
    step_id: str | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallApproved(EventBase):
    type: Literal["tool_call.approved"] = "tool_call.approved"
    call_id: str
    by: str
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallDenied(EventBase):
    type: Literal["tool_call.denied"] = "tool_call.denied"
    call_id: str
    by: str
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallStarted(EventBase):
    """Durable intent: the tool is about to run (attempt ``attempt``)."""

    type: Literal["tool_call.started"] = "tool_call.started"
    call_id: str
    attempt: int = 1
    idempotency_key: str | None = None
    intent: dict[str, Any] | None = None
    """What the tool recorded before it ran (its ``intent`` hook: for the file tools, the
    file's pre-image and the intended content, by hash and size), so that a reconcile hook
    can later tell from the world whether the effect happened (000 §17.5)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallFinished(EventBase):
    """The tool's final result (an error is a result too, with ``ok`` false)."""

    type: Literal["tool_call.finished"] = "tool_call.finished"
    call_id: str
    ok: bool
    result: Any = None
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallUnknown(EventBase):
    """The call started but its outcome is unknown (a crash cut it off)."""

    type: Literal["tool_call.unknown"] = "tool_call.unknown"
    call_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallResolved(EventBase):
    """A human (or a reconcile hook) decided what happened to an unknown call."""

    type: Literal["tool_call.resolved"] = "tool_call.resolved"
    call_id: str
    decision: Resolution
    by: str
    note: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallCancelled(EventBase):
    """The turn was aborted before the call started: it never runs (000 §17.1, §17.7).

    Legal only from ``proposed`` and ``approved``: a call that started has an outcome of its
    own (a result, or ``unknown``). Recorded before the aborted turn's ``turn.ended``, so a
    cancelled payment can never run in a later turn.
    """

    type: Literal["tool_call.cancelled"] = "tool_call.cancelled"
    call_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEnded(EventBase):
    """The turn's one terminal outcome."""

    type: Literal["turn.ended"] = "turn.ended"
    turn_id: str
    outcome: TurnOutcome
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanVersioned(EventBase):
    """A new version of the thread's plan (000 §17.1: plan versions produced by an approval
    or a re-plan); see `threadlog.model.plans`."""

    type: Literal["plan.versioned"] = "plan.versioned"
    version: int
    plan: Any
    reason: str | None = None
    """Why this version: for a re-plan, what made the previous one wrong."""
    by: str | None = None
    """Who set it: a person, ``model`` (the ``update_plan`` tool), an application."""
    caused_by: str | None = None
    """The id of the record that produced this version: the approval of a proposed plan, or
    the entry (a result, a user message) that prompted a re-plan."""
    call_id: str | None = None
    """The ``update_plan`` tool call whose result this version is."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Compaction(EventBase):
    """Entries up to ``last_entry`` are replaced in model context by ``summary``."""

    type: Literal["compaction"] = "compaction"
    summary: str
    first_entry: str | None
    last_entry: str
    tokens_before: int
    tokens_after: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BranchSummarized(EventBase):
    type: Literal["branch.summarized"] = "branch.summarized"
    from_entry: str
    summary: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LeafMoved(EventBase):
    """The active leaf of the conversation tree moved (a branch from an older entry)."""

    type: Literal["leaf.moved"] = "leaf.moved"
    to: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelSet(EventBase):
    type: Literal["label.set"] = "label.set"
    entry: str
    label: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryWritten(EventBase):
    type: Literal["memory.written"] = "memory.written"
    memory_id: str
    fact: str
    source_event: str
    scope: Literal["thread", "principal", "project"]
    written_at: str
    expires_at: str | None = None
    key: str | None = None
    """What the fact is about (e.g. ``user.timezone``): a newer fact with the same key, or
    one the current task wrote, supersedes it."""
    project: str | None = None
    """For a ``project`` fact: the project it belongs to (the thread's ``project`` setting,
    else its ``cwd``). It is offered only to threads of the same principal and project."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryRevoked(EventBase):
    type: Literal["memory.revoked"] = "memory.revoked"
    memory_id: str
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ArtifactStored(EventBase):
    type: Literal["artifact.stored"] = "artifact.stored"
    sha256: str
    size: int
    media_type: str = "application/octet-stream"
    summary: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationStarted(EventBase):
    """Operation journal: an external action begins."""

    type: Literal["operation.started"] = "operation.started"
    op_id: str
    kind: str
    detail: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationFinished(EventBase):
    type: Literal["operation.finished"] = "operation.finished"
    op_id: str
    ok: bool
    detail: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadResumed(EventBase):
    """A process resumed the thread; ``repairs`` lists what recovery did."""

    type: Literal["thread.resumed"] = "thread.resumed"
    repairs: list[Any] = dataclasses.field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionOpened(EventBase):
    """A live session starts writing the thread (000 §17.1: a session's identity and
    lifecycle are explicit). Written before the session's first record; a session that
    writes nothing leaves no trace."""

    type: Literal["session.opened"] = "session.opened"
    session_id: str
    pid: int
    """The process the session runs in."""
    host: str
    """The machine's host name."""
    source: SessionSource
    """What opened it: ``cli`` (the command line), ``api`` (a server), ``sdk`` (a program)."""
    unclosed: str | None = None
    """The session that opened the thread before and never wrote ``session.closed``: its
    process stopped without closing (a crash)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionClosed(EventBase):
    """The session closed cleanly (the close protocol ran); it writes nothing more."""

    type: Literal["session.closed"] = "session.closed"
    session_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadArchived(EventBase):
    """The thread is archived (``archived``: true) or taken back out of the archive (false):
    left out of the default listing, eligible for ``threadlog gc --archived``, and closed to
    new turns while archived. Nothing is removed."""

    type: Literal["thread.archived"] = "thread.archived"
    archived: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Custom:
    """An application's own event: ``custom.<name>`` with any plain JSON data."""

    type: str
    data: Any


Event = (
    ThreadCreated
    | ConfigChanged
    | TurnStarted
    | InputQueued
    | InputConsumed
    | StepStarted
    | ProviderStarted
    | ProviderInterrupted
    | ModelResponded
    | ToolCallProposed
    | ToolCallApproved
    | ToolCallDenied
    | ToolCallStarted
    | ToolCallFinished
    | ToolCallUnknown
    | ToolCallResolved
    | ToolCallCancelled
    | TurnEnded
    | PlanVersioned
    | Compaction
    | BranchSummarized
    | LeafMoved
    | LabelSet
    | MemoryWritten
    | MemoryRevoked
    | ArtifactStored
    | OperationStarted
    | OperationFinished
    | ThreadResumed
    | SessionOpened
    | SessionClosed
    | ThreadArchived
    | Custom
)

CATALOGUE: dict[str, type[Any]] = {
    cls.__dataclass_fields__["type"].default: cls for cls in get_args(Event) if cls is not Custom
}
"""Type name → event class, for every catalogued type."""


def known_type(name: str) -> bool:
    """True for a catalogued type or a ``custom.`` one."""
    return name in CATALOGUE or name.startswith("custom.")
