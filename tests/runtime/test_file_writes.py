"""File writes are non-idempotent: never auto-approved by default, never blindly re-run.

A crash between ``write_file``'s start intent and its result leaves its outcome unknown. Its
reconcile hook settles that by itself only when the file proves it: it holds exactly the
intended content (done), or exactly what it held before the call (safe to retry). Anything
else (a human edited the file since) waits for a human, and the human's edit is kept.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.test_resume import crashed_log, thread_of
from threadlog import open_store
from threadlog.runtime import BUILTIN_TOOLS, Reply, Runtime, ScriptedModel, ToolCallSpec


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("before\n")
    return root


def builtin(name: str) -> Any:
    return next(t for t in BUILTIN_TOOLS if t.name == name)


@pytest.mark.parametrize("name", ["write_file", "append_file", "run_command"])
def test_mutating_builtins_are_non_idempotent(name: str) -> None:
    tool = builtin(name)
    assert tool.side_effect == "non_idempotent"


def test_write_file_asks_before_writing_by_default(home: str, workspace: Path) -> None:
    model = ScriptedModel(
        [Reply("", [ToolCallSpec("write_file", {"path": "notes.txt", "text": "x\n"})])]
    )

    async def main() -> bool:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("overwrite notes")
            await session.wait_idle(10)
            return session.waiting_for_human

    assert run(main()) is True
    assert (workspace / "notes.txt").read_text() == "before\n"


def _resume(home: str, thread: str) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        async with Runtime(home, model=ScriptedModel([Reply("all done")])) as runtime:
            session = await runtime.resume(thread)
            await session.wait_idle(10)
            call = session.state.tool_calls["call_1_0"]
            return {"status": call.status, "by": call.decided_by, "attempt": call.attempt}

    return run(main())  # type: ignore[no-any-return]


ARGS = {"path": "notes.txt", "text": "after\n"}


def test_a_write_that_happened_is_settled_done_and_not_repeated(home: str, workspace: Path) -> None:
    crashed = crashed_log(
        home, workspace, builtin("write_file"), until="tool_call.started", args=ARGS
    )
    assert (workspace / "notes.txt").read_text() == "after\n"  # written before the "crash"
    call = _resume(crashed, thread_of(crashed))
    assert call == {"status": "done", "by": "reconcile:write_file", "attempt": 1}
    assert (workspace / "notes.txt").read_text() == "after\n"


def test_a_write_that_never_happened_is_retried_once(home: str, workspace: Path) -> None:
    crashed = crashed_log(
        home, workspace, builtin("write_file"), until="tool_call.started", args=ARGS
    )
    (workspace / "notes.txt").write_text("before\n")  # the crash came before the write
    call = _resume(crashed, thread_of(crashed))
    assert call == {"status": "finished", "by": "reconcile:write_file", "attempt": 2}
    assert (workspace / "notes.txt").read_text() == "after\n"


def test_a_human_edit_since_the_crash_is_never_overwritten(home: str, workspace: Path) -> None:
    crashed = crashed_log(
        home, workspace, builtin("write_file"), until="tool_call.started", args=ARGS
    )
    (workspace / "notes.txt").write_text("a human's edit\n")
    thread = thread_of(crashed)
    call = _resume(crashed, thread)
    assert call["status"] == "unknown"  # a human decides
    assert (workspace / "notes.txt").read_text() == "a human's edit\n"
    with open_store(crashed) as store:
        assert store.state(thread).tool_calls["call_1_0"].status == "unknown"


def test_an_append_that_happened_is_settled_done_and_not_repeated(
    home: str, workspace: Path
) -> None:
    args = {"path": "notes.txt", "text": "more\n"}
    crashed = crashed_log(
        home, workspace, builtin("append_file"), until="tool_call.started", args=args
    )
    assert (workspace / "notes.txt").read_text() == "before\nmore\n"
    call = _resume(crashed, thread_of(crashed))
    assert call == {"status": "done", "by": "reconcile:append_file", "attempt": 1}
    assert (workspace / "notes.txt").read_text() == "before\nmore\n"


def test_a_reconcile_hook_taking_only_the_key_still_works() -> None:
    """Hooks written for ``reconcile(key)`` are called with the key alone."""
    from threadlog.runtime.tools._tool import Reconciling, ask_reconcile

    seen: list[Any] = []

    async def one(key: str) -> bool:
        seen.append(key)
        return True

    async def two(key: str, call: Reconciling) -> bool | None:
        seen.append((key, call.intent))
        return None

    call = Reconciling(None, {}, {"x": 1})  # type: ignore[arg-type]
    assert run(ask_reconcile(one, "k", call)) is True
    assert run(ask_reconcile(two, "k", call)) is None
    assert seen == ["k", ("k", {"x": 1})]
