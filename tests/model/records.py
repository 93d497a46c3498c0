"""Build real, hash-chained records for tests (encode_record → parse_line, never by hand)."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Final

from threadlog.model.codec import canonical
from threadlog.model.envelope import Record, encode_record, parse_line
from threadlog.model.eventdata import to_data
from threadlog.model.events import (
    Event,
    InputConsumed,
    InputQueued,
    ModelResponded,
    StepStarted,
    ThreadCreated,
    ToolCallApproved,
    ToolCallFinished,
    ToolCallProposed,
    ToolCallStarted,
    TurnEnded,
    TurnStarted,
)
from threadlog.model.ids import uuid7
from threadlog.model.reducer import replay

if TYPE_CHECKING:
    from threadlog.model.state import ThreadState

__all__ = [
    "BASE_MS",
    "THREAD",
    "Chain",
    "agent_turn",
    "created",
    "encode",
    "make_record",
    "record_id",
]

BASE_MS: Final = 1_700_000_000_000
THREAD: Final = uuid7(BASE_MS, bytes(range(10)))


def record_id(ord: int, thread: str = THREAD) -> str:
    """A deterministic UUIDv7 for the record at ``ord`` (time-ordered like real ids)."""
    return uuid7(BASE_MS + ord, hashlib.sha256(f"{thread}/{ord}".encode()).digest()[:10])


def _split(event: Event | tuple[str, Any]) -> tuple[str, Any]:
    if isinstance(event, tuple):
        return event
    return to_data(event)


def encode(
    event: Event | tuple[str, Any],
    *,
    ord: int,
    prev: str | None,
    parent: str | None = None,
    thread: str = THREAD,
    id: str | None = None,
) -> bytes:
    """The rollout line of one record."""
    type_, data = _split(event)
    line, _ = encode_record(
        id=id if id is not None else record_id(ord, thread),
        thread=thread,
        ord=ord,
        parent=parent,
        ts=f"2025-01-01T00:00:00.{ord % 1_000_000:06d}Z",
        type=type_,
        data_json=canonical(data),
        prev=prev,
    )
    return line


def make_record(
    event: Event | tuple[str, Any],
    *,
    ord: int = 1,
    prev: str | None = None,
    parent: str | None = None,
    thread: str = THREAD,
) -> Record:
    """One parsed record (its hash is real)."""
    return parse_line(encode(event, ord=ord, prev=prev, parent=parent, thread=thread))


def agent_turn(
    n: int, *, end: bool = True, steer: bool = False, result: str = "r" * 2000
) -> list[Event]:
    """The events of an agent's turn ``t{n}``: its input (steered with ``i{n}`` if
    ``steer``), a step ``s{n}`` whose response proposes the call ``c{n}``, which runs and
    finishes with ``{"text": result}``, then the turn's end unless not ``end``."""
    turn, step, call = f"t{n}", f"s{n}", f"c{n}"
    steering: list[Event] = (
        [
            InputQueued(input_id=f"i{n}", text=f"steer {n} " * 20),
            InputConsumed(input_id=f"i{n}", turn_id=turn),
        ]
        if steer
        else []
    )
    events: list[Event] = [
        TurnStarted(turn_id=turn, input=f"question {n} " * 50),
        *steering,
        StepStarted(turn_id=turn, step_id=step),
        ModelResponded(turn_id=turn, step_id=step, message={"role": "assistant"}),
        ToolCallProposed(
            turn_id=turn,
            call_id=call,
            tool="read",
            args={"path": f"/file/{n}", "pad": "a" * 1000},
            side_effect="read_only",
            step_id=step,
        ),
        ToolCallApproved(call_id=call, by="policy"),
        ToolCallStarted(call_id=call, intent={"plan": "x" * 100}),
        ToolCallFinished(call_id=call, ok=True, result={"text": result}),
    ]
    if end:
        events.append(TurnEnded(turn_id=turn, outcome="completed"))
    return events


def created(principal: str = "alice", **config: Any) -> ThreadCreated:
    return ThreadCreated(format=1, principal=principal, config=dict(config))


class Chain:
    """A growing, correctly chained log of one thread."""

    def __init__(self, thread: str = THREAD) -> None:
        self.thread = thread
        self.records: list[Record] = []

    def next(self, event: Event | tuple[str, Any], *, ord: int | None = None) -> Record:
        """The record that would follow the log (not appended)."""
        last = self.records[-1] if self.records else None
        return make_record(
            event,
            ord=ord if ord is not None else len(self.records) + 1,
            prev=last.hash if last else None,
            parent=last.id if last else None,
            thread=self.thread,
        )

    def add(self, *events: Event | tuple[str, Any]) -> Record:
        """Append events; returns the last record."""
        for event in events:
            self.records.append(self.next(event))
        return self.records[-1]

    def lines(self) -> list[bytes]:
        return [
            encode(
                (r.type, r.data), ord=r.ord, prev=r.prev, parent=r.parent, thread=r.thread, id=r.id
            )
            for r in self.records
        ]

    def state(self) -> ThreadState:
        return replay(self.records)
