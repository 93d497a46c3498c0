"""A step's context by reference: deltas round-trip exactly, rebuilds are checked by hash."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from threadlog.model import ContextMismatch, StepContexts, step_context
from threadlog.model.context import Context
from threadlog.model.envelope import Record
from threadlog.model.stepcontext import apply_delta, context_delta, context_hash

TOOLS = [{"name": "noop", "description": "does nothing", "parameters": {"type": "object"}}]


def snap(messages: list[dict[str, Any]], **other: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "instructions": None,
        "thinking": None,
        "max_tokens": 4096,
        "tools": TOOLS,
        "messages": messages,
        **other,
    }


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def said(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text, "tool_calls": []}


def record(ord_: int, id_: str, type_: str, data: dict[str, Any]) -> Record:
    return Record(
        v=1,
        thread="t",
        ord=ord_,
        id=id_,
        parent=None,
        ts="2026-01-01T00:00:00Z",
        type=type_,
        data=data,
        prev=None,
        hash="h",
    )


def steps_of(contexts: list[dict[str, Any]]) -> list[Record]:
    """The ``step.started`` records the runtime writes for these contexts, in order."""
    out: list[Record] = []
    base: tuple[str, dict[str, Any]] | None = None
    for n, context in enumerate(contexts):
        data: dict[str, Any] = {
            "turn_id": "turn",
            "step_id": f"s{n}",
            "context_hash": context_hash(context),
        }
        if base is None:
            data["context"] = context
        else:
            data["base"] = base[0]
            data["delta"] = context_delta(base[1], context)
        out.append(record(n + 1, f"r{n}", "step.started", data))
        base = (f"r{n}", context)
    return out


CASES = [
    # grows by what the step added
    (snap([user("a")]), snap([user("a"), said("b"), user("c")])),
    # a compaction: a summary first, then the kept messages
    (
        snap([user("a"), said("b"), user("c"), said("d")]),
        snap([{"role": "system", "content": "summary"}, user("c"), said("d"), user("e")]),
    ),
    # a plan message changed in front, tools and instructions changed, a key gone
    (
        snap([{"role": "system", "content": "plan 1"}, user("a"), said("b")], extra=1),
        snap([{"role": "system", "content": "plan 2"}, user("a"), said("b"), user("c")])
        | {"tools": [], "instructions": "be brief"},
    ),
    # a branch back to an earlier entry, then a new message; equal but distinct objects
    (snap([user("a"), said("b"), user("c")]), snap([user("a"), said("b2")])),
    # 1 and True are different JSON: never matched as the same message
    (snap([{"role": "user", "content": 1}]), snap([{"role": "user", "content": True}])),
    (snap([]), snap([user("x")])),
]


@pytest.mark.parametrize(("base", "new"), CASES)
def test_a_delta_rebuilds_the_exact_context(base: dict[str, Any], new: dict[str, Any]) -> None:
    delta = context_delta(base, new)
    rebuilt = apply_delta(base, delta)
    assert rebuilt == new and context_hash(rebuilt) == context_hash(new)


def test_the_usual_step_records_only_what_it_added() -> None:
    history = [user("go")]
    for i in range(50):
        history += [said(f"step {i}"), {"role": "tool", "tool_call_id": str(i), "content": "ok"}]
    base = snap(history)
    new = snap([*history, said("more"), user("steer")])
    delta = context_delta(base, new)
    assert delta == {"messages": [[0, len(history)], said("more"), user("steer")]}


def test_every_step_rebuilds_from_the_records_and_old_whole_contexts_still_read() -> None:
    contexts = [snap([user("a")])]
    for n in range(1, 6):
        contexts.append(snap([*contexts[-1]["messages"], said(f"r{n}"), user(f"u{n}")]))
    records = steps_of(contexts)
    # an old log: every step with its whole context (no base, no delta)
    old = [
        r._replace(data={**r.data, "context": c, "base": None, "delta": None})
        for r, c in zip(records, contexts, strict=True)
    ]
    for log in (records, old):
        for n, context in enumerate(contexts):
            assert step_context(log, f"s{n}") == context
        folded = StepContexts()
        assert [folded.apply(r) for r in log] == contexts
    assert all("delta" in r.data for r in records[1:])


def test_a_tampered_added_message_fails_the_hash_check() -> None:
    contexts = [snap([user("a")]), snap([user("a"), said("b")]), snap([user("a"), said("b")])]
    records = steps_of(contexts)
    tampered = dict(records[1].data)
    tampered["delta"] = {"messages": [[0, 1], said("not what the model saw")]}
    log = [records[0], records[1]._replace(data=tampered), records[2]]
    with pytest.raises(ContextMismatch, match="step s1: the context rebuilt"):
        step_context(log, "s1")
    with pytest.raises(ContextMismatch, match="step s2"):  # built on the tampered one
        step_context(log, "s2")
    folded = StepContexts()
    folded.apply(log[0])
    with pytest.raises(ContextMismatch, match="step s1"):
        folded.apply(log[1])
    assert step_context(log, "s0") == contexts[0]  # an earlier step is unaffected


def test_a_base_the_log_does_not_hold_or_a_bad_slice_is_a_clear_error() -> None:
    records = steps_of([snap([user("a")]), snap([user("a"), said("b")])])
    with pytest.raises(ContextMismatch, match="relative to record 'r0'"):
        step_context(records[1:], "s1")
    bad = records[1]._replace(data={**records[1].data, "delta": {"messages": [[0, 9]]}})
    with pytest.raises(ContextMismatch, match="neither a message nor a slice"):
        step_context([records[0], bad], "s1")
    with pytest.raises(KeyError):
        step_context(records, "nope")


def test_a_step_without_a_context_is_unknown_not_an_error() -> None:
    imported = record(1, "r0", "step.started", {"turn_id": "t", "step_id": "s"})
    assert step_context([imported], "s") is None


def test_the_model_context_keeps_the_last_step_as_the_next_ones_base() -> None:
    contexts = [snap([user("a")]), snap([user("a"), said("b")])]
    records = steps_of(contexts)
    context = Context.from_records(records)
    assert context.step == ("r1", contexts[1])
    # a delta whose base it does not hold leaves no base (the next step records its whole)
    context = Context.from_records(records[1:])
    assert context.step is None


MESSAGES = st.sampled_from(
    [user("a"), user("b"), said("a"), said("c"), {"role": "user", "content": 1}]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(MESSAGES, max_size=8), st.lists(MESSAGES, max_size=8), st.booleans())
def test_any_delta_round_trips(old: list[Any], new: list[Any], tools_change: bool) -> None:
    base, context = snap(old), snap(new)
    if tools_change:
        context["tools"] = []
        del context["thinking"]
    assert apply_delta(base, context_delta(base, context)) == context
    assert context_hash(apply_delta(base, context_delta(base, context))) == context_hash(context)


def test_a_damaged_step_does_not_hide_a_later_whole_one() -> None:
    contexts = [snap([user("a")]), snap([user("a"), said("b")])]
    records = steps_of(contexts)[1:]  # s1's base is gone
    whole = snap([user("again")])
    later = record(
        9,
        "r9",
        "step.started",
        {"turn_id": "turn", "step_id": "s9", "context": whole, "context_hash": context_hash(whole)},
    )
    assert step_context([*records, later], "s9") == whole
    folded = StepContexts()
    with pytest.raises(ContextMismatch):
        folded.apply(records[0])
    assert folded.apply(later) == whole and folded.last == ("r9", whole)
