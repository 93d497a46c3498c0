"""Snapshots of reduced state, so that resuming a long thread costs its tail, not its length.

A snapshot is the `ThreadState` and the model `Context` after ord N, serialized to JSON. The
store keeps it beside the index with N, the hash of record N and the byte offset after it; a
reader checks that the rollout's record N still has that hash, then reduces only the records
after it. A snapshot of another format (or threadlog version) is ignored, never trusted.

The payload is a JSON line, the state with the context's small parts, then the context's
nodes (one per record: most of a long thread's snapshot), packed (`threadlog.model.nodes`). So `load_state`
(the store's admission check) reads the first line only, and `load` keeps the nodes serialized
until something reads them (`threadlog.model.nodes`): resuming a million-record thread does
not build a million nodes it will not look at.
"""

from __future__ import annotations

from typing import Any

import orjson

from threadlog._version import __version__
from threadlog.model.context import Context
from threadlog.model.nodes import Nodes, merge
from threadlog.model.state import (
    InputState,
    MemoryState,
    OperationState,
    StepState,
    ThreadState,
    ToolCallState,
    TurnState,
    trim,
)

__all__ = [
    "SNAPSHOT_VERSION",
    "Parts",
    "dump",
    "dump_trimmed",
    "load",
    "load_state",
    "pack",
    "take",
]

SNAPSHOT_VERSION = f"7/{__version__}"
"""Snapshots are only used by the code that wrote them (a reducer change must not read an
old snapshot as if it were its own). 3: the state and context hold large values loaded, not
their artifact references (`threadlog.runtime.large_values`). 4: the nodes apart,
packed. 5: the context also holds the last step's exact context (the base of the next step's,
`threadlog.model.stepcontext`). 6: the state may be trimmed (`ThreadState.trimmed`: a store's
checkpoint keeps past turns and calls without their payloads). 7: the state knows what
opened its open session (`ThreadState.session_source`) and each turn what opened the session
that started it (`TurnState.source`)."""

_NESTED: dict[str, type[Any]] = {
    "turns": TurnState,
    "steps": StepState,
    "tool_calls": ToolCallState,
    "inputs": InputState,
    "memories": MemoryState,
    "operations": OperationState,
}


Parts = tuple[bytes, bytes | memoryview | None, bytes]
"""A snapshot taken but not packed yet (`take`): the first line, the nodes of the snapshot
the context was loaded from (packed, or None), the JSON object of the other nodes."""


def take(state: ThreadState, context: Context) -> Parts:
    """Serialize a state and its context, all but the packing (`pack`): what must happen
    where the state is changed (the session's loop); the rest is bytes only."""
    nodes = context.nodes
    head = orjson.dumps(
        {
            "version": SNAPSHOT_VERSION,
            "state": state,
            "context": {
                "leaf": context.leaf,
                "queued": context._queued,
                "calls": context._calls,
                "step": context.step,
                "compacted": context.compacted,
            },
        }
    )
    if isinstance(nodes, Nodes):
        packed, added = nodes.parts()
        return head, packed, added
    return head, None, orjson.dumps(nodes)


def pack(parts: Parts) -> bytes:
    """The payload of a snapshot `take` took (any thread: bytes only)."""
    head, packed, added = parts
    return b"".join((head, b"\n", merge(packed, added)))


def dump(state: ThreadState, context: Context) -> bytes:
    """Serialize a state and its context (the module docstring says how)."""
    return pack(take(state, context))


def dump_trimmed(state: ThreadState) -> bytes:
    """A store's checkpoint of a log's own state (what its appends are checked against):
    the state trimmed in place (`threadlog.model.state.trim`: past turns' and calls'
    payloads would make it, and each checkpoint, as large as the log), then serialized
    without a context. The caller checks nothing more against ``state``."""
    trim(state)
    return dump(state, Context())


def _head(data: bytes) -> tuple[dict[str, Any], int] | None:
    end = data.find(b"\n")
    if end < 0:
        return None
    doc = orjson.loads(memoryview(data)[:end])
    if not isinstance(doc, dict) or doc.get("version") != SNAPSHOT_VERSION:
        return None
    return doc, end


def _state(raw: dict[str, Any]) -> ThreadState:
    raw = dict(raw)
    for name, cls in _NESTED.items():
        raw[name] = {key: cls(**value) for key, value in raw[name].items()}
    return ThreadState(**raw)


def load_state(data: bytes) -> ThreadState | None:
    """The state of a snapshot (its first line only), or None if this code did not write it."""
    try:
        head = _head(data)
        return None if head is None else _state(head[0]["state"])
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return None


def load(data: bytes) -> tuple[ThreadState, Context] | None:
    """The state and context of a snapshot, or None if it is not one this code wrote. The
    context's nodes stay serialized until they are read (`threadlog.model.nodes`)."""
    try:
        head = _head(data)
        if head is None:
            return None
        doc, end = head
        state = _state(doc["state"])
        ctx = doc["context"]
        body = memoryview(data)[end + 1 :]
        if not body:
            return None
        step = ctx["step"]
        context = Context(
            nodes=Nodes(body),
            leaf=ctx["leaf"],
            _queued=ctx["queued"],
            _calls=ctx["calls"],
            step=None if step is None else (step[0], step[1]),
            compacted=ctx["compacted"],
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return None
    return state, context
