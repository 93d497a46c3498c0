"""Tools report progress, transient and never logged; providers' transient failures are
retried with backoff, each attempt recorded, up to a limit (issue 10, point 13)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from threadlog import UsageError, open_store
from threadlog.model.recovery import plan_recovery
from threadlog.model.reducer import replay
from threadlog.runtime import (
    Completed,
    ModelRequest,
    Progress,
    ProviderError,
    Reply,
    Runtime,
    ScriptedModel,
    TextDelta,
    Tool,
    ToolCallSpec,
    ToolContext,
)
from threadlog.runtime.models import ModelEvent
from threadlog.runtime.retry import RetryPolicy


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


# -- tool progress ----------------------------------------------------------------------------


async def _crawl(ctx: ToolContext, args: dict[str, Any]) -> str:
    ctx.progress("secret-progress 1 of 2", 0.5)
    await asyncio.to_thread(ctx.progress, "secret-progress from a thread")
    ctx.progress("secret-progress done", 1)
    return "crawled"


CRAWL = Tool("crawl", "Crawl.", {"type": "object"}, "read_only", _crawl)


def test_a_tools_progress_reaches_subscribers_and_never_the_log(home: str, workspace: Path) -> None:
    model = ScriptedModel([Reply("", [ToolCallSpec("crawl", id="c1")]), Reply("done")])

    async def main() -> tuple[str, list[Progress], list[Any]]:
        async with Runtime(home, model=model, tools=[CRAWL]) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            seen: list[Progress] = []
            plain: list[Any] = []

            async def watch(progress: bool, into: list[Any]) -> None:
                async for item in session.subscribe(progress=progress):
                    into.append(item)
                    if getattr(item, "type", None) == "turn.ended":
                        return

            watchers = [
                asyncio.create_task(watch(True, seen)),
                asyncio.create_task(watch(False, plain)),
            ]
            await asyncio.sleep(0)
            await session.submit("crawl")
            await session.wait_idle(10)
            await asyncio.wait_for(asyncio.gather(*watchers), 10)
            return session.thread_id, [i for i in seen if isinstance(i, Progress)], plain

    thread, progress, plain = run(main())
    reports = [p.data for p in progress if p.kind == "tool_progress"]
    assert reports == [
        {
            "call_id": "c1",
            "tool": "crawl",
            "attempt": 1,
            "message": "secret-progress 1 of 2",
            "fraction": 0.5,
        },
        {
            "call_id": "c1",
            "tool": "crawl",
            "attempt": 1,
            "message": "secret-progress from a thread",
            "fraction": None,
        },
        {
            "call_id": "c1",
            "tool": "crawl",
            "attempt": 1,
            "message": "secret-progress done",
            "fraction": 1.0,
        },
    ]
    assert not any(isinstance(i, Progress) for i in plain)  # only for those who asked
    with open_store(home) as store:
        raw = b"".join(r.type.encode() + repr(r.data).encode() for r in store.read(thread))
        assert b"secret-progress" not in raw
        assert store.state(thread).tool_calls["c1"].result == "crawled"


def test_progress_is_checked() -> None:
    ctx = ToolContext("t", "c", 1, "k", Path("."))
    ctx.progress("no sink: nothing happens")
    with pytest.raises(UsageError, match="between 0 and 1"):
        ctx.progress("x", 1.5)
    with pytest.raises(UsageError, match="text"):
        ctx.progress(3)  # type: ignore[arg-type]


# -- provider retries -------------------------------------------------------------------------


class FlakyModel:
    """Fails the first ``failures`` requests (after streaming a word), then answers."""

    provider = "flaky"
    name = "flaky-1"

    def __init__(self, failures: int, *, retryable: bool = True) -> None:
        self.failures = failures
        self.retryable = retryable
        self.calls = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.calls += 1
        if self.calls <= self.failures:
            yield TextDelta("Hel")
            raise ProviderError(
                f"HTTP 429: slow down ({self.calls})", partial="Hel", retryable=self.retryable
            )
        yield Completed({"role": "assistant", "content": "answer", "tool_calls": []})


class Waits:
    """An injected sleep: records the waits, never sleeps."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def _turn(home: str, model: Any, policy: RetryPolicy, **config: Any) -> list[Any]:
    """The records of one turn of ``model`` under ``policy`` (verified)."""

    async def main() -> str:
        async with Runtime(home, model=model, retry=policy) as runtime:
            session = await runtime.create("u", **config)
            await session.submit("hi")
            await session.wait_idle(10)
            return session.thread_id

    thread = run(main())
    with open_store(home) as store:
        assert store.verify(thread).ok
        return store.read(thread)


def _model_records(records: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    keep = ("provider.started", "provider.interrupted", "model.responded", "turn.ended")
    out = []
    for r in records:
        if r.type in keep:
            data = {k: r.data[k] for k in ("attempt", "retryable", "outcome") if k in r.data}
            out.append((r.type, data))
    return out


def test_a_transient_provider_failure_is_retried_and_each_attempt_recorded(home: str) -> None:
    waits = Waits()
    model = FlakyModel(2)
    records = _turn(home, model, RetryPolicy(sleep=waits))
    assert model.calls == 3
    assert _model_records(records) == [
        ("provider.started", {}),
        ("provider.interrupted", {"attempt": 1, "retryable": True}),
        ("provider.started", {"attempt": 2}),
        ("provider.interrupted", {"attempt": 2, "retryable": True}),
        ("provider.started", {"attempt": 3}),
        ("model.responded", {}),
        ("turn.ended", {"outcome": "completed"}),
    ]
    assert [r.type for r in records].count("step.started") == 1  # one step, three tries
    first = next(r for r in records if r.type == "provider.interrupted")
    assert first.data["partial"] == "Hel" and "429" in first.data["reason"]
    assert len(waits.waits) == 2 and all(0 <= w <= 30 for w in waits.waits)
    state = replay(records)
    (step,) = state.steps.values()
    assert step.status == "responded"


def test_retries_stop_at_the_limit_and_the_turn_fails(home: str) -> None:
    waits = Waits()
    model = FlakyModel(10)
    records = _turn(home, model, RetryPolicy(sleep=waits))
    assert model.calls == 3  # the default limit
    assert _model_records(records)[-2:] == [
        ("provider.interrupted", {}),  # the last try: the step ends here
        ("turn.ended", {"outcome": "failed"}),
    ]
    # a thread's setting overrides the runtime's limit
    model = FlakyModel(10)
    records = _turn(home, model, RetryPolicy(sleep=waits), model_attempts=2)
    assert model.calls == 2
    assert [r.type for r in records].count("provider.started") == 2


def test_a_non_retryable_error_is_not_retried(home: str) -> None:
    waits = Waits()
    model = FlakyModel(1, retryable=False)
    records = _turn(home, model, RetryPolicy(sleep=waits))
    assert model.calls == 1 and waits.waits == []
    assert _model_records(records) == [
        ("provider.started", {}),
        ("provider.interrupted", {}),
        ("turn.ended", {"outcome": "failed"}),
    ]


def test_cancelling_while_waiting_to_retry_aborts_the_turn(home: str) -> None:
    async def main() -> str:
        started = asyncio.Event()

        async def sleep(seconds: float) -> None:
            started.set()
            await asyncio.Event().wait()  # until cancelled

        async with Runtime(home, model=FlakyModel(5), retry=RetryPolicy(sleep=sleep)) as rt:
            session = await rt.create("u")
            await session.submit("hi")
            await asyncio.wait_for(started.wait(), 10)
            await session.cancel()
            return session.thread_id

    thread = run(main())
    with open_store(home) as store:
        assert store.verify(thread).ok
        records = store.read(thread)
    assert _model_records(records)[-3:] == [
        ("provider.interrupted", {"attempt": 1, "retryable": True}),
        ("provider.interrupted", {}),  # cancelled before the next try
        ("turn.ended", {"outcome": "aborted"}),
    ]


def test_a_crash_between_tries_is_recovered_like_any_cut_off_step(home: str) -> None:
    with open_store(home) as store:
        thread = store.create_thread("u")
        store.append(thread, "turn.started", {"turn_id": "t1", "input": "hi"})
        store.append(thread, "step.started", {"turn_id": "t1", "step_id": "s1"})
        store.append(
            thread,
            "provider.started",
            {"turn_id": "t1", "step_id": "s1", "provider": "p", "model": "m"},
        )
        store.append(
            thread,
            "provider.interrupted",
            {"turn_id": "t1", "step_id": "s1", "reason": "429", "retryable": True, "attempt": 1},
        )
        state = store.state(thread)
    assert state.steps["s1"].status == "started"  # waiting for its next try
    assert plan_recovery(state).interrupted_steps == ("s1",)


def test_policy_is_checked_and_tenacity_loads_only_with_a_model_call() -> None:
    with pytest.raises(UsageError):
        RetryPolicy(attempts=0)
    code = (
        "import sys, threadlog, threadlog.runtime; "
        "from threadlog.runtime import Runtime; "
        "assert 'tenacity' not in sys.modules, 'tenacity imported eagerly'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
