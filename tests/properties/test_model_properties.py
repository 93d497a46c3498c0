"""Hypothesis laws for the pure model: codec round trip, replay composition, tamper evidence."""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.model.records import Chain, created
from threadlog.errors import InvalidTransition
from threadlog.model.codec import MAX_DEPTH, canonical, loads
from threadlog.model.envelope import BadRecord, Record, encode_record, parse_line
from threadlog.model.events import (
    ConfigChanged,
    Custom,
    Event,
    InputConsumed,
    InputQueued,
    LabelSet,
    LeafMoved,
    MemoryRevoked,
    MemoryWritten,
    ModelResponded,
    OperationFinished,
    OperationStarted,
    PlanVersioned,
    ProviderInterrupted,
    ProviderStarted,
    StepStarted,
    ThreadResumed,
    ToolCallApproved,
    ToolCallDenied,
    ToolCallFinished,
    ToolCallProposed,
    ToolCallResolved,
    ToolCallStarted,
    ToolCallUnknown,
    TurnEnded,
    TurnStarted,
)
from threadlog.model.ids import derived_id, is_uuid, uuid7, uuid7_millis
from threadlog.model.reducer import apply, apply_all, replay

if TYPE_CHECKING:
    from threadlog.model.state import ThreadState

settings.register_profile("threadlog-model", deadline=None)
settings.load_profile("threadlog-model")

# -- JSON values ------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)
json_without_floats = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1) | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)


@given(json_values)
def test_canonical_round_trips(value: Any) -> None:
    encoded = canonical(value)
    decoded = loads(encoded)
    assert decoded == value
    assert canonical(decoded) == encoded


@given(json_without_floats)
def test_canonical_is_sorted_compact_utf8_json(value: Any) -> None:
    stdlib = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    assert canonical(value) == stdlib.encode()


@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6))
def test_canonical_ignores_insertion_order(value: dict[str, Any]) -> None:
    assert canonical(dict(reversed(list(value.items())))) == canonical(value)


@given(st.integers(min_value=0, max_value=MAX_DEPTH), json_values)
def test_canonical_accepts_nesting_within_max_depth(levels: int, leaf: Any) -> None:
    value = leaf if not isinstance(leaf, list | dict) else 0
    for _ in range(levels):
        value = [value]
    assert loads(canonical(value)) == value


# -- ids --------------------------------------------------------------------------------------


@given(st.integers(min_value=0, max_value=2**48 - 1), st.binary(min_size=10, max_size=10))
def test_uuid7_millis_round_trips(ms: int, rand: bytes) -> None:
    u = uuid7(ms, rand)
    assert is_uuid(u)
    assert uuid7_millis(u) == ms


@given(
    st.integers(min_value=0, max_value=2**48 - 2),
    st.integers(min_value=1, max_value=2**20),
    st.binary(min_size=10, max_size=10),
    st.binary(min_size=10, max_size=10),
)
def test_uuid7_sorts_by_time(ms: int, later: int, rand_a: bytes, rand_b: bytes) -> None:
    assert uuid7(ms, rand_a) < uuid7(min(ms + later, 2**48 - 1), rand_b)


sep_free = st.text(alphabet=st.characters(blacklist_characters="\x1f"), max_size=10)


@given(st.lists(sep_free, min_size=1, max_size=4), st.lists(sep_free, min_size=1, max_size=4))
def test_derived_id_is_distinct_for_distinct_inputs(a: list[str], b: list[str]) -> None:
    # Parts without the "\x1f" separator; see tests/model/test_ids.py for the separator case.
    assert (derived_id(*a) == derived_id(*b)) == (a == b)


# -- legal event sequences --------------------------------------------------------------------


def _candidates(state: ThreadState, fresh: int) -> list[Event]:
    """Events that are legal next, given the state (the reducer must accept each).

    Bookkeeping events come once and lifecycle events (turns, steps, tool calls) three times,
    so that generated logs reach the deeper tool-call states often.
    """
    bookkeeping: list[Event] = [
        ConfigChanged(changes={"k": fresh, "gone": None}),
        InputQueued(input_id=f"in{fresh}", text="steer"),
        PlanVersioned(version=state.plan_version + 1, plan=[fresh]),
        LabelSet(entry=state.last_id or "", label=None if fresh % 3 == 0 else f"l{fresh}"),
        LeafMoved(to=None if fresh % 4 == 0 else state.last_id),
        ThreadResumed(repairs=[fresh]),
        Custom(type="custom.note", data={"n": fresh}),
        OperationStarted(op_id=f"op{fresh}", kind="k"),
        MemoryWritten(
            memory_id=f"m{fresh}", fact="f", source_event="e", scope="thread", written_at="w"
        ),
    ]
    bookkeeping += [
        OperationFinished(op_id=o.op_id, ok=fresh % 2 == 0)
        for o in state.operations.values()
        if o.ok is None
    ]
    bookkeeping += [
        MemoryRevoked(memory_id=m.memory_id) for m in state.memories.values() if not m.revoked
    ]
    out: list[Event] = []
    turn_id = state.active_turn
    if turn_id is None:
        out.append(TurnStarted(turn_id=f"turn{fresh}", input="go"))
    else:
        out += [
            StepStarted(turn_id=turn_id, step_id=f"s{fresh}", context_hash=f"h{fresh}"),
            ToolCallProposed(
                turn_id=turn_id,
                call_id=f"c{fresh}",
                tool="ls",
                args={"n": fresh},
                side_effect="idempotent",
            ),
            TurnEnded(
                turn_id=turn_id,
                outcome=("completed", "aborted", "failed", "interrupted")[fresh % 4],
            ),
        ]
        out += [InputConsumed(input_id=i.input_id, turn_id=turn_id) for i in state.pending_inputs]
        for step_id in state.turns[turn_id].steps:
            status = state.steps[step_id].status
            if status == "started":
                out.append(
                    ProviderStarted(turn_id=turn_id, step_id=step_id, provider="p", model="m")
                )
            if status in ("started", "provider_started"):
                out.append(ModelResponded(turn_id=turn_id, step_id=step_id, message={"n": fresh}))
                out.append(ProviderInterrupted(turn_id=turn_id, step_id=step_id, reason="reset"))
    for call in state.tool_calls.values():
        cid = call.call_id
        if call.status == "proposed":
            out += [ToolCallApproved(call_id=cid, by="p"), ToolCallDenied(call_id=cid, by="p")]
        elif call.status == "approved":
            out.append(ToolCallStarted(call_id=cid, attempt=call.attempt + 1))
        elif call.status == "running":
            out += [
                ToolCallFinished(call_id=cid, ok=True, result=fresh),
                ToolCallUnknown(call_id=cid, reason="crash"),
                ToolCallStarted(call_id=cid, attempt=call.attempt + 1),
            ]
        elif call.status == "unknown":
            out += [
                ToolCallResolved(call_id=cid, decision=d, by="b")
                for d in ("done", "retry", "abort")
            ]
    return bookkeeping + out * 3


def _mischief(state: ThreadState, fresh: int) -> list[Event]:
    """Events that are often illegal next."""
    turn_id = state.active_turn or "turn-none"
    out: list[Event] = [
        TurnStarted(turn_id=turn_id, input="again"),
        TurnEnded(turn_id="turn-none", outcome="completed"),
        PlanVersioned(version=state.plan_version + 2, plan=None),
        PlanVersioned(version=state.plan_version, plan=None),
        ToolCallApproved(call_id="no-such-call", by="p"),
        StepStarted(turn_id=turn_id, step_id=f"s{fresh}"),
        InputConsumed(input_id="no-such-input", turn_id=turn_id),
        OperationFinished(op_id="no-such-op", ok=True),
        created(),
    ]
    for call in state.tool_calls.values():
        cid = call.call_id
        out += [
            ToolCallFinished(call_id=cid, ok=True),
            ToolCallStarted(call_id=cid, attempt=call.attempt),
            ToolCallStarted(call_id=cid, attempt=call.attempt + 1),
            ToolCallResolved(call_id=cid, decision="done", by="b"),
            ToolCallApproved(call_id=cid, by="p"),
        ]
    for turn in state.turns.values():
        out += [
            TurnEnded(turn_id=turn.turn_id, outcome="failed"),
            StepStarted(turn_id=turn.turn_id, step_id="s-x"),
        ]
    out += [InputConsumed(input_id=i, turn_id=turn_id) for i in state.inputs]
    return out


def build_log(choices: list[int]) -> list[Record]:
    """A legal log driven by ``choices``: each picks one of the legal next events."""
    chain = Chain()
    chain.add(created(model="m"))
    state = chain.state()
    for choice in choices:
        options = _candidates(state, len(chain.records) + 1)
        record = chain.next(options[choice % len(options)])
        apply(state, record)  # raises if the generator ever proposes an illegal event
        chain.records.append(record)
    return chain.records


choice_lists = st.lists(st.integers(min_value=0, max_value=2**16), max_size=60)


@given(choice_lists, st.data())
def test_replay_of_a_concatenation_is_apply_all_of_the_rest(
    choices: list[int], data: st.DataObject
) -> None:
    records = build_log(choices)
    k = data.draw(st.integers(min_value=1, max_value=len(records)), label="split")
    a, b = records[:k], records[k:]
    assert replay(a + b) == apply_all(replay(a), b)


@given(choice_lists)
def test_replay_is_deterministic_and_tracks_the_last_record(choices: list[int]) -> None:
    records = build_log(choices)
    state = replay(records)
    assert state == replay(records)
    assert (state.last_ord, state.last_hash, state.last_id) == (
        len(records),
        records[-1].hash,
        records[-1].id,
    )
    assert sum(t.status == "running" for t in state.turns.values()) == (
        state.active_turn is not None
    )


@given(choice_lists, st.data())
def test_a_refused_event_changes_nothing(choices: list[int], data: st.DataObject) -> None:
    chain = Chain()
    chain.records = build_log(choices)
    state = replay(chain.records)
    fresh = len(chain.records) + 1
    event = data.draw(
        st.sampled_from(_mischief(state, fresh) + _candidates(state, fresh)), label="event"
    )
    record = chain.next(event)
    before = copy.deepcopy(state)
    try:
        apply(state, record)
    except InvalidTransition as exc:
        assert exc.ord == record.ord
        assert state == before
    else:
        assert state.last_ord == record.ord


# -- tamper evidence --------------------------------------------------------------------------

hex64 = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
type_names = st.sampled_from(
    ["custom.note", "turn.started", "tool_call.finished", "x"]
) | st.from_regex(r"\Acustom\.[a-z][a-z0-9_]{0,10}\Z")


@st.composite
def record_fields(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "id": draw(st.text(max_size=40)),
        "thread": draw(st.text(max_size=40)),
        "ord": draw(st.integers(min_value=1, max_value=2**53)),
        "parent": draw(st.none() | st.text(max_size=40)),
        "ts": draw(st.text(max_size=30)),
        "type": draw(type_names),
        "data": draw(json_values),
        "prev": draw(st.none() | hex64),
    }


def _line(fields: dict[str, Any]) -> bytes:
    line, _ = encode_record(
        **{k: v for k, v in fields.items() if k != "data"}, data_json=canonical(fields["data"])
    )
    return line


@given(record_fields())
def test_encode_then_parse_round_trips(fields: dict[str, Any]) -> None:
    line = _line(fields)
    record = parse_line(line)
    assert {k: getattr(record, k) for k in fields} == fields
    assert record.v == 1


@given(record_fields(), st.data())
def test_any_single_byte_change_never_parses_to_the_same_record(
    fields: dict[str, Any], data: st.DataObject
) -> None:
    line = _line(fields)
    original = parse_line(line)
    offset = data.draw(st.integers(min_value=0, max_value=len(line) - 1), label="offset")
    byte = data.draw(
        st.integers(min_value=0, max_value=255).filter(lambda b: b != line[offset]), label="byte"
    )
    damaged = line[:offset] + bytes([byte]) + line[offset + 1 :]
    try:
        parsed = parse_line(damaged)
    except BadRecord:
        return
    assert parsed != original
    assert parsed.hash != original.hash


@given(record_fields(), st.data())
def test_any_single_bit_flip_is_refused(fields: dict[str, Any], data: st.DataObject) -> None:
    line = _line(fields)
    offset = data.draw(st.integers(min_value=0, max_value=len(line) - 1), label="offset")
    bit = data.draw(st.integers(min_value=0, max_value=7), label="bit")
    damaged = bytearray(line)
    damaged[offset] ^= 1 << bit
    try:
        parse_line(bytes(damaged))
    except BadRecord:
        return
    raise AssertionError(f"flipping bit {bit} of byte {offset} went unnoticed")
