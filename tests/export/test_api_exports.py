"""The ``openai``, ``anthropic``, ``responses`` and ``trajectory`` exports: posted as they are
to local stubs that validate the request shape strictly (`api_stubs`), on every branch of the
imported fixtures and on a thread the runtime ran, and equal to the source's conversation.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from threadlog import open_store
from threadlog.export import (
    anthropic_request,
    export_records,
    openai_messages,
    responses_input,
    trajectory,
)
from threadlog.importers import SOURCES, import_paths, source_format
from threadlog.model.ids import derived_id
from threadlog.model.tree import Tree
from threadlog.runtime import Reply, Runtime, ScriptedModel, Tool, ToolCallSpec, ToolContext

from ..importers._helpers import FIXTURES
from .api_stubs import stub_transport, validate_chat_completions, validate_messages

CLAUDE = "claude-code:7d3c2a10-5b6e-4f1a-9c8d-0e1f2a3b4c5d"


def _anchor(key: str, item: str) -> str:
    return derived_id("threadlog.import", key, item, "0")


@pytest.fixture(scope="module")
def threads() -> Iterator[tuple[Any, list[str]]]:
    """Every thread of every fixture, imported into one in-memory store."""
    with open_store("memory://") as store:
        ids: list[str] = []
        for fmt in SOURCES:
            report = import_paths(store, source_format(fmt), [str(FIXTURES / fmt)])
            for f in report.files:
                ids += [f.thread, *f.children]
        yield store, ids


def _leaves(records: list[Any]) -> list[str]:
    """Every entry of the thread's tree that nothing continues."""
    tree = Tree.of(records)
    return [
        r.id
        for r in records
        if not tree.children.get(r.id)
        and r.type in ("model.responded", "tool_call.started", "turn.started")
    ]


def _branches(store: Any, thread: str) -> Iterator[list[Any]]:
    """The thread's records as they would be with the active leaf at each leaf in turn."""
    records = store.read(thread)
    yield records
    for leaf in _leaves(records):
        moved = records[-1]._replace(
            ord=records[-1].ord + 1, id=derived_id("t", leaf), type="leaf.moved", data={"to": leaf}
        )
        yield [*records, moved]


def _post(path: str, body: dict[str, Any]) -> httpx.Response:
    with httpx.Client(transport=stub_transport(), base_url="http://stub") as client:
        return client.post(path, json=body)


def test_every_branch_of_every_fixture_posts_to_both_stubs(threads: Any) -> None:
    store, ids = threads
    posted = 0
    for thread in ids:
        for records in _branches(store, thread):
            chat = _post(
                "/v1/chat/completions", {"model": "gpt-4.1", "messages": openai_messages(records)}
            )
            assert chat.status_code == 200, (thread, chat.json())
            anthropic = _post(
                "/v1/messages",
                {"model": "claude-sonnet-4-5", "max_tokens": 1024, **anthropic_request(records)},
            )
            assert anthropic.status_code == 200, (thread, anthropic.json())
            posted += 1
    assert posted > len(ids)


def test_a_run_of_the_runtime_posts_too(home: str) -> None:
    async def echo(ctx: ToolContext, args: dict[str, Any]) -> str:
        return str(args)

    model = ScriptedModel(
        [
            Reply("checking", [ToolCallSpec("echo", {"x": 1}), ToolCallSpec("echo", {"x": 2})]),
            Reply("done"),
        ]
    )

    async def main() -> str:
        tool = Tool("echo", "Echo.", {"type": "object"}, "read_only", echo)
        async with Runtime(home, model=model, tools=[tool]) as runtime:
            session = await runtime.create("alice", instructions="Be brief.")
            await session.submit("go")
            await session.wait_idle(10)
            return session.thread_id

    thread = asyncio.run(main())
    with open_store(home) as store:
        records = store.read(thread)
    messages = openai_messages(records)
    assert messages[0] == {"role": "system", "content": "Be brief."}
    assert validate_chat_completions({"model": "m", "messages": messages}) == []
    body = anthropic_request(records)
    assert body["system"] == "Be brief."
    assert validate_messages({"model": "m", "max_tokens": 10, **body}) == []
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user", "assistant"]


def test_the_exports_are_the_source_conversation(threads: Any) -> None:
    """Export of an imported Claude Code branch: the conversation the source holds."""
    store, ids = threads
    thread = next(
        t for t in ids if store.read(t, limit=1)[0].data["config"]["import"]["key"] == CLAUDE
    )
    records = store.read(thread)
    leaf = _anchor(CLAUDE, "a6")
    moved = records[-1]._replace(
        ord=records[-1].ord + 1, id=derived_id("t", "a6"), type="leaf.moved", data={"to": leaf}
    )
    records = [*records, moved]
    bash = '{"command":"ls","description":"List files"}'
    read = '{"file_path":"/home/user/project/a.py"}'
    assert openai_messages(records) == [
        {"role": "user", "content": "List the files"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "toolu_01",
                    "type": "function",
                    "function": {"name": "Bash", "arguments": bash},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_01", "content": "a.py\nb.py"},
        {"role": "assistant", "content": "Two files: a.py and b.py."},
        {"role": "user", "content": "Instead, show a.py"},
        {
            "role": "assistant",
            "content": "Reading it.",
            "tool_calls": [
                {
                    "id": "toolu_02",
                    "type": "function",
                    "function": {"name": "Read", "arguments": read},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_02", "content": "error: File too large"},
        {"role": "assistant", "content": "Could not read it."},
    ]
    body = anthropic_request(records)
    assert body == {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "List the files"}]},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "thinking",
                        "thinking": "I should run ls.",
                        "signature": "c2lnbmF0dXJlLUE=",
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_01",
                        "name": "Bash",
                        "input": {"command": "ls", "description": "List files"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01", "content": "a.py\nb.py"}
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Two files: a.py and b.py."}],
            },
            {"role": "user", "content": [{"type": "text", "text": "Instead, show a.py"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Reading it."},
                    {
                        "type": "tool_use",
                        "id": "toolu_02",
                        "name": "Read",
                        "input": {"file_path": "/home/user/project/a.py"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_02",
                        "content": "File too large",
                        "is_error": True,
                    }
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Could not read it."}]},
        ],
    }
    items = responses_input(records)
    assert [i["type"] for i in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert items[1] == {
        "type": "function_call",
        "call_id": "toolu_01",
        "name": "Bash",
        "arguments": bash,
    }
    assert items[2] == {
        "type": "function_call_output",
        "call_id": "toolu_01",
        "output": "a.py\nb.py",
    }


def test_trajectory_of_an_imported_session(threads: Any) -> None:
    store, ids = threads
    thread = next(
        t for t in ids if store.read(t, limit=1)[0].data["config"]["import"]["key"] == CLAUDE
    )
    records = store.read(thread)
    out = trajectory(records)
    assert out["source"]["format"] == "claude-code"
    # the active branch: every model response from the root to the leaf, compaction or not
    assert [s["step_id"] for s in out["steps"]] == [
        f"step-{x}" for x in ("a1", "a2", "a3", "a5", "a6", "a7")
    ]
    bash = out["steps"][1]["tool_calls"][0]
    assert bash["result"] == "a.py\nb.py" and bash["ok"] is True
    assert (bash["started_at"], bash["finished_at"], bash["duration_ms"]) == (
        "2025-09-01T10:00:03.000Z",
        "2025-09-01T10:00:04.000Z",
        1000,
    )
    assert out["steps"][3]["tool_calls"][0]["ok"] is False
    assert out["steps"][3]["input"] == ["Instead, show a.py"]
    assert out["outcome"]["tool_calls"] == 2 and out["outcome"]["failed_tool_calls"] == 1
    assert out["outcome"]["final_message"] == "Continuing: anything else?"
    assert out["usage"]["input_tokens"] == 50
    assert json.loads(export_records(records, "trajectory")) == out


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"model": "m", "messages": []}, "non-empty"),
        (
            {
                "model": "m",
                "messages": [
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c",
                                "type": "function",
                                "function": {"name": "f", "arguments": {}},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c", "content": "x"},
                ],
            },
            "JSON string",
        ),
        (
            {
                "model": "m",
                "messages": [
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c",
                                "type": "function",
                                "function": {"name": "f", "arguments": "{}"},
                            }
                        ],
                    },
                    {"role": "user", "content": "hi"},
                ],
            },
            "not answered",
        ),
        (
            {"model": "m", "messages": [{"role": "tool", "tool_call_id": "c", "content": "x"}]},
            "answers no open",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x", "extra": 1}]},
            "unknown keys",
        ),
    ],
)
def test_the_chat_stub_refuses_bad_requests(body: dict[str, Any], error: str) -> None:
    errors = validate_chat_completions(body)
    assert any(error in e for e in errors), errors
    assert _post("/v1/chat/completions", body).status_code == 400


@pytest.mark.parametrize(
    ("messages", "error"),
    [
        ([{"role": "assistant", "content": "hi"}], "role must be 'user'"),
        ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "alternate"),
        ([{"role": "user", "content": [{"type": "text", "text": ""}]}], "non-empty string"),
        (
            [
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "x"},
                        {"type": "tool_result", "tool_use_id": "t", "content": "r"},
                    ],
                },
            ],
            "must come first",
        ),
        (
            [
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                },
                {"role": "user", "content": "no result"},
            ],
            "previous message called",
        ),
        (
            [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "x"}]},
            ],
            "signature",
        ),
    ],
)
def test_the_messages_stub_refuses_bad_requests(messages: list[Any], error: str) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": messages}
    errors = validate_messages(body)
    assert any(error in e for e in errors), errors
    assert _post("/v1/messages", body).status_code == 400


def test_tool_names_are_made_acceptable(tmp_path: Any) -> None:
    """An old Codex tool name (``container.exec``) has a character the APIs refuse."""
    line = (
        '{"timestamp":"t","type":"response_item","payload":{"type":"function_call",'
        '"name":"container.exec","arguments":"{\\"command\\":[\\"ls\\"]}","call_id":"c1"}}\n'
    )
    path = tmp_path / "rollout-2025-01-01T00-00-00-old.jsonl"
    path.write_text(
        '{"timestamp":"t","type":"session_meta","payload":{"id":"old"}}\n'
        '{"timestamp":"t","type":"response_item","payload":{"type":"message","role":"user",'
        '"content":[{"type":"input_text","text":"ls"}]}}\n' + line
    )
    with open_store("memory://") as store:
        [f] = import_paths(store, source_format("codex"), [str(path)]).files
        records = store.read(f.thread)
    messages = openai_messages(records)
    assert messages[1]["tool_calls"][0]["function"]["name"] == "container_exec"
    assert validate_chat_completions({"model": "m", "messages": messages}) == []
    body = {"model": "m", "max_tokens": 5, **anthropic_request(records)}
    assert validate_messages(body) == []
    assert responses_input(records)[1]["name"] == "container_exec"
