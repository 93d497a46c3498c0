"""Durability classes: how soon each event type must be on disk.

* ``critical`` — durable (fsync / commit) before the append returns and before anyone sees it:
  user input, approvals, a tool call's start intent and result, plan versions, artifacts,
  turn boundaries, memory, lineage.
* ``buffered`` — group-committed within a bound (100 ms by default); ``flush()`` forces it:
  model responses, config changes, labels. (A lost model response is re-asked from the
  durable ``step.started`` context; it drove no side effect that was not itself recorded.)
* ``transient`` — never persisted (token deltas, tool progress): live subscribers only. No
  catalogued type is transient; the runtime keeps such updates out of the log.

A caller may always ask for more durability than its type's class (``durable=True``).
"""

from __future__ import annotations

from typing import Final, Literal

__all__ = ["BUFFERED", "Durability", "durability_of"]

Durability = Literal["critical", "buffered", "transient"]

BUFFERED: Final = frozenset(
    {
        "config.changed",
        "model.responded",
        "label.set",
    }
)
"""Types whose loss in a power cut is recoverable (the runtime re-derives or re-asks)."""


def durability_of(type_name: str) -> Durability:
    """The class of an event type; everything not listed as buffered is critical."""
    return "buffered" if type_name in BUFFERED else "critical"
