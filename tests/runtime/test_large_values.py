"""Values over the inline limit: every consumer sees the value, never its reference.

The store keeps a value over 64 KiB as an artifact and leaves a reference in the record; the
model, the config, the tools and the exports get the value itself. What is too big for the
model's context budget is cut explicitly (head, a marker naming the artifact, tail), and the
built-in ``read_artifact`` tool pages through the rest.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from threadlog import open_store
from threadlog.export import export_thread
from threadlog.model.refs import is_artifact_ref
from threadlog.runtime import (
    BUILTIN_TOOLS,
    ModelRequest,
    Reply,
    Runtime,
    ScriptedModel,
    ToolCallSpec,
    ToolContext,
    ToolError,
)
from threadlog.runtime.request import estimate_tokens

INLINE_LIMIT = 64 * 1024


def big_text(size: int, tag: str = "") -> str:
    """Distinct lines, so that any slice of it tells where it came from."""
    lines = (f"{tag}{i:07d}\n" for i in range(size // (8 + len(tag)) + 1))
    return "".join(lines)[:size]


def check(actual: Any, expected: Any) -> None:
    """``actual == expected``, failing with a short message (pytest's diff of two large
    values takes minutes)."""
    if actual != expected:
        shown = repr(actual)
        raise AssertionError(f"got {shown[:300]}… ({len(shown)} characters)")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    return root


def run_turns(
    home: str, model: ScriptedModel, inputs: list[str], **config: Any
) -> tuple[str, list[ModelRequest]]:
    async def main() -> str:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", **config)
            for text in inputs:
                await session.submit(text)
                await session.wait_idle(30)
            return session.thread_id

    return asyncio.run(main()), model.requests


# -- references resolved for every consumer ---------------------------------------------------


def test_a_large_input_reaches_the_model_as_text(home: str, workspace: Path) -> None:
    text = big_text(INLINE_LIMIT + 10_000)
    thread, requests = run_turns(home, ScriptedModel([Reply("ok")]), [text], cwd=str(workspace))
    with open_store(home) as store:
        started = next(r for r in store.read(thread) if r.type == "turn.started")
        assert is_artifact_ref(started.data["input"])  # the log keeps a reference
    check(requests[0].messages[-1], {"role": "user", "content": text})


def test_large_instructions_are_applied(home: str, workspace: Path) -> None:
    first = big_text(INLINE_LIMIT + 1000, "a")
    second = big_text(INLINE_LIMIT + 2000, "b")
    model = ScriptedModel([Reply("one"), Reply("two"), Reply("three")])

    async def main() -> str:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("u", cwd=str(workspace), instructions=first)
            assert session.state.config["cwd"] == str(workspace)  # the rest of the config too
            await session.submit("hello")
            await session.wait_idle(30)
            await session.configure(instructions=second)
            await session.submit("again")
            await session.wait_idle(30)
            return session.thread_id

    thread = asyncio.run(main())
    check(model.requests[0].instructions, first)
    check(model.requests[1].instructions, second)

    async def reopened() -> None:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.open(thread)
            await session.submit("after a restart")
            await session.wait_idle(30)

    asyncio.run(reopened())
    check(model.requests[2].instructions, second)


def test_a_large_model_reply_keeps_its_tool_calls(home: str, workspace: Path) -> None:
    reply = big_text(INLINE_LIMIT + 5000)
    model = ScriptedModel(
        [Reply(reply, [ToolCallSpec("read_file", {"path": "a.txt"})]), Reply("done")]
    )
    thread, requests = run_turns(home, model, ["read it"], cwd=str(workspace))
    check(
        requests[1].messages[1:],
        [
            {
                "role": "assistant",
                "content": reply,
                "tool_calls": [
                    {"id": "call_1_0", "name": "read_file", "arguments": {"path": "a.txt"}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1_0", "name": "read_file", "content": "alpha\n"},
        ],
    )
    with open_store(home) as store:
        responded = next(r for r in store.read(thread) if r.type == "model.responded")
        assert is_artifact_ref(responded.data["message"])


def test_write_file_takes_large_text(home: str, workspace: Path) -> None:
    text = big_text(INLINE_LIMIT + 3000)
    model = ScriptedModel(
        [Reply("writing", [ToolCallSpec("write_file", {"path": "big.txt", "text": text})])]
    )
    thread, _ = run_turns(
        home,
        model,
        ["write it"],
        cwd=str(workspace),
        approval_policy={"tools": {"write_file": "auto"}},
    )
    check((workspace / "big.txt").read_text(), text)
    with open_store(home) as store:
        finished = next(r for r in store.read(thread) if r.type == "tool_call.finished")
        assert finished.data["ok"] is True, finished.data


def test_exports_show_large_values(home: str, workspace: Path) -> None:
    text = big_text(INLINE_LIMIT + 100, "in")
    reply = big_text(INLINE_LIMIT + 200, "out")
    thread, _ = run_turns(home, ScriptedModel([Reply(reply)]), [text], cwd=str(workspace))
    with open_store(home) as store:
        messages = json.loads(export_thread(store, thread, "messages"))
        lines = [json.loads(line) for line in export_thread(store, thread, "jsonl").splitlines()]
    check([(m["role"], m["content"]) for m in messages], [("user", text), ("assistant", reply)])
    started = next(line for line in lines if line["type"] == "turn.started")
    check(started["data"]["input"], text)


# -- cut to the budget, and paged with read_artifact -------------------------------------------

MARKER = re.compile(
    r"\n\[threadlog: (?P<left>[\d,]+) of (?P<total>[\d,]+) characters left out here "
    r"\(from offset (?P<offset>[\d,]+)\)\. The whole text is artifact (?P<ref>[0-9a-f]{64}); "
)


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def test_a_value_over_the_budget_is_cut_with_a_marker(home: str, workspace: Path) -> None:
    text = big_text(200 * 1024)
    budget = 10_000
    thread, requests = run_turns(
        home, ScriptedModel([Reply("ok")]), [text], cwd=str(workspace), context_budget=budget
    )
    shown = requests[0].messages[-1]["content"]
    match = MARKER.search(shown)
    assert match is not None, shown[:200]
    left, offset = _number(match["left"]), _number(match["offset"])
    assert _number(match["total"]) == len(text)
    head, tail = shown[: match.start()], shown[shown.index("]\n", match.end()) + 2 :]
    assert text.startswith(head) and text.endswith(tail) and len(head) == offset
    assert len(head) + left + len(tail) == len(text)
    assert estimate_tokens(requests[0].messages) <= budget
    with open_store(home) as store:
        started = next(r for r in store.read(thread) if r.type == "turn.started")
        assert started.data["input"]["$artifact"]["sha256"] == match["ref"]
        check(store.resolve(started.data)["input"], text)  # nothing lost in the log
        step = next(r for r in store.read(thread) if r.type == "step.started")
        check(store.resolve(step.data)["context"]["messages"][-1]["content"], shown)


def test_read_artifact_pages_through_a_cut_value(home: str, workspace: Path) -> None:
    text = big_text(200 * 1024)
    seen: dict[str, Any] = {}

    def script(request: ModelRequest, step: int) -> Reply:
        if step == 0:
            match = MARKER.search(request.messages[-1]["content"])
            assert match is not None
            seen["ref"] = match["ref"]
            return Reply(
                "reading",
                [
                    ToolCallSpec(
                        "read_artifact", {"ref": match["ref"], "offset": 150_000, "length": 1000}
                    ),
                    ToolCallSpec("read_artifact", {"ref": "ab" * 32, "offset": 0}),
                    ToolCallSpec("read_artifact", {"ref": "not a ref"}),
                    ToolCallSpec("read_artifact", {"ref": match["ref"], "offset": len(text)}),
                ],
            )
        seen["results"] = [m["content"] for m in request.messages if m["role"] == "tool"]
        return Reply("done")

    run_turns(home, ScriptedModel(script), [text], cwd=str(workspace), context_budget=10_000)
    exact, unknown, malformed, past = seen["results"]
    check(exact, text[150_000:151_000])
    assert unknown.startswith("error: no artifact " + "ab" * 32)
    assert malformed.startswith("error: ref must be an artifact's sha256")
    assert past.startswith(f"error: offset {len(text)} is past the end")


def test_read_artifact_is_a_read_only_builtin() -> None:
    tool = next(t for t in BUILTIN_TOOLS if t.name == "read_artifact")
    assert tool.side_effect == "read_only"
    assert tool.parameters["required"] == ["ref"]


def test_read_artifact_without_a_store_and_bounds(tmp_path: Path) -> None:
    tool = next(t for t in BUILTIN_TOOLS if t.name == "read_artifact")
    ctx = ToolContext("t", "c", 1, "k", tmp_path)
    with pytest.raises(ToolError, match="no artifact store"):
        asyncio.run(tool.run(ctx, {"ref": "ab" * 32}))
    values = {"ab" * 32: "0123456789"}
    ctx = ToolContext("t", "c", 1, "k", tmp_path, load_artifact=values.__getitem__)
    assert asyncio.run(tool.run(ctx, {"ref": "ab" * 32, "offset": 8, "length": 5})) == "89"
    for args, message in [
        ({"ref": "ab" * 32, "offset": -1}, "offset must be"),
        ({"ref": "ab" * 32, "length": 0}, "length must be"),
        ({"ref": "ab" * 32, "length": 10**9}, "length must be"),
        ({"ref": "ab" * 32, "offset": "3"}, "offset must be"),
    ]:
        with pytest.raises(ToolError, match=message):
            asyncio.run(tool.run(ctx, args))
