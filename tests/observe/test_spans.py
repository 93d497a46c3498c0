"""The span builder on its own: recovery, unknown outcomes and human decisions as span events,
deterministic ids, and live spans across a session that ends and another that carries on."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from threadlog.model.events import (
    ModelResponded,
    ProviderStarted,
    StepStarted,
    ThreadResumed,
    ToolCallApproved,
    ToolCallProposed,
    ToolCallResolved,
    ToolCallStarted,
    ToolCallUnknown,
    TurnEnded,
    TurnStarted,
)
from threadlog.observe.spans import spans_of, trace_id
from threadlog.store.open import open_store


def _crashed_log() -> list[Any]:
    """A payment cut off by a crash, recovered, and settled by a person."""
    with open_store("memory://") as store:
        thread = store.create_thread("alice")
        for event in (
            TurnStarted(turn_id="t1", input="pay"),
            StepStarted(turn_id="t1", step_id="t1.1"),
            ProviderStarted(turn_id="t1", step_id="t1.1", provider="scripted", model="m"),
            ModelResponded(
                turn_id="t1",
                step_id="t1.1",
                message={"role": "assistant", "content": "paying", "tool_calls": []},
                usage={"input_tokens": 5, "output_tokens": 2, "cost": 0.5},
                stop_reason="tool_use",
            ),
            ToolCallProposed(
                turn_id="t1",
                step_id="t1.1",
                call_id="c1",
                tool="pay",
                args={"amount": 3},
                side_effect="non_idempotent",
            ),
            ToolCallApproved(call_id="c1", by="bob"),
            ToolCallStarted(call_id="c1"),
            ThreadResumed(repairs=[{"kind": "tool_unknown", "call_id": "c1"}]),
            ToolCallUnknown(call_id="c1", reason="the process stopped"),
            TurnEnded(turn_id="t1", outcome="interrupted", reason="crash"),
            ToolCallResolved(call_id="c1", decision="done", by="carol", note="paid in the bank"),
        ):
            store.append(thread, event)
        return list(store.read(thread))


def test_recovery_unknown_outcomes_and_decisions_are_span_events() -> None:
    records = _crashed_log()
    spans = {s.name: s for s in spans_of(records)}
    assert set(spans) == {
        "invoke_agent threadlog",
        "chat m",
        "execute_tool pay",
        "resolve_tool pay",
    }
    turn, chat = spans["invoke_agent threadlog"], spans["chat m"]
    call, resolve = spans["execute_tool pay"], spans["resolve_tool pay"]
    assert turn.trace_id == trace_id(records[0].thread, "t1")
    assert {s.trace_id for s in spans.values()} == {turn.trace_id}
    assert turn.attributes["threadlog.turn.outcome"] == "interrupted"
    (resumed,) = [e for e in turn.events if e.name == "threadlog.thread.resumed"]
    assert resumed.attributes["threadlog.repairs"] == 1
    assert resumed.attributes["threadlog.repair_kinds"] == ["tool_unknown"]
    assert chat.attributes["threadlog.usage.cost"] == 0.5
    assert call.status == "error" and "unknown" in (call.status_message or "")
    assert [e.name for e in call.events] == [
        "threadlog.tool_call.approved",
        "threadlog.tool_call.started",
        "threadlog.tool_call.unknown",
    ]
    assert call.events[0].attributes["threadlog.by"] == "bob"
    assert resolve.parent_span_id == call.span_id
    (decided,) = resolve.events
    assert decided.name == "threadlog.tool_call.resolved"
    assert decided.attributes == {
        "threadlog.decision": "done",
        "threadlog.by": "carol",
        "threadlog.note": "paid in the bank",
    }


def test_spans_are_a_function_of_the_records() -> None:
    records = _crashed_log()
    assert spans_of(records) == spans_of(records)
    # an unfinished log: what is open is exported as open, and only on request
    cut = records[:7]
    assert [s.name for s in spans_of(cut, include_open=False)] == ["chat m"]
    opened = [s for s in spans_of(cut) if s.attributes.get("threadlog.open")]
    assert sorted(s.name for s in opened) == ["execute_tool pay", "invoke_agent threadlog"]


def test_live_spans_survive_a_session_that_ends_parked(tmp_path: Path) -> None:
    """A turn parked on an approval when its session closes ends in a later session: the
    tracer seeds itself from the log, and the spans are the exported ones."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from threadlog.observe import live
    from threadlog.observe.sdk import SdkSpanSink
    from threadlog.runtime.models import Reply, ScriptedModel, ToolCallSpec
    from threadlog.runtime.runtime import Runtime

    script = [
        Reply("writing", [ToolCallSpec("write_file", {"path": "a.txt", "content": "x"})]),
        Reply("done"),
    ]

    async def first() -> str:
        async with Runtime(tmp_path / "home", model=ScriptedModel(script)) as runtime:
            session = await runtime.create("alice", cwd=str(tmp_path))
            await session.submit("write a.txt")
            await session.wait_idle(10)  # parked: the write waits for a person
            return session.thread_id

    thread = asyncio.run(first())
    memory = InMemorySpanExporter()
    live.install(live.LiveTracer(SdkSpanSink(SimpleSpanProcessor(memory))))
    try:

        async def second() -> None:
            async with Runtime(tmp_path / "home", model=ScriptedModel(script[1:])) as runtime:
                session = await runtime.open(thread)
                (call,) = [c for c in session.state.tool_calls.values()]
                await session.approve(call.call_id, by="alice")
                await session.wait_idle(10)

        asyncio.run(second())
    finally:
        live.uninstall()
    live_names = sorted(s.name for s in memory.get_finished_spans())
    with open_store(str(tmp_path / "home")) as store:
        exported = spans_of(store.read(thread))
    # the first step ended in the first session (no tracer then); the rest are live
    assert live_names == sorted(
        ["execute_tool write_file", "chat scripted", "invoke_agent threadlog"]
    )
    by_id = {s.span_id: s for s in exported}
    for span in memory.get_finished_spans():
        ctx = span.get_span_context()
        mine = by_id[f"{ctx.span_id:016x}"]
        assert (mine.name, mine.start_ns, mine.end_ns) == (
            span.name,
            span.start_time,
            span.end_time,
        )
        assert f"{ctx.trace_id:032x}" == mine.trace_id
