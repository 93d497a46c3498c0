"""Spans from records: the demo thread's span tree, live (the OTel SDK's in-memory exporter)
and after the fact (``threadlog export --format otlp``) alike."""

from __future__ import annotations

import asyncio
import io
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from rich.console import Console

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from threadlog.cli import cli
from threadlog.cli.demo import _run, _workspace
from threadlog.observe import live
from threadlog.observe.sdk import SdkSpanSink
from threadlog.observe.spans import spans_of
from threadlog.store.open import open_store


@pytest.fixture
def exporter() -> Any:
    memory = InMemorySpanExporter()
    live.install(live.LiveTracer(SdkSpanSink(SimpleSpanProcessor(memory))))
    yield memory
    live.uninstall()


def _demo(home: Path) -> str:
    workspace = _workspace()
    try:
        thread, ok, _ = asyncio.run(
            _run(str(home), True, False, 0.0, Console(file=io.StringIO()), workspace)
        )
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    assert ok
    return thread


def _shape(span: Any) -> tuple[Any, ...]:
    """A live SDK span, comparable with an exported one."""
    ctx = span.get_span_context()
    return (
        f"{ctx.trace_id:032x}",
        f"{ctx.span_id:016x}",
        f"{span.parent.span_id:016x}" if span.parent else None,
        span.name,
        span.start_time,
        span.end_time,
        dict(span.attributes),
        [(e.name, e.timestamp, dict(e.attributes)) for e in span.events],
    )


def _value(v: dict[str, Any]) -> Any:
    ((kind, x),) = v.items()
    if kind == "intValue":
        return int(x)
    if kind == "arrayValue":
        return tuple(_value(i) for i in x["values"])
    return x


def _otlp_shape(span: dict[str, Any]) -> tuple[Any, ...]:
    attrs = {a["key"]: _value(a["value"]) for a in span["attributes"]}
    return (
        span["traceId"],
        span["spanId"],
        span.get("parentSpanId"),
        span["name"],
        int(span["startTimeUnixNano"]),
        int(span["endTimeUnixNano"]),
        attrs,
        [
            (
                e["name"],
                int(e["timeUnixNano"]),
                {a["key"]: _value(a["value"]) for a in e["attributes"]},
            )
            for e in span["events"]
        ],
    )


def _tuples(shape: tuple[Any, ...]) -> tuple[Any, ...]:
    """Lists (SDK attribute sequences) as tuples, so both sides compare."""
    *head, attrs, events = shape
    norm = {k: tuple(v) if isinstance(v, list | tuple) else v for k, v in attrs.items()}
    return (
        *head,
        norm,
        [
            (n, t, {k: tuple(v) if isinstance(v, list | tuple) else v for k, v in a.items()})
            for n, t, a in events
        ],
    )


def test_the_demo_thread_yields_its_span_tree_live_and_exported_alike(
    tmp_path: Path, exporter: Any
) -> None:
    thread = _demo(tmp_path)
    finished = exporter.get_finished_spans()
    by_name = [s.name for s in finished]
    # one turn, four model calls, three tool calls, nested under the turn
    assert sorted(by_name) == sorted(
        ["invoke_agent threadlog"]
        + ["chat scripted"] * 4
        + ["execute_tool read_file"] * 2
        + ["execute_tool append_file"]
    )
    (turn,) = [s for s in finished if s.name == "invoke_agent threadlog"]
    assert turn.parent is None
    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["gen_ai.conversation.id"] == thread
    assert turn.attributes["threadlog.turn.outcome"] == "completed"
    trace = turn.get_span_context().trace_id
    for span in finished:
        assert span.get_span_context().trace_id == trace
        if span is not turn:
            assert span.parent is not None
            assert span.parent.span_id == turn.get_span_context().span_id
            assert span.start_time >= turn.start_time and span.end_time <= turn.end_time
    chats = sorted((s for s in finished if s.name.startswith("chat")), key=lambda s: s.start_time)
    for chat in chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.system"] == "scripted"
        assert chat.attributes["gen_ai.request.model"] == "scripted"
        assert chat.attributes["gen_ai.usage.input_tokens"] >= 0
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
    assert [list(c.attributes["gen_ai.response.finish_reasons"]) for c in chats] == [
        ["tool_use"],
        ["tool_use"],
        ["tool_use"],
        ["end_turn"],
    ]
    (write,) = [s for s in finished if s.name == "execute_tool append_file"]
    assert write.attributes["gen_ai.tool.name"] == "append_file"
    assert write.attributes["gen_ai.tool.call.id"] == "call_3_0"
    assert write.attributes["threadlog.tool.side_effect"] == "non_idempotent"
    assert write.attributes["threadlog.tool_call.outcome"] == "ok"
    approval = [e for e in write.events if e.name == "threadlog.tool_call.approved"]
    assert approval[0].attributes["threadlog.by"] == "demo-user (--yes)"
    # the span leads back to the log: its ordinals and event ids are the records'
    with open_store(str(tmp_path)) as store:
        records = store.read(thread)
    by_ord = {r.ord: r for r in records}
    first = by_ord[write.attributes["threadlog.ord.first"]]
    assert (
        first.type == "tool_call.proposed" and first.id == write.attributes["threadlog.event.first"]
    )
    assert by_ord[write.attributes["threadlog.ord.last"]].type == "tool_call.finished"

    # after the fact: the same spans, ids and times included
    assert sorted(_tuples(_shape(s)) for s in finished) == sorted(
        _tuples(_otlp_shape(s))
        for s in orjson.loads(_export(tmp_path, thread))["resourceSpans"][0]["scopeSpans"][0][
            "spans"
        ]
    )
    assert len(spans_of(records)) == len(finished)


def _export(home: Path, thread: str) -> str:
    result = CliRunner().invoke(cli, ["export", thread, "--home", str(home), "--format", "otlp"])
    assert result.exit_code == 0, result.output
    return result.output


def test_a_thread_recorded_without_tracing_exports_its_spans(tmp_path: Path) -> None:
    thread = _demo(tmp_path)
    body = orjson.loads(_export(tmp_path, thread))
    (resource,) = body["resourceSpans"]
    attrs = {a["key"]: a["value"] for a in resource["resource"]["attributes"]}
    assert attrs["service.name"] == {"stringValue": "threadlog"}
    spans = resource["scopeSpans"][0]["spans"]
    assert len(spans) == 8
    for span in spans:
        assert len(span["traceId"]) == 32 and len(span["spanId"]) == 16
        assert span["kind"] in (1, 3)
        assert int(span["endTimeUnixNano"]) >= int(span["startTimeUnixNano"])


def test_import_threadlog_and_a_runtime_load_no_opentelemetry(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import asyncio, sys, threadlog\n"
        "from threadlog.runtime.runtime import Runtime\n"
        "async def main():\n"
        "    async with Runtime(ephemeral=True) as rt:\n"
        "        await rt.create('alice')\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry', 'threadlog.observe'))))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("THREADLOG_OTEL")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == "[]"


def test_threadlog_otel_1_turns_live_tracing_on_from_the_environment(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import asyncio, sys\n"
        "from threadlog import _hooks\n"
        "from threadlog.runtime.runtime import Runtime\n"
        "async def main():\n"
        "    async with Runtime(ephemeral=True) as rt:\n"
        "        await rt.create('alice')\n"
        "asyncio.run(main())\n"
        "print(type(_hooks.TRACER).__name__)\n"
    )
    env = {
        **__import__("os").environ,
        "THREADLOG_OTEL": "traces",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        "OTEL_BSP_SCHEDULE_DELAY": "60000",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == "LiveTracer"


def test_threadlog_otel_names_the_signals() -> None:
    assert live.signals("1") == live.signals("all") == {"traces", "metrics"}
    assert live.signals("traces") == {"traces"}
    assert live.signals("metrics, traces") == {"traces", "metrics"}
    assert live.signals("") == live.signals("0") == live.signals("nonsense") == set()
