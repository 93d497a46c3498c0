"""`threadlog.export` used as a library: no command line, the same bytes as ``threadlog export``.

One thread made by a scripted agent holds a user turn with markup in it, a tool call whose
result is large enough to be stored as an artifact, and the model's answer; every format is
checked against the log it came from.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest
from click.testing import CliRunner

from threadlog import ThreadNotFound, UsageError, open_store
from threadlog.cli import cli
from threadlog.export import (
    FORMATS,
    export_records,
    export_thread,
    load_records,
    messages,
    to_html,
    to_jsonl,
    to_messages_json,
)
from threadlog.model.refs import is_artifact_ref
from threadlog.runtime import Reply, Runtime, ScriptedModel, Tool, ToolCallSpec, ToolContext

BIG = "z" * 200_000
ASK = "<script>alert('hi')</script> & fetch it"
MISSING = "0190b7e2-4c1a-7d2e-9f00-1a2b3c4d5e6f"


async def _fetch(ctx: ToolContext, args: dict[str, Any]) -> str:
    return BIG


FETCH = Tool("fetch", "Return a large text.", {"type": "object"}, "read_only", _fetch)


@pytest.fixture
def thread(home: str) -> str:
    model = ScriptedModel(
        [Reply("fetching", [ToolCallSpec("fetch", {"what": "<all>"})]), Reply("got it")]
    )

    async def main() -> str:
        async with Runtime(home, model=model, tools=[FETCH]) as runtime:
            session = await runtime.create("alice", title="Fetch & <show>")
            await session.submit(ASK)
            await session.wait_idle(10)
            return session.thread_id

    return asyncio.run(main())


def test_formats() -> None:
    assert FORMATS == ("jsonl", "messages", "html", "otlp")


def test_load_records_loads_artifacts(home: str, thread: str) -> None:
    with open_store(home) as store:
        raw = store.read(thread)
        loaded = load_records(store, thread)
    (finished,) = [r for r in raw if r.type == "tool_call.finished"]
    assert is_artifact_ref(finished.data["result"])  # the log holds a reference ...
    assert [r.id for r in loaded] == [r.id for r in raw]
    (same,) = [r for r in loaded if r.type == "tool_call.finished"]
    assert same.data["result"] == BIG  # ... the export the data itself
    assert same._replace(data=finished.data) == finished  # nothing else changed


def test_messages_are_every_conversation_message_in_log_order(home: str, thread: str) -> None:
    with open_store(home) as store:
        records = load_records(store, thread)
        text = export_thread(store, thread, "messages")
    found = messages(records)
    assert json.loads(text) == found
    assert text == to_messages_json(records) == export_records(records, "messages")
    assert [m["role"] for m in found] == ["user", "assistant", "tool", "assistant"]
    by_id = {r.id: r for r in records}
    for message in found:
        record = by_id[message["entry"]]
        assert (message["ord"], message["parent"]) == (record.ord, record.parent)
    assert found[0]["content"] == ASK
    assert [c["name"] for c in found[1]["tool_calls"]] == ["fetch"]
    assert found[2]["content"] == BIG  # the artifact, loaded: no placeholder
    assert found[3]["content"] == "got it"
    assert messages([]) == []


def test_jsonl_is_every_record_with_artifacts_loaded(home: str, thread: str) -> None:
    with open_store(home) as store:
        records = load_records(store, thread)
        text = export_thread(store, thread)  # jsonl is the default
    assert text == to_jsonl(records) == export_records(records, "jsonl")
    lines = text.splitlines()
    assert text.endswith("\n") and len(lines) == len(records)
    assert [json.loads(line) for line in lines] == [
        json.loads(json.dumps(r.to_dict())) for r in records
    ]
    assert BIG in text
    assert to_jsonl([]) == ""


def test_html_escapes_everything_from_the_log(home: str, thread: str) -> None:
    with open_store(home) as store:
        records = load_records(store, thread)
        page = export_thread(store, thread, "html")
    assert page == to_html(records) == export_records(records, "html")
    assert page.startswith("<!doctype html>") and page.endswith("\n")
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&#x27;hi&#x27;)&lt;/script&gt; &amp; fetch it" in page
    assert "<h1>Fetch &amp; &lt;show&gt;</h1>" in page
    assert f"<p>{len(records)} records · principal alice</p>" in page
    assert "→ fetch({&quot;what&quot;:&quot;&lt;all&gt;&quot;})" in page
    assert page.count('<div class="m ') == 4


@pytest.mark.parametrize("fmt", ["jsonl", "messages", "html"])
def test_the_command_writes_what_the_library_returns(home: str, thread: str, fmt: str) -> None:
    result = CliRunner().invoke(cli, ["export", thread, "--format", fmt, "--home", home])
    assert result.exit_code == 0, result.output
    with open_store(home) as store:
        assert result.stdout == export_thread(store, thread, fmt)  # type: ignore[arg-type]


def test_refusals(home: str, thread: str) -> None:
    with open_store(home) as store:
        with pytest.raises(UsageError, match="unknown export format 'pdf'"):
            export_thread(store, thread, "pdf")  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="unknown export format"):
            export_records(store.read(thread), "pdf")  # type: ignore[arg-type]
        with pytest.raises(ThreadNotFound):
            export_thread(store, MISSING, "messages")


def test_importing_it_loads_no_command_line_library() -> None:
    code = (
        "import sys, threadlog\n"
        "assert 'threadlog.export' not in sys.modules, 'import threadlog loaded the export'\n"
        "import threadlog.export\n"
        "loaded = sorted(m for m in ('click', 'rich') if m in sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
