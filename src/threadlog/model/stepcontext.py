"""A step's exact context, recorded by reference: what changed since the step before (pure).

Theory of operation
-------------------
*A step records the context it sent, by reference.* A model call's context (its request as
plain JSON: model, instructions, thinking, tools, messages — `ModelRequest.snapshot`) grows
by a few messages a step. Recording it whole at every ``step.started`` makes n steps cost
O(n²) bytes; so a step records ``context_hash`` (the SHA-256 of the canonical JSON of the
exact context sent) and, relative to the thread's previous step (``base``: the id of its
``step.started`` record), a ``delta``:

* ``messages``: the step's messages as a list of segments, each either ``[start, stop]``
  (the base's messages ``start:stop``) or a message dict (a message the base did not have,
  appended as sent). The usual step is one slice and the messages its model call added (the
  previous response, tool results, steering input); after a compaction the summary message
  comes first and the kept messages are a slice; a changed plan or memory message is a
  literal before a slice.
* ``set``: the other keys whose value changed (the model, instructions, tools, …), and
  ``unset``: the keys the base had and this context does not.
* ``compaction``: the id of the ``compaction`` record applied since the base step, when one
  was (informational: the summary is among the messages, as sent).

A step with no base (a thread's first step, the first after a context the fold could not
follow) records ``context`` whole, as every step did before this format; both shapes are
read. An imported step may record neither: its context is unknown (None).

*Rebuilding checks.* `StepContexts` folds the records in log order and rebuilds every step's
context from its base; `step_context` is the one function a consumer asks for a step's exact
context. A rebuilt context whose hash is not the recorded ``context_hash`` (a tampered message,
a base the log does not hold) raises `ContextMismatch`, naming the step. Records must have
their artifact references loaded (`threadlog.runtime.large_values`, `Store.resolve`): a
context that is still a reference raises too.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import TYPE_CHECKING, Any

from threadlog.errors import ThreadlogError
from threadlog.model import codec
from threadlog.model.refs import is_artifact_ref

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from threadlog.model.envelope import Record

__all__ = [
    "ContextMismatch",
    "StepContexts",
    "apply_delta",
    "context_delta",
    "context_hash",
    "message_count",
    "step_context",
]


class ContextMismatch(ThreadlogError):
    """A step's context cannot be rebuilt from the log, or is not what its hash says."""


def context_hash(context: dict[str, Any]) -> str:
    """The hash ``step.started`` records: SHA-256 of the context's canonical JSON."""
    return hashlib.sha256(codec.canonical(context)).hexdigest()


def context_delta(
    base: dict[str, Any], context: dict[str, Any], *, compaction: str | None = None
) -> dict[str, Any]:
    """``context`` as a delta over ``base`` (see the module docstring); `apply_delta` undoes
    it exactly."""
    delta: dict[str, Any] = {"messages": _segments(base.get("messages") or [], context["messages"])}
    changed = {
        key: value
        for key, value in context.items()
        if key != "messages" and (key not in base or not _same(base[key], value))
    }
    if changed:
        delta["set"] = changed
    gone = sorted(key for key in base if key not in context)
    if gone:
        delta["unset"] = gone
    if compaction is not None:
        delta["compaction"] = compaction
    return delta


def _is_slice(segment: Any) -> bool:
    """Whether a delta's segment is ``[start, stop]`` (a slice of the base's messages)."""
    return isinstance(segment, list) and len(segment) == 2 and all(type(i) is int for i in segment)


def message_count(step: dict[str, Any]) -> int | None:
    """How many messages a ``step.started`` record's data says its model call sent, from
    its whole ``context`` or its ``delta`` (a slice counts its length, anything else one),
    without its base; None when it holds neither (an imported step)."""
    context = step.get("context")
    if isinstance(context, dict) and isinstance(context.get("messages"), list):
        return len(context["messages"])
    delta = step.get("delta")
    if isinstance(delta, dict) and isinstance(delta.get("messages"), list):
        return sum(
            max(0, segment[1] - segment[0]) if _is_slice(segment) else 1
            for segment in delta["messages"]
        )
    return None


def apply_delta(base: dict[str, Any], delta: Any) -> dict[str, Any]:
    """The context ``delta`` describes over ``base``; `ContextMismatch` if it is malformed."""
    if not isinstance(delta, dict) or not isinstance(delta.get("messages"), list):
        raise ContextMismatch("a context delta without its messages")
    old = base.get("messages") or []
    messages: list[Any] = []
    for segment in delta["messages"]:
        if isinstance(segment, dict):
            messages.append(segment)
        elif _is_slice(segment) and 0 <= segment[0] <= segment[1] <= len(old):
            messages.extend(old[segment[0] : segment[1]])
        else:
            raise ContextMismatch(
                "a context delta segment that is neither a message nor a slice of its "
                f"base's {len(old)} messages: {str(segment)[:200]}"
            )
    changed, unset = delta.get("set") or {}, delta.get("unset") or []
    if not isinstance(changed, dict) or not isinstance(unset, list):
        raise ContextMismatch("a context delta whose set is not an object or unset not a list")
    context = {key: value for key, value in base.items() if key != "messages" and key not in unset}
    context.update(changed)
    context["messages"] = messages
    return context


class StepContexts:
    """Each step's exact context, rebuilt while the records are folded in log order.

    Only the last step's context is kept (a delta's ``base`` is the thread's previous step),
    so a fold over a long thread holds one context, not one per step.
    """

    def __init__(self, *, verify: bool = True) -> None:
        self.verify = verify
        """Check each rebuilt context against its recorded hash (`ContextMismatch`)."""
        self.last: tuple[str, dict[str, Any]] | None = None
        """The last step's ``step.started`` id and context (None: unknown, or no step yet)."""

    def apply(self, record: Record) -> dict[str, Any] | None:
        """Fold one record in; for a ``step.started``, its context (None when the step
        recorded none). `ContextMismatch` when it cannot be rebuilt or fails its hash check
        (the fold then knows no base: a later step with a whole context still reads)."""
        if record.type != "step.started":
            return None
        data = record.data
        if not isinstance(data, dict):
            raise ContextMismatch(
                f"step.started at ord {record.ord}: its data is not an object (an artifact "
                "reference? load the records' references first)"
            )
        step_id = str(data.get("step_id"))
        last, self.last = self.last, None
        context = resolve(data, lambda ref: last[1] if last and last[0] == ref else None, step_id)
        if context is not None and self.verify:
            check(context, data.get("context_hash"), step_id)
        if context is not None:
            self.last = (record.id, context)
        return context


def step_context(records: Iterable[Record], step_id: str) -> dict[str, Any] | None:
    """The exact context step ``step_id`` sent to its model, rebuilt from the thread's
    records (log order, references loaded) and checked against its recorded hash.

    None when the step recorded no context (an imported step); `ContextMismatch` when it
    cannot be rebuilt or is not what its hash says; KeyError when the log has no such step.
    """
    contexts = StepContexts(verify=False)
    for record in records:
        if record.type != "step.started":
            continue
        if isinstance(record.data, dict) and record.data.get("step_id") == step_id:
            context = contexts.apply(record)
            if context is not None:
                check(context, record.data.get("context_hash"), step_id)
            return context
        with contextlib.suppress(ContextMismatch):  # an earlier step's damage is its own
            contexts.apply(record)
    raise KeyError(step_id)


def resolve(
    data: dict[str, Any],
    base_of: Callable[[Any], dict[str, Any] | None],
    step_id: str = "?",
) -> dict[str, Any] | None:
    """A ``step.started``'s context from its data: the whole ``context``, or its ``delta``
    over ``base_of(data["base"])`` (the base's context, None if unknown)."""
    whole = data.get("context")
    if whole is not None:
        if is_artifact_ref(whole):
            raise ContextMismatch(
                f"step {step_id}: its context is an artifact reference "
                "(load the records' references first)"
            )
        if not isinstance(whole, dict):
            raise ContextMismatch(f"step {step_id}: its context is not an object")
        return whole
    delta = data.get("delta")
    if delta is None:
        return None
    if is_artifact_ref(delta):
        raise ContextMismatch(
            f"step {step_id}: its context delta is an artifact reference "
            "(load the records' references first)"
        )
    base = base_of(data.get("base"))
    if base is None:
        raise ContextMismatch(
            f"step {step_id}: its context is given relative to record {data.get('base')!r}, "
            "which is not the step before it with a known context in this log"
        )
    try:
        return apply_delta(base, delta)
    except ContextMismatch as exc:
        raise ContextMismatch(f"step {step_id}: {exc}") from None


def check(context: dict[str, Any], recorded: Any, step_id: str = "?") -> None:
    """`ContextMismatch` unless ``context`` hashes to ``recorded`` (a step without a recorded
    hash is not checked)."""
    if recorded is None:
        return
    actual = context_hash(context)
    if actual != recorded:
        raise ContextMismatch(
            f"step {step_id}: the context rebuilt from the log hashes to {actual[:12]}…, "
            f"not to the recorded {str(recorded)[:12]}… (a record it is built from was altered)"
        )


def _same(a: Any, b: Any) -> bool:
    return a is b or codec.canonical(a) == codec.canonical(b)


def _segments(old: list[Any], new: list[Any]) -> list[Any]:
    """``new`` as slices of ``old`` and literal messages (greedy: each message continues the
    open slice if it can, else starts one where ``old`` has it, else is a literal). Messages
    after a slice that reached the end of ``old`` are not searched for (they are what the
    step added), so the usual step costs what it added, not its context."""
    segments: list[Any] = []
    index: dict[bytes, int] | None = None
    start, end = -1, 0  # the open slice old[start:end], when start >= 0
    tail = False  # a slice reached the end of old
    for n, message in enumerate(new):
        if start >= 0 and end < len(old) and _same(old[end], message):
            end += 1
            continue
        if start >= 0:
            segments.append([start, end])
            tail = tail or end == len(old)
            start = -1
        at: int | None = None
        if n == 0 and old and _same(old[0], message):
            at = 0
        elif old and (index is not None or not tail):
            if index is None:
                index = {}
                for i, m in enumerate(old):
                    index.setdefault(codec.canonical(m), i)
            at = index.get(codec.canonical(message))
        if at is None:
            segments.append(message)
        else:
            start, end = at, at + 1
    if start >= 0:
        segments.append([start, end])
    return segments
