"""The embedded mailbox and the session's watcher: typed commands in, malformed messages
refused, old ones applied."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from threadlog import open_store
from threadlog.errors import UsageError
from threadlog.model.commands import Approve, Cancel, Deny, Submit
from threadlog.runtime import Reply, Runtime, ScriptedModel, Tool, ToolCallSpec, ToolContext
from threadlog.runtime.mailbox_watch import apply_command
from threadlog.store.protocol import Mailbox, MailboxMessage


def inbox_dir(home: str, thread: str) -> str:
    return os.path.join(home, "inbox", thread)


def post(home: str, thread: str, command: Any) -> str:
    with open_store(home) as store:
        assert isinstance(store, Mailbox)
        return store.post(thread, command)


def pending(home: str, thread: str) -> list[MailboxMessage]:
    with open_store(home) as store:
        assert isinstance(store, Mailbox)
        return store.pending(thread)


def charge_tool(counter: list[int]) -> Tool:
    async def body(ctx: ToolContext, args: dict[str, Any]) -> Any:
        counter.append(1)
        return {"n": len(counter)}

    return Tool("charge", "charge (test)", {"type": "object"}, "non_idempotent", body)


def leave(home: str, thread: str, name: str, content: bytes) -> Path:
    """Drop a message file as another process would (no checks)."""
    directory = Path(inbox_dir(home, thread))
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(Path(home) / "inbox", 0o700)
    path = directory / f"{name}.json"
    path.write_bytes(content)
    os.chmod(path, 0o600)
    return path


async def until(predicate: Callable[[], bool], what: str) -> None:
    for _ in range(200):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_read_messages_parses_commands(home: str) -> None:
    with open_store(home) as store:
        thread = store.create_thread("u")
    first = post(home, thread, Approve(call_id="c1", by="bob"))
    second = post(home, thread, Cancel())
    messages = pending(home, thread)
    assert [(m.id, m.command) for m in messages] == [
        (first, Approve(call_id="c1", by="bob")),
        (second, Cancel()),
    ]


def test_post_refuses_a_command_built_with_ill_typed_values(home: str) -> None:
    with open_store(home) as store:
        thread = store.create_thread("u")
    with pytest.raises(UsageError, match="call_id"):
        post(home, thread, Approve(call_id=5))  # type: ignore[arg-type]
    assert pending(home, thread) == []


def test_a_malformed_message_is_refused_and_later_good_ones_are_applied(
    home: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    counter: list[int] = []
    workspace = tmp_path / "ws"
    workspace.mkdir()

    async def main() -> tuple[str, list[Path]]:
        model = ScriptedModel(
            [Reply("", [ToolCallSpec("charge")]), Reply("charged"), Reply("noted")]
        )
        async with Runtime(home, model=model, tools=[charge_tool(counter)]) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("go")
            await session.wait_idle(10)
            (call,) = session.state.tool_calls.values()
            thread = session.thread_id
            # ids sort by time: these are read first, in this order, then the good one
            bad = [
                leave(home, thread, "00000000-0000-7000-8000-000000000001", b"{not json"),
                leave(
                    home,
                    thread,
                    "00000000-0000-7000-8000-000000000002",
                    orjson.dumps({"kind": "shutdown", "id": "x"}),
                ),
                leave(
                    home,
                    thread,
                    "00000000-0000-7000-8000-000000000003",
                    orjson.dumps({"kind": "deny", "call_id": 42}),
                ),
                leave(
                    home,
                    thread,
                    "00000000-0000-7000-8000-000000000004",
                    orjson.dumps({"kind": "deny", "call_id": call.call_id, "force": True}),
                ),
            ]
            await asyncio.to_thread(post, home, thread, Approve(call_id=call.call_id, by="bob"))
            await until(lambda: session.state.active_turn is None, "the approved turn to end")
            assert session.state.tool_calls[call.call_id].decided_by == "bob"
            # the watcher is still alive: a later message is applied too
            await asyncio.to_thread(post, home, thread, Submit(text="thanks", by="bob"))
            await until(lambda: len(session.state.turns) == 2, "the second turn")
            directory = inbox_dir(home, thread)
            await until(
                lambda: all(n.endswith(".refused") for n in os.listdir(directory)),
                "the applied messages to be deleted",
            )
            await session.wait_idle(10)
            return thread, bad

    # the mailbox (the store) refuses malformed messages; the watcher (the runtime) logs too
    with (
        caplog.at_level(logging.ERROR, logger="threadlog.runtime"),
        caplog.at_level(logging.ERROR, logger="threadlog.store"),
    ):
        thread, bad = asyncio.run(main())
    assert counter == [1]  # approved, never denied
    for path in bad:
        assert not path.exists() and path.with_name(path.name + ".refused").exists()
    assert sorted(os.listdir(inbox_dir(home, thread))) == sorted(p.name + ".refused" for p in bad)
    refusals = [r.getMessage() for r in caplog.records if "refusing malformed" in r.getMessage()]
    assert len(refusals) == 4
    with open_store(home) as store:
        state = store.state(thread)
    assert [t.input for t in state.turns.values()] == ["go", "thanks"]


def test_a_message_an_older_cli_left_is_applied(home: str, tmp_path: Path) -> None:
    """The file format is unchanged: a hand-written message with the old keys (and the ``id``
    the poster adds) is applied as before."""

    async def main() -> str:
        model = ScriptedModel([Reply("", [ToolCallSpec("charge")]), Reply("ok")])
        async with Runtime(home, model=model, tools=[charge_tool([])]) as runtime:
            session = await runtime.create("u", cwd=str(tmp_path))
            await session.submit("go")
            await session.wait_idle(10)
            (call,) = session.state.tool_calls.values()
            message_id = "00000000-0000-7000-8000-0000000000aa"
            body = {
                "kind": "deny",
                "call_id": call.call_id,
                "by": "cli",
                "reason": "not today",
                "id": message_id,
            }
            leave(home, session.thread_id, message_id, orjson.dumps(body))
            await until(lambda: session.state.active_turn is None, "the turn to end")
            assert session.state.tool_calls[call.call_id].status == "denied"
            directory = inbox_dir(home, session.thread_id)
            await until(lambda: os.listdir(directory) == [], "the message to be deleted")
            return session.thread_id

    asyncio.run(main())


def test_apply_command_reaches_every_session_command(home: str) -> None:
    async def main() -> list[str | None]:
        model = ScriptedModel([Reply("", [ToolCallSpec("charge")])])
        async with Runtime(home, model=model, tools=[charge_tool([])]) as rt:
            session = await rt.create("u")
            await session.submit("go")
            await session.wait_idle(10)
            (call,) = session.state.tool_calls.values()
            applied = [
                await apply_command(session, Deny(call_id=call.call_id, reason="no")),
                await apply_command(session, Cancel()),
            ]
            return [r.type if r is not None else None for r in applied]

    assert asyncio.run(main()) == ["tool_call.denied", None]
