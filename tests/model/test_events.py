from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, get_args, get_origin

import pytest

from threadlog.errors import InvalidData, InvalidEventType, UsageError
from threadlog.model.codec import canonical, loads
from threadlog.model.envelope import valid_type_name
from threadlog.model.eventdata import check_data, from_data, to_data
from threadlog.model.events import (
    CATALOGUE,
    SIDE_EFFECTS,
    TURN_OUTCOMES,
    ArtifactStored,
    BranchSummarized,
    Compaction,
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
    SessionClosed,
    SessionOpened,
    StepStarted,
    ThreadArchived,
    ThreadCreated,
    ThreadResumed,
    ToolCallApproved,
    ToolCallCancelled,
    ToolCallDenied,
    ToolCallFinished,
    ToolCallProposed,
    ToolCallResolved,
    ToolCallStarted,
    ToolCallUnknown,
    TurnEnded,
    TurnStarted,
    known_type,
)
from threadlog.model.refs import ArtifactRef

REF = ArtifactRef("0123456789abcdef" * 4, 1234, "text/plain", "big").to_data()

# One instance per catalogued type, every optional field set to a non-default value.
SAMPLES: dict[str, Any] = {
    "thread.created": ThreadCreated(
        format=1,
        principal="alice",
        config={"model": "m", "tools": ["ls"]},
        lineage={"thread": "t0", "ord": 4, "entry": "e", "kind": "fork"},
        title="Title",
    ),
    "config.changed": ConfigChanged(changes={"model": "m2", "cwd": None}),
    "turn.started": TurnStarted(turn_id="turn-1", input="hi", input_id="in-0", resumes="turn-0"),
    "input.queued": InputQueued(input_id="in-1", text="also"),
    "input.consumed": InputConsumed(input_id="in-1", turn_id="turn-1"),
    "step.started": StepStarted(
        turn_id="turn-1",
        step_id="s1",
        context={"messages": []},
        context_hash="h",
        base="rec-0",
        delta={"messages": [[0, 1]]},
    ),
    "provider.started": ProviderStarted(
        turn_id="turn-1", step_id="s1", provider="p", model="m", attempt=2
    ),
    "provider.interrupted": ProviderInterrupted(
        turn_id="turn-1", step_id="s1", reason="reset", partial="Hel", retryable=True, attempt=1
    ),
    "model.responded": ModelResponded(
        turn_id="turn-1",
        step_id="s1",
        message={"role": "assistant", "content": "ok"},
        usage={"input": 3, "output": 1},
        stop_reason="tool_use",
    ),
    "tool_call.proposed": ToolCallProposed(
        turn_id="turn-1",
        call_id="c1",
        tool="ls",
        args={"path": "."},
        side_effect="idempotent",
        step_id="s1",
        idempotency_key="k",
    ),
    "tool_call.approved": ToolCallApproved(call_id="c1", by="bob", reason="fine"),
    "tool_call.denied": ToolCallDenied(call_id="c1", by="bob", reason="no"),
    "tool_call.started": ToolCallStarted(
        call_id="c1", attempt=2, idempotency_key="k", intent={"before": "absent"}
    ),
    "tool_call.finished": ToolCallFinished(call_id="c1", ok=False, result=[1], error="boom"),
    "tool_call.unknown": ToolCallUnknown(call_id="c1", reason="crash"),
    "tool_call.resolved": ToolCallResolved(call_id="c1", decision="retry", by="bob", note="n"),
    "tool_call.cancelled": ToolCallCancelled(call_id="c1", reason="the turn was cancelled"),
    "turn.ended": TurnEnded(turn_id="turn-1", outcome="interrupted", reason="stop"),
    "plan.versioned": PlanVersioned(
        version=3, plan=["a", "b"], reason="r", by="alice", caused_by="e7", call_id="c1"
    ),
    "compaction": Compaction(
        summary="s", first_entry="e1", last_entry="e9", tokens_before=100, tokens_after=10
    ),
    "branch.summarized": BranchSummarized(from_entry="e3", summary="s"),
    "leaf.moved": LeafMoved(to="e2"),
    "label.set": LabelSet(entry="e1", label="checkpoint"),
    "thread.archived": ThreadArchived(archived=False),
    "memory.written": MemoryWritten(
        memory_id="m1",
        fact="f",
        source_event="e1",
        scope="project",
        written_at="2025-01-01T00:00:00Z",
        expires_at="2026-01-01T00:00:00Z",
        key="user.timezone",
        project="/srv/app",
    ),
    "memory.revoked": MemoryRevoked(memory_id="m1", reason="stale"),
    "artifact.stored": ArtifactStored(
        sha256="ab" * 32, size=5, media_type="text/plain", summary="x"
    ),
    "operation.started": OperationStarted(op_id="o1", kind="git.push", detail={"ref": "main"}),
    "operation.finished": OperationFinished(op_id="o1", ok=True, detail="done"),
    "thread.resumed": ThreadResumed(repairs=[{"kind": "tool_call.unknown", "call_id": "c1"}]),
    "session.opened": SessionOpened(
        session_id="sess-2", pid=4242, host="box", source="cli", unclosed="sess-0"
    ),
    "session.closed": SessionClosed(session_id="sess-2"),
}
# every sample as a session writes it: its id in the optional ``session`` field
SAMPLES = {name: dataclasses.replace(e, session="sess-1") for name, e in SAMPLES.items()}


def _fields(cls: type[Any]) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if f.name != "type"]


def _required(cls: type[Any]) -> list[str]:
    return [
        f.name
        for f in _fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]


def _data(type_name: str) -> dict[str, Any]:
    _, data = to_data(SAMPLES[type_name])
    assert isinstance(data, dict)
    return dict(data)


CATALOGUED = sorted(CATALOGUE)
FIELD_CASES = [(t, f.name) for t in CATALOGUED for f in _fields(CATALOGUE[t])]
REQUIRED_CASES = [(t, name) for t in CATALOGUED for name in _required(CATALOGUE[t])]


def test_samples_cover_the_whole_catalogue() -> None:
    assert set(SAMPLES) == set(CATALOGUE)
    assert {type(e) for e in SAMPLES.values()} | {Custom} == set(get_args(Event))


@pytest.mark.parametrize("type_name", CATALOGUED)
def test_samples_set_every_optional_field(type_name: str) -> None:
    # Keeps SAMPLES honest when a field is added: the round trips below must see it set.
    event = SAMPLES[type_name]
    for f in _fields(type(event)):
        if f.default is not dataclasses.MISSING:
            assert getattr(event, f.name) != f.default, f.name
        elif f.default_factory is not dataclasses.MISSING:
            assert getattr(event, f.name) != f.default_factory(), f.name


@pytest.mark.parametrize("type_name", CATALOGUED)
def test_catalogue_entry_is_consistent(type_name: str) -> None:
    cls = CATALOGUE[type_name]
    assert valid_type_name(type_name)
    assert not type_name.startswith("custom.")
    if not _required(cls):
        assert cls().type == type_name
    assert SAMPLES[type_name].type == type_name
    params = cls.__dataclass_params__
    assert params.frozen
    assert hasattr(cls, "__slots__")
    with pytest.raises(TypeError):
        cls(*[None] * len(_fields(cls)))  # keyword-only


@pytest.mark.parametrize("type_name", CATALOGUED)
def test_event_round_trips_through_to_data_and_from_data(type_name: str) -> None:
    event = SAMPLES[type_name]
    name, data = to_data(event)
    assert name == type_name
    assert set(data) == {f.name for f in _fields(type(event))}
    assert from_data(name, data) == event


@pytest.mark.parametrize("type_name", CATALOGUED)
def test_event_round_trips_through_canonical_json(type_name: str) -> None:
    name, data = to_data(SAMPLES[type_name])
    assert from_data(name, loads(canonical(data))) == SAMPLES[type_name]


@pytest.mark.parametrize("type_name", CATALOGUED)
def test_only_required_fields_round_trip_with_defaults(type_name: str) -> None:
    cls = CATALOGUE[type_name]
    data = {k: v for k, v in _data(type_name).items() if k in _required(cls)}
    event = from_data(type_name, data)
    assert isinstance(event, cls)
    assert from_data(*to_data(event)) == event
    for f in _fields(cls):
        if f.name in data:
            continue
        if f.default_factory is not dataclasses.MISSING:
            assert getattr(event, f.name) == f.default_factory()
        else:
            assert getattr(event, f.name) == f.default


def test_custom_events_pass_any_data() -> None:
    for data in (None, 1, "s", [1, {"a": None}], {"anything": {"goes": True}}, {"type": "x"}):
        event = from_data("custom.my_app.thing", data)
        assert event == Custom(type="custom.my_app.thing", data=data)
        assert to_data(event) == ("custom.my_app.thing", data)


@pytest.mark.parametrize(
    "type_name", ["turn.begun", "customx", "Custom.x", "", "tool_call", "thread"]
)
def test_unknown_type_is_refused(type_name: str) -> None:
    with pytest.raises(InvalidEventType, match="unknown event type"):
        from_data(type_name, {})
    assert not known_type(type_name)


def test_known_type() -> None:
    assert all(known_type(t) for t in CATALOGUE)
    assert known_type("custom.x")


def test_invalid_event_type_is_a_usage_error() -> None:
    assert issubclass(InvalidEventType, UsageError)
    assert issubclass(InvalidData, UsageError)


@pytest.mark.parametrize("data", [None, [], "turn-1", 1, ["turn_id", "t"]])
def test_data_must_be_an_object(data: Any) -> None:
    with pytest.raises(InvalidData, match="data must be an object"):
        from_data("turn.started", data)


@pytest.mark.parametrize(("type_name", "field"), REQUIRED_CASES)
def test_missing_required_field_is_refused(type_name: str, field: str) -> None:
    data = _data(type_name)
    del data[field]
    with pytest.raises(InvalidData, match=f"{type_name}: missing field '{field}'"):
        from_data(type_name, data)


@pytest.mark.parametrize("type_name", CATALOGUED)
@pytest.mark.parametrize("extra", ["bogus", "type", "Turn_id"])
def test_unknown_field_is_refused(type_name: str, extra: str) -> None:
    data = {**_data(type_name), extra: 1}
    with pytest.raises(InvalidData, match=f"{type_name}: unknown field '{extra}'"):
        from_data(type_name, data)


# A small oracle for "does this JSON value fit this annotation", written independently of the
# implementation's _fits, to drive the wrong-type matrix below.
PROBES: list[Any] = [12345, -1, "text", "", True, False, 1.5, None, [], [1], {}, {"k": "v"}]


def _accepts(hint: Any, value: Any) -> bool:
    origin = get_origin(hint)
    if hint is Any:
        return True
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in get_args(hint))
    if origin in (types.UnionType, typing.Union):
        return any(_accepts(h, value) for h in get_args(hint))
    simple = {str: str, int: int, bool: bool, type(None): type(None), dict: dict, list: list}
    return type(value) is simple[origin or hint]


@pytest.mark.parametrize(("type_name", "field"), FIELD_CASES)
def test_every_field_accepts_exactly_its_types(type_name: str, field: str) -> None:
    hint = typing.get_type_hints(CATALOGUE[type_name])[field]
    for probe in PROBES:
        data = {**_data(type_name), field: probe}
        if _accepts(hint, probe):
            assert getattr(from_data(type_name, data), field) == probe
        else:
            with pytest.raises(InvalidData, match=f"{type_name}: field '{field}' must be "):
                from_data(type_name, data)


@pytest.mark.parametrize(
    ("type_name", "field", "value", "allowed"),
    [
        ("tool_call.proposed", "side_effect", "dangerous", SIDE_EFFECTS),
        ("tool_call.proposed", "side_effect", "READ_ONLY", SIDE_EFFECTS),
        ("turn.ended", "outcome", "exploded", TURN_OUTCOMES),
        ("turn.ended", "outcome", "running", TURN_OUTCOMES),
        ("tool_call.resolved", "decision", "maybe", ("done", "retry", "abort")),
        ("memory.written", "scope", "world", ("thread", "principal", "project")),
    ],
)
def test_bad_literal_values_are_refused(
    type_name: str, field: str, value: str, allowed: tuple[str, ...]
) -> None:
    data = {**_data(type_name), field: value}
    message = f"{type_name}: field '{field}' must be one of " + ", ".join(repr(a) for a in allowed)
    with pytest.raises(InvalidData, match=message):
        from_data(type_name, data)
    for ok in allowed:
        assert getattr(from_data(type_name, {**data, field: ok}), field) == ok


def test_literal_sets_are_the_documented_ones() -> None:
    assert SIDE_EFFECTS == ("read_only", "idempotent", "non_idempotent")
    assert TURN_OUTCOMES == ("completed", "aborted", "failed", "interrupted")


@pytest.mark.parametrize(
    ("type_name", "field"),
    [
        ("turn.started", "input"),  # str
        ("input.queued", "text"),
        ("step.started", "context"),  # Any
        ("tool_call.finished", "result"),
        ("tool_call.finished", "error"),  # str | None
        ("provider.interrupted", "partial"),
        ("thread.created", "config"),  # dict
        ("thread.resumed", "repairs"),  # list
        ("plan.versioned", "plan"),
        ("compaction", "summary"),
    ],
)
def test_artifact_refs_are_accepted_for_text_and_free_form_fields(
    type_name: str, field: str
) -> None:
    event = from_data(type_name, {**_data(type_name), field: REF})
    assert getattr(event, field) == REF
    minimal = {"$artifact": {"sha256": "f" * 64, "size": 0}}
    assert getattr(from_data(type_name, {**_data(type_name), field: minimal}), field) == minimal


@pytest.mark.parametrize(
    ("type_name", "field"),
    [
        ("tool_call.started", "attempt"),  # int
        ("tool_call.finished", "ok"),  # bool
        ("tool_call.proposed", "side_effect"),  # Literal
        ("turn.ended", "outcome"),
        ("plan.versioned", "version"),
        ("artifact.stored", "size"),
    ],
)
def test_artifact_refs_are_refused_for_numbers_flags_and_choices(
    type_name: str, field: str
) -> None:
    with pytest.raises(InvalidData, match=f"field '{field}'"):
        from_data(type_name, {**_data(type_name), field: REF})


@pytest.mark.parametrize(
    "bad_ref",
    [
        {"$artifact": {"sha256": "f" * 63, "size": 1}},
        {"$artifact": {"sha256": "F" * 64, "size": 1}},
        {"$artifact": {"sha256": "g" * 64, "size": 1}},
        {"$artifact": {"sha256": "f" * 64, "size": "1"}},
        {"$artifact": {"sha256": "f" * 64, "size": True}},
        {"$artifact": {"sha256": "f" * 64}},
        {"$artifact": {"size": 1}},
        {"$artifact": "f" * 64},
        {"$artifact": {"sha256": "f" * 64, "size": 1}, "extra": 1},
        {"$artefact": {"sha256": "f" * 64, "size": 1}},
    ],
)
def test_malformed_artifact_refs_are_not_text(bad_ref: dict[str, Any]) -> None:
    with pytest.raises(InvalidData, match="field 'input' must be str"):
        from_data("turn.started", {"turn_id": "t", "input": bad_ref})


def test_from_data_does_not_mutate_its_input() -> None:
    data = _data("tool_call.proposed")
    snapshot = dict(data)
    from_data("tool_call.proposed", data)
    assert data == snapshot


def test_events_are_frozen() -> None:
    event = SAMPLES["turn.started"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.turn_id = "other"


def _outcome(judge: Callable[[str, Any], object], type_name: str, data: Any) -> str:
    """What ``judge(type_name, data)`` does: "ok", or the error it raises, with its message."""
    try:
        judge(type_name, data)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


class _Dict(dict[str, Any]):
    """A dict subclass: judged by the field-order walk, not the one-pass fast path."""


@pytest.mark.parametrize(("type_name", "field"), FIELD_CASES)
def test_check_data_judges_exactly_as_from_data(type_name: str, field: str) -> None:
    # check_data is from_data without building the event: the same verdict on the same
    # data, and both paths of the check (a plain dict, and a subclass of dict) agree.
    for probe in PROBES:
        data = {**_data(type_name), field: probe}
        verdict = _outcome(from_data, type_name, data)
        assert _outcome(check_data, type_name, data) == verdict
        assert _outcome(check_data, type_name, _Dict(data)) == verdict
        assert _outcome(from_data, type_name, _Dict(data)) == verdict
    data = _data(type_name)
    del data[field]
    verdict = _outcome(from_data, type_name, data)
    assert _outcome(check_data, type_name, data) == verdict
    assert _outcome(check_data, type_name, _Dict(data)) == verdict


def test_check_data_refuses_what_from_data_refuses() -> None:
    for type_name, data in [("turn.begun", {}), ("turn.started", []), ("turn.started", None)]:
        verdict = _outcome(from_data, type_name, data)
        assert verdict != "ok"
        assert _outcome(check_data, type_name, data) == verdict
    assert _outcome(check_data, "custom.x", object()) == "ok"


def test_the_first_fault_in_field_order_is_named_whatever_the_key_order() -> None:
    # tool_call.proposed's fields: turn_id, call_id, tool, args, side_effect, ...
    data = {"side_effect": "dangerous", "args": {}, "tool": 7, "call_id": "c", "turn_id": "t"}
    with pytest.raises(InvalidData, match="field 'tool' must be str"):
        from_data("tool_call.proposed", data)
    del data["turn_id"]  # missing comes before ill-typed when it is earlier in field order
    with pytest.raises(InvalidData, match="missing field 'turn_id'"):
        check_data("tool_call.proposed", data)
    with pytest.raises(InvalidData, match="unknown field 'x'"):  # unknown before all else
        from_data("tool_call.proposed", {"tool": 7, "x": 1})


class _Unjudgeable:
    """A value whose comparison raises (what a Literal field's check runs into)."""

    def __eq__(self, other: object) -> bool:
        raise ValueError("cannot compare")

    __hash__ = None  # type: ignore[assignment]


def test_a_value_a_check_cannot_judge_does_not_hide_an_earlier_fault() -> None:
    # The one-pass check meets side_effect (later in field order) first in key order: the
    # fault in ``tool`` must still be the one reported, as the field-order walk reports it.
    data = {"side_effect": _Unjudgeable(), "args": {}, "tool": 7, "call_id": "c", "turn_id": "t"}
    for judge in (from_data, check_data):
        with pytest.raises(InvalidData, match="field 'tool' must be str"):
            judge("tool_call.proposed", data)


@pytest.mark.parametrize("type_name", CATALOGUED)
def test_building_a_checked_event_cannot_fail(type_name: str) -> None:
    # check_data stands in for from_data where the event is not needed (the append's schema
    # check): that holds only while construction adds no check of its own.
    cls = CATALOGUE[type_name]
    assert not any("__post_init__" in vars(base) for base in cls.__mro__), type_name
