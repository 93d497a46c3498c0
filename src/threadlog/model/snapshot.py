"""Snapshots of reduced state, so that resuming a long thread costs its tail, not its length.

A snapshot is the `ThreadState` and the model `Context` after ord N, serialized to JSON. The
store keeps it beside the index with N, the hash of record N and the byte offset after it; a
reader checks that the rollout's record N still has that hash, then reduces only the records
after it. A snapshot of another format (or threadlog version) is ignored, never trusted.
"""

from __future__ import annotations

from typing import Any

import orjson

from threadlog._version import __version__
from threadlog.model.context import Context
from threadlog.model.state import (
    InputState,
    MemoryState,
    OperationState,
    StepState,
    ThreadState,
    ToolCallState,
    TurnState,
)

__all__ = ["SNAPSHOT_VERSION", "dump", "load"]

SNAPSHOT_VERSION = f"4/{__version__}"
"""Snapshots are only used by the code that wrote them (a reducer change must not read an
old snapshot as if it were its own). 3: the state and context hold large values loaded, not
their artifact references (`threadlog.runtime.large_values`). 4: the context holds the last
step's exact context (the base of the next step's, `threadlog.model.stepcontext`)."""

_NESTED: dict[str, type[Any]] = {
    "turns": TurnState,
    "steps": StepState,
    "tool_calls": ToolCallState,
    "inputs": InputState,
    "memories": MemoryState,
    "operations": OperationState,
}


def dump(state: ThreadState, context: Context) -> bytes:
    """Serialize a state and its context."""
    return orjson.dumps(
        {
            "version": SNAPSHOT_VERSION,
            "state": state,
            "context": {
                "nodes": context.nodes,
                "leaf": context.leaf,
                "queued": context._queued,
                "calls": context._calls,
                "step": context.step,
                "compacted": context.compacted,
            },
        }
    )


def load(data: bytes) -> tuple[ThreadState, Context] | None:
    """The state and context of a snapshot, or None if it is not one this code wrote."""
    try:
        doc = orjson.loads(data)
        if doc.get("version") != SNAPSHOT_VERSION:
            return None
        raw = dict(doc["state"])
        for name, cls in _NESTED.items():
            raw[name] = {key: cls(**value) for key, value in raw[name].items()}
        state = ThreadState(**raw)
        ctx = doc["context"]
        nodes = {key: (node[0], node[1], node[2]) for key, node in ctx["nodes"].items()}
        step = ctx["step"]
        context = Context(
            nodes=nodes,
            leaf=ctx["leaf"],
            _queued=ctx["queued"],
            _calls=ctx["calls"],
            step=None if step is None else (step[0], step[1]),
            compacted=ctx["compacted"],
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return None
    return state, context
