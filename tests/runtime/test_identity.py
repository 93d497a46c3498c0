"""Sessions have identity (issue 10, point 8; 000 §17.1): ``session.opened``/``session.closed``
with id, process, host and source, every record naming its session, and forks that never
inherit a running turn."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from threadlog import InvalidTransition, UsageError, open_store
from threadlog.cli import cli
from threadlog.cli import inspect as _inspect  # noqa: F401 - registers the commands
from threadlog.cli import live as _live  # noqa: F401
from threadlog.model.events import CATALOGUE, EventBase, SessionClosed, SessionOpened
from threadlog.model.reducer import replay
from threadlog.runtime import Reply, Runtime, ScriptedModel, ToolCallSpec


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    return ws


def test_every_catalogued_event_can_name_its_session() -> None:
    # A new event type must carry the stamp too (it derives from EventBase).
    assert all(issubclass(cls, EventBase) for cls in CATALOGUE.values())


def test_a_session_opens_names_itself_on_every_record_and_closes(
    home: str, workspace: Path
) -> None:
    model = ScriptedModel([Reply("", [ToolCallSpec("read_file", {"path": "a.txt"})]), Reply("ok")])

    async def main() -> tuple[str, str]:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("read a.txt")
            await session.wait_idle(10)
            await session.append("custom.app.note", {"text": "mine"})
            return session.thread_id, session.identity.session_id

    thread, session_id = run(main())
    with open_store(home) as store:
        records = store.read(thread)
        assert store.verify(thread).ok
        state = store.state(thread)
    assert records[0].type == "thread.created" and "session" not in records[0].data
    opened, *written, closed = records[1:]
    assert opened.type == "session.opened"
    assert opened.data == {
        "session_id": session_id,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "source": "sdk",
        "session": session_id,
    }
    assert closed.type == "session.closed" and closed.data["session_id"] == session_id
    custom = [r for r in written if r.type.startswith("custom.")]
    assert [r.data for r in custom] == [{"text": "mine"}]  # the application's data, untouched
    catalogued = [r for r in records[1:] if not r.type.startswith("custom.")]
    assert {r.data["session"] for r in catalogued} == {session_id}
    assert state.session is None  # closed cleanly


def test_a_session_that_writes_nothing_leaves_no_trace(home: str) -> None:
    async def main() -> str:
        async with Runtime(home) as runtime:
            session = await runtime.create("u")
            return session.thread_id

    thread = run(main())

    async def reopen() -> None:
        async with Runtime(home) as runtime:
            await runtime.open(thread)

    run(reopen())
    with open_store(home) as store:
        assert [r.type for r in store.read(thread)] == ["thread.created"]


def test_a_crashed_session_is_named_by_the_next_one(home: str) -> None:
    # A session whose process stopped: its session.opened has no session.closed.
    with open_store(home) as store:
        thread = store.create_thread("u")
        store.append(
            thread,
            SessionOpened(session_id="dead", pid=1, host="gone", source="api", session="dead"),
        )
        assert store.state(thread).session == "dead"

    async def main() -> str:
        async with Runtime(home) as runtime:
            session = await runtime.open(thread)
            await session.label(session.state.last_id or "", "here")
            return session.identity.session_id

    session_id = run(main())
    with open_store(home) as store:
        records = store.read(thread)
    opened = records[2]
    assert opened.type == "session.opened" and opened.data["unclosed"] == "dead"
    assert opened.data["session_id"] == session_id
    assert records[-1].type == "session.closed"


def test_only_the_open_session_closes() -> None:
    with open_store("memory://") as store:
        thread = store.create_thread("u")
        store.append(thread, SessionOpened(session_id="s1", pid=1, host="h", source="sdk"))
        with pytest.raises(InvalidTransition, match="not open"):
            replay(
                [
                    *store.read(thread),
                    store.read(thread)[-1]._replace(
                        ord=3, type="session.closed", data={"session_id": "s2"}
                    ),
                ]
            )
        store.append(thread, SessionClosed(session_id="s1"))
        assert store.state(thread).session is None


def test_the_source_is_checked_and_the_cli_says_cli(home: str) -> None:
    with pytest.raises(UsageError, match="source must be one of cli, api, sdk"):
        Runtime(home, source="web")

    async def main() -> str:
        async with Runtime(home) as runtime:
            return (await runtime.create("u")).thread_id

    thread = run(main())
    result = CliRunner().invoke(cli, ["send", thread, "hello", "--home", home])
    assert result.exit_code == 0, result.output
    with open_store(home) as store:
        opened = [r for r in store.read(thread) if r.type == "session.opened"]
    assert [r.data["source"] for r in opened] == ["cli"]
    # `show` says who wrote what
    result = CliRunner().invoke(cli, ["show", thread, "--home", home, "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)["sessions"]
    assert row["source"] == "cli" and row["session_id"] == opened[0].data["session_id"]
    assert row["opened_ord"] == opened[0].ord and row["closed_ord"] == opened[0].ord + 2
    result = CliRunner().invoke(cli, ["show", thread, "--home", home])
    assert result.exit_code == 0 and "sessions" in result.output


# -- forks inside a running turn ------------------------------------------------------------


def _parked_turn_model() -> ScriptedModel:
    return ScriptedModel([Reply("", [ToolCallSpec("write_file", {"path": "b.txt", "text": "b"})])])


def test_a_runtime_fork_of_a_running_turn_snaps_to_the_last_turn_boundary(
    home: str, workspace: Path
) -> None:
    async def main() -> None:
        async with Runtime(home, model=_parked_turn_model()) as runtime:
            source = await runtime.create(
                "u", cwd=str(workspace), approval_policy={"tools": {"write_file": "ask"}}
            )
            await source.submit("first")
            await source.wait_idle(10)  # parked: the proposal waits for a human
            assert source.state.active_turn is not None
            started = source.state.turns[source.state.active_turn].started_ord
            child = await runtime.fork(source.thread_id, title="explore")
            assert child.state.lineage is not None
            assert child.state.lineage["ord"] == started - 1
            assert child.state.active_turn is None and not child.state.open_tool_calls
            assert runtime.store.verify(child.thread_id).ok
            # and the child goes on with a turn of its own
            await child.submit("something else")
            await child.wait_idle(10)
            assert [t.input for t in child.state.turns.values()] == ["something else"]
            assert runtime.store.verify(child.thread_id).ok
            # a fork at an ordinal inside a turn snaps too; at a boundary it does not
            inside = await runtime.fork(source.thread_id, started + 2)
            assert inside.state.lineage is not None
            assert inside.state.lineage["ord"] == started - 1
            boundary = await runtime.fork(source.thread_id, started - 1)
            assert boundary.state.lineage is not None
            assert boundary.state.lineage["ord"] == started - 1

    run(main())


def test_the_cli_fork_inside_a_turn_says_where_it_forked(home: str, workspace: Path) -> None:
    model = ScriptedModel([Reply("", [ToolCallSpec("read_file", {"path": "a.txt"})]), Reply("ok")])

    async def main() -> tuple[str, int, int]:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", cwd=str(workspace))
            await session.submit("read")
            await session.wait_idle(10)
            turn = next(iter(session.state.turns.values()))
            assert turn.ended_ord is not None
            return session.thread_id, turn.started_ord, turn.ended_ord

    thread, started, ended = run(main())
    inside = str(started + 3)
    result = CliRunner().invoke(cli, ["fork", thread, "--at", inside, "--home", home, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["lineage"]["ord"] == started - 1 and doc["requested_ord"] == started + 3
    with open_store(home) as store:
        assert store.state(doc["thread"]).active_turn is None
        assert store.verify(doc["thread"]).ok
        entry = store.read(thread)[started + 1].id  # a record inside the turn, by entry id
    result = CliRunner().invoke(cli, ["fork", thread, "--at", entry, "--home", home])
    assert result.exit_code == 0, result.output
    assert (
        f"at ord {started - 1} into" in result.output and "inside a running turn" in result.output
    )
    result = CliRunner().invoke(cli, ["fork", thread, "--at", str(ended), "--home", home, "--json"])
    doc = json.loads(result.output)
    assert doc["lineage"]["ord"] == ended and doc["requested_ord"] is None
