"""`ThreadlogSaver` under a real LangGraph graph: resumed state, deltas, a second process's
view, and delete."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, TypedDict

from tests.adapters.conftest import require

require("langgraph.graph")

from langgraph.graph import END, START, StateGraph  # noqa: E402

from threadlog import open_store  # noqa: E402
from threadlog.adapters.langgraph import CHECKPOINT, ThreadlogSaver  # noqa: E402


class State(TypedDict):
    log: Annotated[list[str], operator.add]
    big: str
    count: int


def _graph(saver: ThreadlogSaver):  # type: ignore[no-untyped-def]
    def step(state: State) -> dict[str, object]:
        return {"log": [f"step {state.get('count', 0)}"], "count": state.get("count", 0) + 1}

    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=saver)


def test_a_graph_resumes_from_the_log_and_stores_only_changed_channels(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    config = {"configurable": {"thread_id": "user-42"}}
    with open_store(home) as store:
        graph = _graph(ThreadlogSaver(store))
        graph.invoke({"log": [], "big": "x" * 10_000, "count": 0}, config)
        graph.invoke({"log": ["again"]}, config)
    with open_store(home) as store:  # a new process: the saver folds the log again
        saver = ThreadlogSaver(store)
        state = _graph(saver).get_state(config)
        assert state.values["log"] == ["step 0", "again", "step 1"]
        assert state.values["count"] == 2 and state.values["big"] == "x" * 10_000
        (thread_id,) = [t for n, t in saver._names.names() if n == "user-42"]
        records = [r for r in store.read(thread_id) if r.type == CHECKPOINT]
        carrying_big = [r for r in records if any(b[0] == "big" for b in r.data["blobs"])]
        assert len(records) >= 4 and len(carrying_big) == 1  # written once, never again
        assert store.verify(thread_id).ok
        saver.delete_thread("user-42")
        assert saver.get_tuple(config) is None
        _graph(saver).invoke({"log": [], "big": "", "count": 0}, config)  # the name again
        assert saver.get_tuple(config) is not None


def test_an_async_graph_uses_the_async_methods() -> None:
    import asyncio

    with open_store("memory://") as store:
        saver = ThreadlogSaver(store)
        graph = _graph(saver)
        config = {"configurable": {"thread_id": "async"}}

        async def twice() -> dict[str, object]:
            await graph.ainvoke({"log": [], "big": "", "count": 0}, config)
            await graph.ainvoke({"log": ["more"]}, config)
            state = await graph.aget_state(config)
            return dict(state.values)

        values = asyncio.run(twice())
        assert values["log"] == ["step 0", "more", "step 1"] and values["count"] == 2
        history = list(saver.list(config))
        assert len(history) >= 4
        assert history[0].checkpoint["id"] > history[-1].checkpoint["id"]  # newest first
