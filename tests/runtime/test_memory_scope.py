"""Memory scopes keep their owner (issue 10, point 12): a ``project`` fact belongs to its
principal and project; no principal ever sees another's memory."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from typing import Any

import pytest
from click.testing import CliRunner

from threadlog import UsageError, open_store
from threadlog.cli import cli
from threadlog.cli import memory as _memory  # noqa: F401 - registers the commands
from threadlog.model.memory import MemoryFact, select_memories
from threadlog.runtime import Reply, Runtime, ScriptedModel

POLICY = {"scopes": ["thread", "principal", "project"], "limit": 50}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_select_memories_offers_only_the_owners_facts() -> None:
    facts = [
        MemoryFact("1", "t-a1", "a thread", "thread", "2025-01-01", principal="alice"),
        MemoryFact("2", "t-a1", "a principal", "principal", "2025-01-02", principal="alice"),
        MemoryFact("3", "t-a1", "a p1", "project", "2025-01-03", principal="alice", project="p1"),
        MemoryFact("4", "t-a2", "a p2", "project", "2025-01-04", principal="alice", project="p2"),
        MemoryFact("5", "t-b1", "b principal", "principal", "2025-01-05", principal="bob"),
        MemoryFact("6", "t-b1", "b p1", "project", "2025-01-06", principal="bob", project="p1"),
        MemoryFact("7", "t-a9", "a legacy", "project", "2025-01-07", principal="alice"),
    ]

    def seen(thread: str, principal: str, project: str | None) -> set[str]:
        chosen = select_memories(
            facts,
            thread_id=thread,
            principal=principal,
            project=project,
            now="2030-01-01",
            policy=POLICY,
        )
        return {f.fact for f in chosen}

    assert seen("t-a1", "alice", "p1") == {"a thread", "a principal", "a p1"}
    assert seen("t-a3", "alice", "p1") == {"a principal", "a p1"}
    assert seen("t-a3", "alice", "p2") == {"a principal", "a p2"}
    assert seen("t-a3", "alice", None) == {"a principal"}
    assert seen("t-b2", "bob", "p1") == {"b principal", "b p1"}
    assert seen("t-c1", "carol", "p1") == set()
    # a project fact written before facts recorded their project: its own thread only
    assert "a legacy" in seen("t-a9", "alice", "p1")
    assert "a legacy" not in seen("t-a3", "alice", "p1")


def test_two_principals_in_two_projects_see_only_their_own(home: str) -> None:
    model = ScriptedModel(lambda request, step: Reply("ok"))

    async def offered(runtime: Runtime, principal: str, **config: Any) -> str:
        session = await runtime.create(principal, memory_policy=POLICY, **config)
        await session.submit("hello")
        await session.wait_idle(10)
        first = model.requests[-1].messages[0]
        return str(first["content"]) if first["role"] == "system" else ""

    async def main() -> dict[str, str]:
        async with Runtime(home, model=model) as runtime:
            a1 = await runtime.create("alice", project="p1")
            await a1.remember("alice everywhere")
            await a1.remember("alice in p1", scope="project")
            a2 = await runtime.create("alice", cwd="/srv/p2")  # the project is the cwd
            await a2.remember("alice in p2", scope="project")
            b1 = await runtime.create("bob", project="p1")
            await b1.remember("bob everywhere")
            await b1.remember("bob in p1", scope="project")
            with pytest.raises(UsageError, match="project"):
                await (await runtime.create("bob")).remember("no project", scope="project")
            return {
                "alice p1": await offered(runtime, "alice", project="p1"),
                "alice p2": await offered(runtime, "alice", cwd="/srv/p2"),
                "bob p1": await offered(runtime, "bob", project="p1"),
                "bob p2": await offered(runtime, "bob", cwd="/srv/p2"),
                "carol p1": await offered(runtime, "carol", project="p1"),
            }

    seen = run(main())
    assert "alice everywhere" in seen["alice p1"] and "alice in p1" in seen["alice p1"]
    assert "alice in p2" not in seen["alice p1"] and "bob" not in seen["alice p1"]
    assert "alice in p2" in seen["alice p2"] and "alice in p1" not in seen["alice p2"]
    assert "bob everywhere" in seen["bob p1"] and "bob in p1" in seen["bob p1"]
    assert "alice" not in seen["bob p1"]  # alice's p1 fact is hers, not the project's
    assert "alice" not in seen["bob p2"] and "bob in p1" not in seen["bob p2"]
    assert seen["carol p1"] == ""
    # the command line lists one principal's facts only, with their project
    for principal, other in (("alice", "bob"), ("bob", "alice")):
        result = CliRunner().invoke(
            cli, ["memory", "ls", "--home", home, "--principal", principal, "--json"]
        )
        assert result.exit_code == 0, result.output
        facts = json.loads(result.output)
        assert facts and all(f["principal"] == principal for f in facts)
        assert not any(other in f["fact"] for f in facts)
        assert {f["project"] for f in facts if f["scope"] == "project"} <= {"p1", "/srv/p2"}
    with open_store(home) as store:
        assert {f.fact for f in store.shared_memories("bob", "p1")} == {
            "bob everywhere",
            "bob in p1",
        }
        assert {f.fact for f in store.shared_memories("alice")} == {"alice everywhere"}


def test_an_index_of_the_previous_schema_gains_the_project_column(home: str) -> None:
    async def main() -> None:
        async with Runtime(home) as runtime:
            session = await runtime.create("alice", project="p1")
            await session.remember("alice in p1", scope="project")

    run(main())
    db = sqlite3.connect(f"{home}/index.sqlite3")
    with db:
        db.execute("ALTER TABLE memories DROP COLUMN project")
        db.execute("UPDATE meta SET value = '2' WHERE key = 'schema'")
    db.close()
    with open_store(home) as store:
        (fact,) = store.shared_memories("alice", "p1")
        assert fact.fact == "alice in p1" and fact.project == "p1"
