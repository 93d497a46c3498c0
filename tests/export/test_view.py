"""The thread view (`threadlog.export.view`): the one projection the browser UI and the HTML
export draw. A thread with two turns, a compaction, a label, a plan, a memory and a branch
with its summary is folded, and each part of the view is checked against the log."""

from __future__ import annotations

import asyncio

from threadlog import open_store
from threadlog.export import export_thread
from threadlog.export.view import thread_view
from threadlog.runtime import Reply, Runtime, ScriptedModel


def _thread(home: str) -> str:
    model = ScriptedModel(lambda request, step: Reply(f"echo {len(request.messages)}"))

    async def main() -> str:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create("alice", title="view")
            for text in ("one", "two", "three", "four"):
                await session.submit(text)
                await session.wait_idle(10)
            state = session.state
            first_user = next(iter(state.turns.values()))
            entry = next(
                r.id
                for r in await asyncio.to_thread(runtime.store.read, session.thread_id)
                if r.ord == first_user.started_ord
            )
            await session.label(entry, "start here")
            await session.set_plan(["read", "write"], reason="first plan")
            await session.remember("the user likes short answers", scope="thread")
            assert await session.compact(keep_last=2) is not None
            await session.branch(entry, summary="tried turns two to four")
            await session.submit("again")
            await session.wait_idle(10)
            return session.thread_id

    return asyncio.run(main())


def test_the_view_of_a_branched_compacted_thread(home: str) -> None:
    thread = _thread(home)
    with open_store(home) as store:
        records = store.read(thread)
        page = export_thread(store, thread, "html")
    view = thread_view(records)
    entries = view["entries"]
    assert entries[0]["kind"] == "root" and entries[0]["active"]
    labelled = [e for e in entries if e["label"]]
    assert [e["label"] for e in labelled] == ["start here"]
    point = labelled[0]
    assert point["branch"] and point["active"] and point["children"] == 2
    active = [e for e in entries if e["active"]]
    # the leaf went back to the first user message: the summary and the new turn follow it
    assert [e["kind"] for e in active[1:]] == ["user", "branch_summary", "user", "assistant"]
    assert active[2]["text"] == "tried turns two to four"
    off = [e for e in entries if not e["active"]]
    assert {e["kind"] for e in off} >= {"user", "assistant", "compaction"}
    assert all(e["depth"] == 1 for e in off)
    assert sum(e["leaf"] for e in entries) == 1 and active[-1]["leaf"]
    # depth first: the old branch's entries come before the new one's, each in log order
    branch_ords = [e["ord"] for e in entries[entries.index(point) + 1 :]]
    assert branch_ords[: len(off)] == sorted(e["ord"] for e in off)
    assert view["plan"] == ["read", "write"] and view["plan_version"] == 1
    assert view["plan_source"]["reason"] == "first plan"
    (memory,) = view["memories"]
    assert memory["fact"] == "the user likes short answers" and memory["scope"] == "thread"
    assert memory["source_ord"] is not None
    assert view["usage"] == {} or "input_tokens" in view["usage"]
    assert view["status"] == "idle" and view["queued"] == [] and view["calls"] == {}
    # the export draws the same view: the label, the summary, the plan and the memory
    for text in ("start here", "tried turns two to four", "first plan", "short answers"):
        assert text in page
    assert page.count('<section class="msg ') == 4
