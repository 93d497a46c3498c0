"""A crash, seen through the observability layer: the resumed thread's recovery, the payment
of unknown outcome and the person who settled it are span events (live, as exported), and
the metrics count the recovery, its repairs and the call's outcome."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from threadlog import _hooks
from threadlog.observe import live
from threadlog.observe import metrics as m
from threadlog.observe.sdk import SdkSpanSink
from threadlog.observe.spans import spans_of
from threadlog.runtime.models import Reply, ScriptedModel, ToolCallSpec
from threadlog.runtime.runtime import Runtime
from threadlog.runtime.tools import Tool, ToolContext
from threadlog.store.open import open_store


async def _pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
    return {"paid": 3}


PAY = Tool("pay", "Pay.", {"type": "object"}, "non_idempotent", _pay)


def _crashed(tmp_path: Path) -> tuple[str, str]:
    """A thread whose process died right after the payment's start intent was durable."""
    home = str(tmp_path / "home")

    async def main() -> str:
        model = ScriptedModel([Reply("paying", [ToolCallSpec("pay", {"amount": 3})]), Reply("ok")])
        async with Runtime(home, model=model, tools=[PAY]) as runtime:
            session = await runtime.create("u", approval_policy={"non_idempotent": "auto"})
            await session.submit("pay 3")
            await session.wait_idle(10)
            return session.thread_id

    thread = asyncio.run(main())
    with open_store(home) as store:
        cut = next(r.ord for r in store.read(thread) if r.type == "tool_call.started")
    crashed = str(tmp_path / "crashed")
    shutil.copytree(home, crashed, ignore=shutil.ignore_patterns("index.sqlite3*"))
    path = next(Path(crashed, "threads").glob(f"*/*/{thread}.jsonl"))
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:cut]))
    return crashed, thread


def test_a_recovery_is_traced_and_counted(tmp_path: Path) -> None:
    home, thread = _crashed(tmp_path)
    memory = InMemorySpanExporter()
    before = _hooks.METRICS
    metrics = m.install()
    live.install(live.LiveTracer(SdkSpanSink(SimpleSpanProcessor(memory))))
    try:

        async def main() -> None:
            async with Runtime(home, model=ScriptedModel([Reply("all done")]), tools=[PAY]) as rt:
                session = await rt.resume(thread)
                await session.wait_idle(10)
                (call,) = [c for c in session.state.tool_calls.values()]
                assert call.status == "unknown"
                await session.resolve(call.call_id, "done", by="carol", note="the bank has it")
                await session.wait_idle(10)

        asyncio.run(main())
    finally:
        live.uninstall()
        _hooks.METRICS = before
    assert metrics.value("threadlog_recoveries_total") == 1
    assert metrics.value("threadlog_repairs_total", kind="outcome_unknown") == 1
    assert metrics.value("threadlog_tool_calls_total", outcome="unknown") == 1
    finished = {s.name: s for s in memory.get_finished_spans()}
    turn = next(
        s
        for s in memory.get_finished_spans()
        if s.name == "invoke_agent threadlog"
        and s.attributes["threadlog.turn.outcome"] == "interrupted"
    )
    assert "threadlog.thread.resumed" in [e.name for e in turn.events]
    pay = finished["execute_tool pay"]
    assert not pay.status.is_ok and "threadlog.tool_call.unknown" in [e.name for e in pay.events]
    resolved = finished["resolve_tool pay"]
    assert resolved.parent is not None and resolved.parent.span_id == pay.context.span_id
    assert resolved.events[0].attributes["threadlog.by"] == "carol"
    with open_store(home) as store:
        exported = {s.span_id: s for s in spans_of(store.read(thread))}
    for span in memory.get_finished_spans():
        mine = exported[f"{span.context.span_id:016x}"]
        assert (mine.name, mine.start_ns, mine.end_ns) == (
            span.name,
            span.start_time,
            span.end_time,
        )
        assert [e.name for e in mine.events] == [e.name for e in span.events]
