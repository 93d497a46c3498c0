"""What the contract's tests share: fixed ids, look-alike references, and `check_chain`.

The ids are fixed UUIDv7s, so that a failing test names the same record every run.
`check_chain` is the whole-log check most tests end with; a backend's own tests may use it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threadlog.model import codec
from threadlog.model.envelope import FORMAT_VERSION, Record, record_hash
from threadlog.model.ids import uuid7
from threadlog.model.reducer import replay

if TYPE_CHECKING:
    from threadlog.store.protocol import Store

__all__ = [
    "BIG",
    "EVENT_ID",
    "LOOKALIKE",
    "LOOKALIKES",
    "MISSING_THREAD",
    "OTHER_ID",
    "check_chain",
    "start_call",
]

EVENT_ID = uuid7(1_700_000_000_000, bytes(10))
OTHER_ID = uuid7(1_700_000_000_001, bytes(10))
MISSING_THREAD = uuid7(1_700_000_000_000, b"\x01" * 10)
LOOKALIKE = {"$artifact": {"sha256": "ab" * 32, "size": 3, "media_type": "text/plain"}}
LOOKALIKES: list[Any] = [
    LOOKALIKE,  # the whole data
    {"result": LOOKALIKE},  # a top-level value
    {"$escaped": 1},  # the escape itself, whole
    {"x": {"$escaped": LOOKALIKE}},  # an escaped look-alike, as a value
    {"$escaped": {"$escaped": "deep"}},
    {"a": LOOKALIKE, "b": {"$escaped": None}, "c": 1, "d": {"$artifact": 1}},
    {"$artifact": {"sha256": "cd" * 32, "size": 3, "media_type": "text/plain", "summary": "x"}},
]
BIG = 200_000
"""Larger than any backend's artifact threshold by default (64 KiB)."""


def check_chain(records: list[Record]) -> None:
    """Ordinals from 1, each ``prev`` the previous ``hash``, each hash recomputed, and the
    whole log accepted by the reducer (for a thread that is not a fork)."""
    assert records, "a thread always has its thread.created record"
    for i, record in enumerate(records):
        assert record.ord == i + 1
        assert record.v == FORMAT_VERSION
        assert record.prev == (records[i - 1].hash if i else None)
        digest = record_hash(record, codec.canonical(record.data))
        assert digest == record.hash, f"ord {record.ord}: hash does not match the content"
    assert len({r.id for r in records}) == len(records)
    replay(records)


def start_call(store: Store, thread: str, call_id: str = "c", turn_id: str = "t") -> int:
    """Append what makes a result for ``call_id`` legal (a running turn, the call proposed,
    approved and started: the store refuses a result before its start); the last ord."""
    store.append(thread, "turn.started", {"turn_id": turn_id, "input": "go"})
    call = {"turn_id": turn_id, "call_id": call_id, "tool": "t", "args": {}}
    store.append(thread, "tool_call.proposed", {**call, "side_effect": "read_only"})
    store.append(thread, "tool_call.approved", {"call_id": call_id, "by": "policy"})
    return store.append(thread, "tool_call.started", {"call_id": call_id}).ord
