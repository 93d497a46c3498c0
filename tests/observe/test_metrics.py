"""Metrics: the appends of a run are recorded (latency, fsync, records per commit, outcomes),
in-process, through OpenTelemetry, and on ``GET /metrics`` of the service."""

from __future__ import annotations

import asyncio
import io
import shutil
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from threadlog import _hooks
from threadlog.cli.demo import _run, _workspace
from threadlog.observe import metrics as m
from threadlog.runtime.models import Reply, ScriptedModel
from threadlog.runtime.runtime import Runtime


@pytest.fixture
def installed() -> Any:
    before = _hooks.METRICS
    yield
    _hooks.METRICS = before


def test_metrics_are_off_by_default_and_cost_one_none_test() -> None:
    assert _hooks.METRICS is None or isinstance(_hooks.METRICS, m.Metrics)


def test_the_demo_run_records_its_appends(tmp_path: Path, installed: None) -> None:
    metrics = m.install()
    workspace = _workspace()
    try:
        asyncio.run(_run(str(tmp_path), True, False, 0.0, Console(file=io.StringIO()), workspace))
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    assert metrics.count("threadlog_append_seconds") >= 30
    assert metrics.count("threadlog_fsync_seconds") >= 1
    assert metrics.count("threadlog_commit_records") >= 1
    assert metrics.value("threadlog_records_total", type="turn.started") == 1
    assert metrics.value("threadlog_records_total", type="tool_call.finished") == 3
    assert metrics.value("threadlog_tool_calls_total", outcome="ok") == 3
    assert metrics.value("threadlog_open_threads") == 0  # opened, then closed
    text = metrics.prometheus_text()
    assert "# TYPE threadlog_append_seconds histogram" in text
    assert 'threadlog_tool_calls_total{outcome="ok"} 3' in text
    assert 'threadlog_append_seconds_bucket{le="+Inf"}' in text
    count = next(
        line for line in text.splitlines() if line.startswith("threadlog_append_seconds_count")
    )
    assert int(count.split()[1]) == metrics.count("threadlog_append_seconds")


def test_through_opentelemetry_metrics(tmp_path: Path, installed: None) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    m.install(m.Metrics(meter=provider.get_meter("threadlog")))

    async def main() -> None:
        model = ScriptedModel([Reply("hello")])
        async with Runtime(tmp_path, model=model) as runtime:
            session = await runtime.create("alice")
            await session.submit("hi")
            await session.wait_idle(10)

    asyncio.run(main())
    data = reader.get_metrics_data()
    assert data is not None
    found = {
        metric.name: metric
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
    }
    assert found["threadlog_append_seconds"].data.data_points[0].count > 0
    points = found["threadlog_records_total"].data.data_points
    assert any(p.attributes == {"type": "turn.ended"} and p.value == 1 for p in points)
    provider.shutdown()


def test_the_service_serves_prometheus_text(tmp_path: Path, installed: None) -> None:
    pytest.importorskip("fastapi")
    import httpx

    from tests.server.conftest import make_app, serve_in_thread
    from threadlog.store.open import open_store

    m.install()
    with open_store(str(tmp_path / "home")) as store:
        app = make_app(store)
        with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as client:
            assert client.get("/metrics").status_code == 401
            auth = {"Authorization": "Bearer tok-alice"}
            made = client.post("/v1/threads", json={"input": "hello"}, headers=auth)
            assert made.status_code == 201, made.text
            answer = client.get("/metrics", headers=auth)
            assert answer.status_code == 200
            assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
            assert "threadlog_append_seconds_count" in answer.text
            assert 'threadlog_records_total{type="thread.created"}' in answer.text
