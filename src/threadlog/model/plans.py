"""Plans: versioned, linked to what produced them, and shown to the model (pure).

000 §17.1 puts a task graph and its *plan versions* beside the turns of a thread: each
approval or re-plan produces a new version. A version is a ``plan.versioned`` record
(`threadlog.model.events.PlanVersioned`): the plan itself (any JSON: a list of steps, a task
graph, text), a version number one above the last, and its provenance — ``by`` (who),
``reason`` (why; for a re-plan, what made the previous version wrong), ``caused_by`` (the
record that produced it: the approval of a proposed plan, or the entry that prompted the
re-plan) and ``call_id`` (the ``update_plan`` tool call whose result it is). The log keeps
every version; the state holds the current one (`ThreadState.plan`, ``plan_version``,
``plan_source``).

The current plan enters every model request as a system message (`plan_message`), placed
first with the other standing context, so that the model works to the plan of record rather
than to whatever it last said about it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from threadlog.model.events import PlanVersioned
    from threadlog.model.state import ThreadState

__all__ = ["PLAN_PREFIX", "plan_message", "plan_source", "plan_text"]

PLAN_PREFIX = "The current plan (version {version}{source}; keep to it, or revise it explicitly):\n"


def plan_source(event: PlanVersioned) -> dict[str, Any]:
    """What produced a version: its recorded ``by``, ``reason``, ``caused_by`` and
    ``call_id`` (those present)."""
    fields = {
        "by": event.by,
        "reason": event.reason,
        "caused_by": event.caused_by,
        "call_id": event.call_id,
    }
    return {key: value for key, value in fields.items() if value is not None}


def plan_text(plan: Any) -> str:
    """A plan as the model reads it: text as it is, anything else as JSON."""
    if isinstance(plan, str):
        return plan
    return orjson.dumps(plan, option=orjson.OPT_INDENT_2).decode()


def plan_message(state: ThreadState) -> dict[str, Any] | None:
    """The system message that shows the current plan (None while there is none)."""
    if state.plan_version == 0 or state.plan is None:
        return None
    source = state.plan_source
    by = f", set by {source['by']}" if source.get("by") else ""
    why = f": {source['reason']}" if source.get("reason") else ""
    header = PLAN_PREFIX.format(version=state.plan_version, source=by + why)
    return {"role": "system", "content": header + plan_text(state.plan)}
