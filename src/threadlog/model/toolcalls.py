"""The tool-call lifecycle as a table (h11 style).

::

    proposed ──approved──▶ approved ──started──▶ running ──finished──▶ finished
        │                    │  ▲                 │  ▲
        ├──denied──▶ denied  │  │                 │  └─started (attempt+1, idempotent re-run)
        └──cancelled──┬──────┘  │                 └──unknown──▶ unknown
                      ▼         │                                  │
                  cancelled     └──────resolved:retry──────────────┤
                                           done ◀──resolved:done───┤
                                        aborted ◀──resolved:abort──┘

``cancelled`` is how an aborted turn ends every call that has not started (000 §17.7,
"propagate cancellation"): from ``proposed`` or ``approved`` only, never once a call ran.

An event that has no entry for the call's current state is illegal: `next_state` raises
`InvalidTransition` naming the state, the event and the call id, and nothing changes.
"""

from __future__ import annotations

from typing import Final, Literal

from threadlog.errors import InvalidTransition

__all__ = ["TERMINAL", "TRANSITIONS", "ToolCallStatus", "next_state"]

ToolCallStatus = Literal[
    "proposed",
    "approved",
    "denied",
    "running",
    "finished",
    "unknown",
    "done",
    "aborted",
    "cancelled",
]

TRANSITIONS: Final[dict[str, dict[str, str]]] = {
    "proposed": {
        "tool_call.approved": "approved",
        "tool_call.denied": "denied",
        "tool_call.cancelled": "cancelled",
    },
    "approved": {"tool_call.started": "running", "tool_call.cancelled": "cancelled"},
    "running": {
        "tool_call.finished": "finished",
        "tool_call.unknown": "unknown",
        "tool_call.started": "running",
    },
    "unknown": {
        "tool_call.resolved:done": "done",
        "tool_call.resolved:retry": "approved",
        "tool_call.resolved:abort": "aborted",
    },
    "denied": {},
    "finished": {},
    "done": {},
    "aborted": {},
    "cancelled": {},
}
"""``{state: {event key: next state}}``; the key of a resolution is ``tool_call.resolved:<decision>``."""

TERMINAL: Final = frozenset(state for state, moves in TRANSITIONS.items() if not moves)
"""States a call never leaves."""


def next_state(state: str, event_key: str, call_id: str) -> str:
    """The state after ``event_key``, or `InvalidTransition` if the table has no such move."""
    try:
        return TRANSITIONS[state][event_key]
    except KeyError:
        raise InvalidTransition(
            f"tool call {call_id!r} is {state}: {event_key} is not allowed"
        ) from None
