"""The conversation tree, compaction and long-term memory."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from threadlog import open_store
from threadlog.cli import cli
from threadlog.cli import export as _export  # noqa: F401
from threadlog.cli import inspect as _inspect  # noqa: F401 - registers the commands
from threadlog.cli import memory as _memory  # noqa: F401
from threadlog.runtime import Reply, Runtime, ScriptedModel
from threadlog.runtime.models import ModelRequest


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def echo_model() -> ScriptedModel:
    """Answers each user message with 're: <message>'."""

    def reply(request: ModelRequest, step: int) -> Reply:
        last_user = [m for m in request.messages if m["role"] == "user"][-1]["content"]
        return Reply(f"re: {last_user}")

    return ScriptedModel(reply)


def contents(messages: list[dict[str, Any]]) -> list[str]:
    return [f"{m['role']}:{m.get('content')}" for m in messages]


def test_branch_from_an_old_entry_keeps_both_branches(home: str) -> None:
    model = echo_model()

    async def main() -> tuple[str, str, str]:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u")
            for text in ("one", "two", "three"):
                await session.submit(text)
                await session.wait_idle(10)
            old_leaf = session.state.leaf
            assert old_leaf is not None
            # go back to the answer to "one" and take another road
            entries = session.context.entries_at(session.context.leaf)
            branch_point = next(e for e, m in entries if m.get("content") == "re: one")
            await session.branch(branch_point, summary="tried two and three")
            await session.submit("alternative")
            await session.wait_idle(10)
            await session.label(branch_point, "fork-point")
            return session.thread_id, old_leaf, session.state.leaf  # type: ignore[return-value]

    thread, old_leaf, new_leaf = run(main())
    # the model's context on the new branch is exactly its own path
    assert contents(model.requests[-1].messages) == [
        "user:one",
        "assistant:re: one",
        "system:An abandoned branch of this conversation, summarized:\ntried two and three",
        "user:alternative",
    ]
    with open_store(home) as store:
        records = store.read(thread)
        from threadlog.model.context import Context

        context = Context.from_records(records)
        assert contents(context.messages_at(old_leaf)) == [
            "user:one",
            "assistant:re: one",
            "user:two",
            "assistant:re: two",
            "user:three",
            "assistant:re: three",
        ]
        assert context.messages_at(new_leaf)[-1] == {
            "role": "assistant",
            "content": "re: alternative",
            "tool_calls": [],
        }
        state = store.state(thread)
        assert state.leaf == new_leaf and "fork-point" in state.labels.values()
        assert store.verify(thread).ok
    out = CliRunner().invoke(cli, ["show", thread, "--tree", "--home", home]).output
    assert "active leaf" in out and "branch" in out and "#fork-point" in out
    result = CliRunner().invoke(cli, ["diff", thread, old_leaf, new_leaf, "--home", home, "--json"])
    doc = json.loads(result.output)
    assert doc["shared_messages"] == 2
    assert [m["content"] for m in doc["a"]][:1] == ["two"]
    assert "alternative" in [m["content"] for m in doc["b"]]


def test_branching_refuses_unknown_entries_and_running_turns(home: str) -> None:
    async def main() -> None:
        async with Runtime(home, model=echo_model()) as runtime:
            session = await runtime.create("u")
            try:
                await session.branch("01a22a49-510c-7584-9d29-5f2f1ad5387a")
            except Exception as exc:
                assert "no entry" in str(exc)
            else:
                raise AssertionError("branched to nowhere")

    run(main())


def test_compaction_shrinks_the_context_but_export_keeps_everything(home: str) -> None:
    model = echo_model()
    texts = [f"message number {i} " + "x" * 200 for i in range(8)]

    async def main() -> str:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u")
            for text in texts:
                await session.submit(text)
                await session.wait_idle(10)
            before = len(session.context.messages)
            record = await session.compact(keep_last=2)
            assert record is not None
            assert record.data["tokens_after"] < record.data["tokens_before"]
            assert len(session.context.messages) == 3 < before
            await session.submit("after compaction")
            await session.wait_idle(10)
            return session.thread_id

    thread = run(main())
    last = model.requests[-1].messages
    assert last[0]["role"] == "system" and "compacted" in last[0]["content"]
    assert "message number 0" in last[0]["content"]  # the scripted summary names the asks
    assert contents(last[1:]) == [
        f"user:{texts[-1]}",
        f"assistant:re: {texts[-1]}",
        "user:after compaction",
    ]
    result = CliRunner().invoke(cli, ["export", thread, "--format", "messages", "--home", home])
    exported = json.loads(result.output)
    users = [m["content"] for m in exported if m["role"] == "user"]
    assert users == [*texts, "after compaction"]  # every original message
    with open_store(home) as store:
        types = [r.type for r in store.read(thread)]
        assert types.count("compaction") == 1 and "memory.written" not in types
    html = CliRunner().invoke(cli, ["export", thread, "--format", "html", "--home", home]).output
    assert "message number 0" in html and "<!doctype html>" in html


def test_automatic_compaction_at_the_context_budget(home: str) -> None:
    model = echo_model()

    async def main() -> list[str]:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", context_budget=300, compact_keep=2)
            for i in range(6):
                await session.submit(f"ask {i} " + "y" * 300)
                await session.wait_idle(10)
            return [r.type for r in runtime.store.read(session.thread_id)]

    types = run(main())
    assert types.count("compaction") >= 2
    assert all(len(json.dumps(r.messages)) // 4 < 1200 for r in model.requests)


def test_memory_is_explicit_scoped_expiring_and_yields_to_the_current_task(home: str) -> None:
    model = echo_model()

    async def main() -> tuple[str, str]:
        async with Runtime(home, model=model) as runtime:
            first = await runtime.create("alice")
            await first.remember("The user's timezone is UTC.", key="user.tz")
            await first.remember("The user likes tea.", expires_at="2000-01-01T00:00:00.000000Z")
            await first.remember("Thread-only note.", scope="thread")
            other = await runtime.create("bob")
            await other.remember("Bob's secret.")
            second = await runtime.create(
                "alice", memory_policy={"scopes": ["principal", "thread"]}
            )
            await second.submit("hello")
            await second.wait_idle(10)
            offered = model.requests[-1].messages[0]["content"]
            assert "timezone is UTC" in offered
            assert "tea" not in offered  # expired
            assert "Thread-only" not in offered and "Bob" not in offered
            # the current task verifies a newer fact: it wins over the older memory
            await second.remember("The user's timezone is CET.", key="user.tz", scope="thread")
            await second.submit("again")
            await second.wait_idle(10)
            offered = model.requests[-1].messages[0]["content"]
            assert "CET" in offered and "UTC" not in offered
            # no policy: no memory at all
            third = await runtime.create("alice")
            await third.submit("hi")
            await third.wait_idle(10)
            assert model.requests[-1].messages[0]["role"] == "user"
            return first.thread_id, second.thread_id

    first, second = run(main())
    result = CliRunner().invoke(
        cli, ["memory", "ls", "--home", home, "--principal", "alice", "--json"]
    )
    facts = json.loads(result.output)
    assert {f["fact"] for f in facts} >= {
        "The user's timezone is UTC.",
        "The user's timezone is CET.",
    }
    utc = next(f for f in facts if "UTC" in f["fact"])
    assert utc["source_event"] and utc["written_at"] and utc["thread_id"] == first
    result = CliRunner().invoke(
        cli, ["memory", "rm", utc["memory_id"], "--home", home, "--reason", "moved"]
    )
    assert result.exit_code == 0, result.output
    facts = json.loads(CliRunner().invoke(cli, ["memory", "ls", "--home", home, "--json"]).output)
    assert utc["memory_id"] not in {f["memory_id"] for f in facts}


def test_resume_and_compaction_write_no_memory(home: str, tmp_path: Path) -> None:
    model = echo_model()

    async def main() -> str:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", memory_policy={"scopes": ["principal"]})
            for i in range(5):
                await session.submit(f"I live in city {i}. " + "z" * 100)
                await session.wait_idle(10)
            await session.compact(keep_last=2)
            return session.thread_id

    thread = run(main())

    async def again() -> None:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.resume(thread)
            await session.submit("where do I live?")
            await session.wait_idle(10)

    run(again())
    with open_store(home) as store:
        types = [r.type for r in store.read(thread)]
        assert "thread.resumed" in types and "compaction" in types
        assert "memory.written" not in types
        assert store.memories() == []


def test_a_fork_of_a_fork_continues_its_inherited_conversation(home: str) -> None:
    model = echo_model()

    async def main() -> tuple[str, str]:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u")
            for text in ("one", "two"):
                await session.submit(text)
                await session.wait_idle(10)
            child = await runtime.fork(session.thread_id)
            await child.submit("three")
            await child.wait_idle(10)
            grandchild = await runtime.fork(child.thread_id, title="again")
            await grandchild.submit("four")
            await grandchild.wait_idle(10)
            return child.thread_id, grandchild.thread_id

    child, grandchild = run(main())
    assert contents(model.requests[-1].messages) == [
        "user:one",
        "assistant:re: one",
        "user:two",
        "assistant:re: two",
        "user:three",
        "assistant:re: three",
        "user:four",
    ]
    with open_store(home) as store:
        assert store.verify(grandchild).ok
        assert {r.thread for r in store.read(grandchild)[1:]} == {
            store.state(child).lineage["thread"],  # type: ignore[index]
            child,
            grandchild,
        }
    out = CliRunner().invoke(cli, ["show", grandchild, "--tree", "--home", home]).output
    for text in ("one", "re: two", "three", "four"):
        assert text in out, out
    assert f"forked from {child}" in out.replace("\n", "")
