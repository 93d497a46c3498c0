"""Durability classes: how soon each event type must be on disk.

* ``critical`` — durable (fsync / commit) before the append returns and before anyone sees it:
  user input, approvals, a tool call's start intent and result, model responses, plan
  versions, artifacts, turn boundaries, memory, lineage.
* ``buffered`` — group-committed within a bound (100 ms by default); ``flush()`` forces it:
  config changes, labels.

A model response is critical because it is the record of what was paid for: its ``usage``
is how a restarted session knows the budget already spent (seed 002; `threadlog.model.budget`),
and a lost response would be asked (and paid) again. The price is one more fsync per model
call (~150 µs on the benchmark machine, docs/benchmarks.md), against the hundreds of
milliseconds the call itself takes.
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
        "label.set",
    }
)
"""Types whose loss in a power cut is recoverable (the runtime re-derives or re-asks)."""


def durability_of(type_name: str) -> Durability:
    """The class of an event type; everything not listed as buffered is critical."""
    return "buffered" if type_name in BUFFERED else "critical"
