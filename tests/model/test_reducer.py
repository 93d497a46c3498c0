from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from tests.model.records import THREAD, Chain, created, make_record
from threadlog.errors import InvalidData, InvalidEventType, InvalidTransition, UsageError
from threadlog.model.eventdata import from_data
from threadlog.model.events import (
    ConfigChanged,
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
    ThreadCreated,
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
from threadlog.model.reducer import apply, apply_all, replay
from threadlog.model.state import (
    InputState,
    StepState,
    ThreadState,
    ToolCallState,
    TurnState,
)

if TYPE_CHECKING:
    from threadlog.model.envelope import Record

T1 = "turn-1"


def propose(call_id: str = "c1", turn_id: str = T1) -> ToolCallProposed:
    return ToolCallProposed(
        turn_id=turn_id, call_id=call_id, tool="ls", args={"path": "."}, side_effect="idempotent"
    )


def approve(call_id: str = "c1") -> ToolCallApproved:
    return ToolCallApproved(call_id=call_id, by="policy")


def start(call_id: str = "c1", attempt: int = 1) -> ToolCallStarted:
    return ToolCallStarted(call_id=call_id, attempt=attempt)


def finish(call_id: str = "c1") -> ToolCallFinished:
    return ToolCallFinished(call_id=call_id, ok=True, result="out")


def unknown(call_id: str = "c1") -> ToolCallUnknown:
    return ToolCallUnknown(call_id=call_id, reason="crash")


def resolve(decision: Any, call_id: str = "c1") -> ToolCallResolved:
    return ToolCallResolved(call_id=call_id, decision=decision, by="bob")


def end(turn_id: str = T1, outcome: Any = "completed") -> TurnEnded:
    return TurnEnded(turn_id=turn_id, outcome=outcome)


@pytest.fixture
def chain() -> Chain:
    c = Chain()
    c.add(created(model="m"))
    return c


@pytest.fixture
def running(chain: Chain) -> Chain:
    chain.add(TurnStarted(turn_id=T1, input="hi"))
    return chain


def assert_refused(
    state: ThreadState, record: Record, match: str, *, error: type[Exception] = InvalidTransition
) -> None:
    """The record is refused, the error names its ord, and the state did not change at all."""
    before = copy.deepcopy(state)
    with pytest.raises(error, match=match) as info:
        apply(state, record)
    if error is InvalidTransition:
        assert isinstance(info.value, InvalidTransition)
        assert info.value.ord == record.ord
        assert str(info.value).startswith(f"ord {record.ord}: ")
    assert state == before


def refuse_next(chain: Chain, event: Event | tuple[str, Any], match: str) -> None:
    assert_refused(chain.state(), chain.next(event), match)


# -- the happy path --------------------------------------------------------------------------


def test_a_full_turn(chain: Chain) -> None:
    r = chain.records
    chain.add(
        TurnStarted(turn_id=T1, input="list files"),
        InputQueued(input_id="in-1", text="hidden ones too"),
        InputConsumed(input_id="in-1", turn_id=T1),
        StepStarted(turn_id=T1, step_id="s1", context={"messages": []}, context_hash="ctx"),
        ProviderStarted(turn_id=T1, step_id="s1", provider="scripted", model="m"),
        ModelResponded(
            turn_id=T1, step_id="s1", message={"role": "assistant"}, stop_reason="tool_use"
        ),
        ToolCallProposed(
            turn_id=T1,
            call_id="c1",
            tool="ls",
            args={"path": "."},
            side_effect="read_only",
            step_id="s1",
        ),
        ToolCallApproved(call_id="c1", by="policy"),
        ToolCallStarted(call_id="c1", attempt=1, idempotency_key="k1"),
        ToolCallFinished(call_id="c1", ok=True, result={"files": ["a"]}),
        PlanVersioned(version=1, plan=["list", "report"]),
        TurnEnded(turn_id=T1, outcome="completed", reason="done"),
    )
    assert len(r) == 13
    state = chain.state()
    assert state == ThreadState(
        thread_id=THREAD,
        principal="alice",
        created_at=r[0].ts,
        format=1,
        config={"model": "m"},
        last_ord=13,
        last_hash=r[12].hash,
        last_id=r[12].id,
        turns={
            T1: TurnState(
                turn_id=T1,
                input="list files",
                status="completed",
                started_ord=2,
                ended_ord=13,
                reason="done",
                steps=["s1"],
                tool_calls=["c1"],
                inputs=["in-1"],
            )
        },
        active_turn=None,
        steps={
            "s1": StepState(
                step_id="s1",
                turn_id=T1,
                status="responded",
                started_ord=5,
                context_hash="ctx",
                stop_reason="tool_use",
                tool_calls=["c1"],
            )
        },
        tool_calls={
            "c1": ToolCallState(
                call_id="c1",
                turn_id=T1,
                tool="ls",
                args={"path": "."},
                side_effect="read_only",
                status="finished",
                proposed_ord=8,
                last_ord=11,
                idempotency_key="k1",
                attempt=1,
                ok=True,
                result={"files": ["a"]},
                error=None,
                decided_by="policy",
            )
        },
        inputs={
            "in-1": InputState(
                input_id="in-1",
                text="hidden ones too",
                queued_ord=3,
                consumed_by=T1,
                consumed_ord=4,
            )
        },
        plan_version=1,
        plan=["list", "report"],
        leaf=r[10].id,  # tool_call.finished: the last conversation entry
    )
    assert state.pending_inputs == []
    assert state.open_tool_calls == []


def test_thread_created_sets_up_the_state() -> None:
    event = ThreadCreated(
        format=1, principal="p", config={"a": 1}, lineage={"thread": "t0", "ord": 3}, title="x"
    )
    record = make_record(event)
    state = apply(None, record)
    assert (state.thread_id, state.principal, state.created_at) == (THREAD, "p", record.ts)
    assert (state.lineage, state.title, state.config) == ({"thread": "t0", "ord": 3}, "x", {"a": 1})
    assert (state.last_ord, state.last_hash, state.last_id, state.leaf) == (
        1,
        record.hash,
        record.id,
        record.id,
    )
    assert state.config is not record.data["config"]


def test_apply_uses_the_given_event_instead_of_decoding(running: Chain) -> None:
    record = running.next(InputQueued(input_id="in-1", text="x"))
    state = apply(running.state(), record, InputQueued(input_id="in-1", text="x"))
    assert state.inputs["in-1"].text == "x"


def test_apply_returns_the_same_state_object(running: Chain) -> None:
    state = running.state()
    assert apply(state, running.next(InputQueued(input_id="i", text="x"))) is state


def test_apply_all_continues_a_replay(running: Chain) -> None:
    running.add(InputQueued(input_id="i", text="x"), end())
    assert apply_all(replay(running.records[:2]), running.records[2:]) == replay(running.records)


def test_replay_of_an_empty_log_is_refused() -> None:
    with pytest.raises(InvalidTransition, match="empty log"):
        replay([])


def test_pending_inputs_and_open_tool_calls(running: Chain) -> None:
    running.add(
        InputQueued(input_id="a", text="1"),
        InputQueued(input_id="b", text="2"),
        InputConsumed(input_id="a", turn_id=T1),
        propose("c1"),
        propose("c2"),
        ToolCallDenied(call_id="c1", by="bob"),
    )
    state = running.state()
    assert [i.input_id for i in state.pending_inputs] == ["b"]
    assert [c.call_id for c in state.open_tool_calls] == ["c2"]
    assert state.tool_calls["c1"].status == "denied"
    assert state.tool_calls["c1"].decided_by == "bob"


def test_config_changed_sets_and_removes_keys(chain: Chain) -> None:
    chain.add(
        ConfigChanged(changes={"model": "m2", "cwd": "/tmp"}),
        ConfigChanged(changes={"cwd": None, "gone": None}),
    )
    assert chain.state().config == {"model": "m2"}


def test_turn_outcomes_are_recorded(running: Chain) -> None:
    running.add(end(outcome="interrupted"), TurnStarted(turn_id="turn-2", input="again"))
    state = running.state()
    assert state.turns[T1].status == "interrupted"
    assert state.active_turn == "turn-2"


def test_provider_interrupted_marks_the_step(running: Chain) -> None:
    running.add(
        StepStarted(turn_id=T1, step_id="s1"),
        ProviderInterrupted(turn_id=T1, step_id="s1", reason="reset"),
    )
    assert running.state().steps["s1"].status == "interrupted"
    assert running.state().leaf == running.records[-1].id


def test_memories_operations_labels_compactions_and_resumes(chain: Chain) -> None:
    chain.add(
        MemoryWritten(memory_id="m1", fact="f", source_event="e", scope="thread", written_at="w"),
        MemoryRevoked(memory_id="m1"),
        OperationStarted(op_id="o1", kind="push"),
        OperationFinished(op_id="o1", ok=False),
        LabelSet(entry="e1", label="a"),
        LabelSet(entry="e2", label="b"),
        LabelSet(entry="e1", label=None),
        ThreadResumed(),
        ThreadResumed(repairs=["x"]),
        (
            "compaction",
            {
                "summary": "s",
                "first_entry": None,
                "last_entry": "e9",
                "tokens_before": 9,
                "tokens_after": 1,
            },
        ),
        ("custom.note", {"anything": 1}),
        ("artifact.stored", {"sha256": "a" * 64, "size": 1}),
    )
    state = chain.state()
    assert state.memories["m1"].revoked
    assert state.operations["o1"].ok is False
    assert state.labels == {"e2": "b"}
    assert state.resumes == 2
    assert state.compactions == [
        {
            "ord": 11,
            "id": chain.records[10].id,
            "first_entry": None,
            "last_entry": "e9",
            "tokens_before": 9,
            "tokens_after": 1,
        }
    ]
    assert state.leaf == chain.records[10].id  # the compaction is an entry; the rest are not


# -- tool calls: resolution and retries -------------------------------------------------------


@pytest.mark.parametrize(
    ("decision", "status"), [("done", "done"), ("retry", "approved"), ("abort", "aborted")]
)
def test_resolution_moves_an_unknown_call_per_the_table(
    running: Chain, decision: str, status: str
) -> None:
    running.add(propose(), approve(), start(), unknown(), resolve(decision))
    call = running.state().tool_calls["c1"]
    assert call.status == status
    assert call.decided_by == "bob"
    assert call.last_ord == running.records[-1].ord


def test_retry_then_restart_needs_a_higher_attempt(running: Chain) -> None:
    running.add(propose(), approve(), start(), unknown(), resolve("retry"))
    refuse_next(running, start(attempt=1), "attempt 1 after attempt 1")
    running.add(start(attempt=2), finish())
    call = running.state().tool_calls["c1"]
    assert (call.status, call.attempt, call.ok) == ("finished", 2, True)


def test_a_running_call_may_be_restarted_with_a_higher_attempt(running: Chain) -> None:
    running.add(
        propose(), approve(), start(), ToolCallStarted(call_id="c1", attempt=3, idempotency_key="k")
    )
    call = running.state().tool_calls["c1"]
    assert (call.status, call.attempt, call.idempotency_key) == ("running", 3, "k")


def test_tool_calls_may_settle_after_their_turn_ended(running: Chain) -> None:
    running.add(
        propose(), approve(), start(), end(outcome="interrupted"), unknown(), resolve("abort")
    )
    assert running.state().tool_calls["c1"].status == "aborted"


# -- leaf ------------------------------------------------------------------------------------


def test_leaf_moved_sets_the_leaf(running: Chain) -> None:
    first = running.records[0].id
    running.add(LeafMoved(to=first))
    state = running.state()
    assert state.leaf == first
    assert state.last_id == running.records[-1].id
    running.add(LeafMoved(to=None))
    assert running.state().leaf is None


def test_bookkeeping_records_do_not_move_the_leaf(running: Chain) -> None:
    turn_record = running.records[-1]
    running.add(
        LabelSet(entry=turn_record.id, label="x"),
        propose(),
        approve(),
        PlanVersioned(version=1, plan=None),
    )
    assert running.state().leaf == turn_record.id


def test_a_conversation_entry_after_leaf_moved_becomes_the_leaf(running: Chain) -> None:
    running.add(LeafMoved(to=running.records[0].id), InputQueued(input_id="i", text="t"))
    assert running.state().leaf == running.records[0].id
    running.add(InputConsumed(input_id="i", turn_id=T1))
    assert running.state().leaf == running.records[-1].id


# -- illegal transitions: refused, named by ord, nothing changes -----------------------------

Setup = Callable[[Chain], object]

ILLEGAL: list[tuple[str, Setup, Event | tuple[str, Any], str]] = [
    (
        "finished before started",
        lambda c: c.add(propose(), approve()),
        finish(),
        "approved: tool_call.finished is not allowed",
    ),
    (
        "finished while proposed",
        lambda c: c.add(propose()),
        finish(),
        "proposed: tool_call.finished",
    ),
    (
        "started before approved",
        lambda c: c.add(propose()),
        start(),
        "proposed: tool_call.started is not allowed",
    ),
    (
        "started after denied",
        lambda c: c.add(propose(), ToolCallDenied(call_id="c1", by="b")),
        start(),
        "denied",
    ),
    ("approval for an unknown call", lambda c: None, approve("nope"), "unknown tool call 'nope'"),
    (
        "denial for an unknown call",
        lambda c: None,
        ToolCallDenied(call_id="nope", by="b"),
        "unknown tool call 'nope'",
    ),
    ("start for an unknown call", lambda c: None, start("nope"), "unknown tool call 'nope'"),
    ("finish for an unknown call", lambda c: None, finish("nope"), "unknown tool call 'nope'"),
    (
        "approved twice",
        lambda c: c.add(propose(), approve()),
        approve(),
        "approved: tool_call.approved",
    ),
    (
        "finished twice",
        lambda c: c.add(propose(), approve(), start(), finish()),
        finish(),
        "finished: tool_call.finished",
    ),
    ("proposed twice", lambda c: c.add(propose()), propose(), "already proposed"),
    (
        "restart with the same attempt",
        lambda c: c.add(propose(), approve(), start()),
        start(attempt=1),
        "attempt 1 after attempt 1",
    ),
    (
        "restart with a lower attempt",
        lambda c: c.add(propose(), approve(), start(attempt=3)),
        start(attempt=2),
        "attempt 2 after attempt 3",
    ),
    (
        "first start with attempt 0",
        lambda c: c.add(propose(), approve()),
        start(attempt=0),
        "attempt 0 after attempt 0",
    ),
    (
        "resolved while running",
        lambda c: c.add(propose(), approve(), start()),
        resolve("done"),
        "running: tool_call.resolved:done",
    ),
    (
        "resolved when finished",
        lambda c: c.add(propose(), approve(), start(), finish()),
        resolve("retry"),
        "finished: tool_call.resolved:retry",
    ),
    (
        "resolved twice",
        lambda c: c.add(propose(), approve(), start(), unknown(), resolve("done")),
        resolve("abort"),
        "done: tool_call.resolved:abort",
    ),
    (
        "unknown before started",
        lambda c: c.add(propose(), approve()),
        unknown(),
        "approved: tool_call.unknown",
    ),
    (
        "second terminal outcome for a turn",
        lambda c: c.add(end()),
        end(outcome="failed"),
        "already ended \\(completed\\)",
    ),
    ("end of an unknown turn", lambda c: None, end("turn-9"), "unknown turn 'turn-9'"),
    (
        "turn.started while another runs",
        lambda c: None,
        TurnStarted(turn_id="turn-2", input="x"),
        "turn 'turn-1' is running",
    ),
    (
        "turn id reused",
        lambda c: c.add(end()),
        TurnStarted(turn_id=T1, input="x"),
        "already exists",
    ),
    (
        "input consumed twice",
        lambda c: c.add(
            InputQueued(input_id="i", text="t"), InputConsumed(input_id="i", turn_id=T1)
        ),
        InputConsumed(input_id="i", turn_id=T1),
        "already consumed by turn 'turn-1'",
    ),
    (
        "input consumed but never queued",
        lambda c: None,
        InputConsumed(input_id="i", turn_id=T1),
        "unknown input 'i'",
    ),
    (
        "input consumed by an ended turn",
        lambda c: c.add(InputQueued(input_id="i", text="t"), end()),
        InputConsumed(input_id="i", turn_id=T1),
        "already ended",
    ),
    (
        "input queued twice",
        lambda c: c.add(InputQueued(input_id="i", text="t")),
        InputQueued(input_id="i", text="u"),
        "already queued",
    ),
    (
        "step for an ended turn",
        lambda c: c.add(end()),
        StepStarted(turn_id=T1, step_id="s1"),
        "step.started: turn 'turn-1' already ended",
    ),
    (
        "step for an unknown turn",
        lambda c: None,
        StepStarted(turn_id="turn-9", step_id="s1"),
        "unknown turn",
    ),
    (
        "step id reused",
        lambda c: c.add(StepStarted(turn_id=T1, step_id="s1")),
        StepStarted(turn_id=T1, step_id="s1"),
        "already exists",
    ),
    (
        "provider started for an unknown step",
        lambda c: None,
        ProviderStarted(turn_id=T1, step_id="s9", provider="p", model="m"),
        "unknown step 's9'",
    ),
    (
        "provider started twice",
        lambda c: c.add(
            StepStarted(turn_id=T1, step_id="s1"),
            ProviderStarted(turn_id=T1, step_id="s1", provider="p", model="m"),
        ),
        ProviderStarted(turn_id=T1, step_id="s1", provider="p", model="m"),
        "is provider_started",
    ),
    (
        "response after response",
        lambda c: c.add(
            StepStarted(turn_id=T1, step_id="s1"),
            ModelResponded(turn_id=T1, step_id="s1", message={}),
        ),
        ModelResponded(turn_id=T1, step_id="s1", message={}),
        "is responded",
    ),
    (
        "interruption after response",
        lambda c: c.add(
            StepStarted(turn_id=T1, step_id="s1"),
            ModelResponded(turn_id=T1, step_id="s1", message={}),
        ),
        ProviderInterrupted(turn_id=T1, step_id="s1", reason="r"),
        "is responded",
    ),
    (
        "proposal for an ended turn",
        lambda c: c.add(end()),
        propose(),
        "tool_call.proposed: turn 'turn-1' already ended",
    ),
    (
        "plan version skipping",
        lambda c: None,
        PlanVersioned(version=2, plan=None),
        "plan version 2 does not follow 0",
    ),
    (
        "plan version repeated",
        lambda c: c.add(PlanVersioned(version=1, plan=None)),
        PlanVersioned(version=1, plan=None),
        "plan version 1 does not follow 1",
    ),
    (
        "plan version going back",
        lambda c: c.add(PlanVersioned(version=1, plan=None)),
        PlanVersioned(version=0, plan=None),
        "does not follow 1",
    ),
    ("thread.created again", lambda c: None, created(), "thread.created may only be ord 1"),
    (
        "memory written twice",
        lambda c: c.add(
            MemoryWritten(memory_id="m", fact="f", source_event="e", scope="thread", written_at="w")
        ),
        MemoryWritten(memory_id="m", fact="g", source_event="e", scope="thread", written_at="w"),
        "already written",
    ),
    (
        "memory revoked twice",
        lambda c: c.add(
            MemoryWritten(
                memory_id="m", fact="f", source_event="e", scope="thread", written_at="w"
            ),
            MemoryRevoked(memory_id="m"),
        ),
        MemoryRevoked(memory_id="m"),
        "not live",
    ),
    ("unknown memory revoked", lambda c: None, MemoryRevoked(memory_id="m"), "not live"),
    (
        "operation started twice",
        lambda c: c.add(OperationStarted(op_id="o", kind="k")),
        OperationStarted(op_id="o", kind="k"),
        "already started",
    ),
    (
        "operation finished twice",
        lambda c: c.add(
            OperationStarted(op_id="o", kind="k"), OperationFinished(op_id="o", ok=True)
        ),
        OperationFinished(op_id="o", ok=True),
        "not open",
    ),
    (
        "unknown operation finished",
        lambda c: None,
        OperationFinished(op_id="o", ok=True),
        "not open",
    ),
]


@pytest.mark.parametrize(
    ("setup", "event", "match"), [case[1:] for case in ILLEGAL], ids=[case[0] for case in ILLEGAL]
)
def test_illegal_event_is_refused_and_changes_nothing(
    running: Chain, setup: Setup, event: Event | tuple[str, Any], match: str
) -> None:
    setup(running)
    refuse_next(running, event, match)


def test_a_refused_event_leaves_the_state_usable(running: Chain) -> None:
    state = running.state()
    with pytest.raises(InvalidTransition):
        apply(state, running.next(finish("nope")))
    running.add(InputQueued(input_id="i", text="t"))
    assert apply(state, running.records[-1]).inputs["i"].text == "t"


def test_thread_created_must_be_at_ord_1() -> None:
    with pytest.raises(
        InvalidTransition, match="^ord 2: the first record must be thread.created"
    ) as info:
        apply(None, make_record(created(), ord=2, prev="a" * 64))
    assert info.value.ord == 2


def test_the_first_record_must_be_thread_created() -> None:
    with pytest.raises(InvalidTransition, match="^ord 1: the first record must be thread.created"):
        apply(None, make_record(TurnStarted(turn_id=T1, input="x")))
    with pytest.raises(InvalidTransition, match="^ord 1:"):
        replay([make_record(("custom.x", {}))])


@pytest.mark.parametrize("ord", [1, 2, 4, 100])
def test_ord_must_follow_by_one(running: Chain, ord: int) -> None:
    record = running.next(InputQueued(input_id="i", text="t"), ord=ord)
    assert_refused(running.state(), record, "expected ord 3 after 2")


def test_invalid_data_is_refused_and_changes_nothing(running: Chain) -> None:
    assert_refused(
        running.state(),
        running.next(("turn.ended", {"turn_id": T1, "outcome": "exploded"})),
        "outcome",
        error=InvalidData,
    )
    assert_refused(
        running.state(),
        running.next(("tool_call.started", {"call_id": "c1", "attempt": "2"})),
        "attempt",
        error=InvalidData,
    )


def test_unknown_types_are_refused(running: Chain) -> None:
    assert_refused(
        running.state(), running.next(("made.up", {})), "unknown event type", error=InvalidEventType
    )


def test_invalid_transition_is_a_usage_error() -> None:
    assert issubclass(InvalidTransition, UsageError)


@pytest.mark.parametrize("event_type", [ModelResponded, ProviderStarted, ProviderInterrupted])
def test_a_step_answers_only_for_its_own_turn(running: Chain, event_type: type[Any]) -> None:
    # BUG: provider.started / provider.interrupted / model.responded check that *their*
    # turn_id is running and that the step exists, but never that the step belongs to that
    # turn, so a step left open by an ended turn can be answered under the next turn.
    running.add(
        StepStarted(turn_id=T1, step_id="s1"),
        end(outcome="interrupted"),
        TurnStarted(turn_id="turn-2", input="x"),
    )
    fields: dict[str, Any] = {"turn_id": "turn-2", "step_id": "s1"}
    if event_type is ModelResponded:
        fields["message"] = {}
    elif event_type is ProviderStarted:
        fields.update(provider="p", model="m")
    else:
        fields["reason"] = "r"
    refuse_next(running, event_type(**fields), "s1")


def test_a_custom_record_reduces_alike_with_and_without_its_event() -> None:
    # apply builds no event for a custom.* record it is given none for: the state must be
    # the one the decoded event gives, including on a branch (settings follow the leaf).
    chain = Chain()
    chain.add(
        created(model="a"),
        ConfigChanged(changes={"model": "b"}),
        ("custom.note", {"n": 1}),
        LeafMoved(to=None),
        ("custom.note", {"n": 2}),
    )
    with_events = None
    for record in chain.records:
        with_events = apply(with_events, record, from_data(record.type, record.data))
    assert replay(chain.records) == with_events
    assert with_events is not None and with_events.last_ord == 5


def test_the_state_knows_what_opened_the_open_session(chain: Chain) -> None:
    """`ThreadState.session_source`: a service takes over only what a service left, without
    reading the log back to the ``session.opened``."""

    def opened(session: str, source: Any) -> SessionOpened:
        return SessionOpened(session_id=session, pid=1, host="h", source=source)

    chain.add(opened("s1", "sdk"))
    assert (chain.state().session, chain.state().session_source) == ("s1", "sdk")
    chain.add(SessionClosed(session_id="s1"))
    assert (chain.state().session, chain.state().session_source) == (None, None)
    chain.add(opened("s2", "api"))
    assert (chain.state().session, chain.state().session_source) == ("s2", "api")
