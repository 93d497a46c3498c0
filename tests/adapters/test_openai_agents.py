"""`ThreadlogSession` against the cases of the Agents SDK's own session tests
(``tests/memory/test_session.py`` and ``test_session_limit.py`` upstream), adapted: the same
intent, our code, on the in-memory and the embedded store."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.conftest import require

require("agents")

from agents import Agent, Runner, Session, SessionSettings, set_tracing_disabled  # noqa: E402
from agents.testing import ScriptedModel  # noqa: E402
from openai.types.responses import ResponseOutputMessage, ResponseOutputText  # noqa: E402

from threadlog import open_store  # noqa: E402
from threadlog.adapters.openai_agents import ThreadlogSession  # noqa: E402
from threadlog.store.protocol import Store  # noqa: E402

set_tracing_disabled(True)  # no exporter: the SDK would send traces to its service


@pytest.fixture(params=["memory", "embedded"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    where = "memory://" if request.param == "memory" else str(tmp_path / "home")
    with open_store(where) as opened:
        yield opened


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def text(content: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="1",
        type="message",
        role="assistant",
        content=[ResponseOutputText(text=content, type="output_text", annotations=[])],
        status="completed",
    )


def messages(*contents: str) -> list[Any]:
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": c} for i, c in enumerate(contents)]


def test_it_is_a_session(store: Store) -> None:
    assert isinstance(ThreadlogSession("s", store), Session)


def test_add_get_and_clear(store: Store) -> None:
    session = ThreadlogSession("direct_test", store)
    run(session.add_items(messages("Hello", "Hi there!")))
    got = run(session.get_items())
    assert [(i["role"], i["content"]) for i in got] == [
        ("user", "Hello"),
        ("assistant", "Hi there!"),
    ]
    run(session.clear_session())
    assert run(session.get_items()) == []
    run(session.add_items(messages("again")))
    assert [i["content"] for i in run(session.get_items())] == ["again"]


def test_pop_item(store: Store) -> None:
    session = ThreadlogSession("pop_test", store)
    assert run(session.pop_item()) is None
    run(session.add_items(messages("Hello", "Hi there!", "How are you?")))
    assert run(session.pop_item())["content"] == "How are you?"
    assert [i["content"] for i in run(session.get_items())] == ["Hello", "Hi there!"]
    assert run(session.pop_item())["content"] == "Hi there!"
    assert run(session.pop_item())["content"] == "Hello"
    assert run(session.pop_item()) is None
    assert run(session.get_items()) == []


def test_pop_affects_only_its_session(store: Store) -> None:
    one, two = ThreadlogSession("one", store), ThreadlogSession("two", store)
    run(one.add_items(messages("a1", "a2")))
    run(two.add_items(messages("b1")))
    assert run(one.pop_item())["content"] == "a2"
    assert [i["content"] for i in run(two.get_items())] == ["b1"]
    assert [i["content"] for i in run(one.get_items())] == ["a1"]


def test_get_items_with_limit(store: Store) -> None:
    session = ThreadlogSession("count_test", store)
    contents = ["Message 1", "Response 1", "Message 2", "Response 2", "Message 3", "Response 3"]
    run(session.add_items(messages(*contents)))
    assert [i["content"] for i in run(session.get_items())] == contents
    assert [i["content"] for i in run(session.get_items(limit=2))] == contents[-2:]
    assert [i["content"] for i in run(session.get_items(limit=4))] == contents[-4:]
    assert [i["content"] for i in run(session.get_items(limit=10))] == contents
    assert run(session.get_items(limit=0)) == []


def test_session_settings_limit_is_the_default_and_an_explicit_limit_wins(store: Store) -> None:
    session = ThreadlogSession("settings", store, session_settings=SessionSettings(limit=3))
    assert session.session_settings == SessionSettings(limit=3)
    assert ThreadlogSession("x", store).session_settings == SessionSettings()
    run(session.add_items(messages(*[f"m{i}" for i in range(10)])))
    assert [i["content"] for i in run(session.get_items())] == ["m7", "m8", "m9"]
    assert len(run(session.get_items(limit=5))) == 5


def test_get_items_with_limit_reads_only_the_tail(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = ThreadlogSession("long", store)
    for i in range(200):
        run(session.add_items(messages(f"m{i}")))
    run(session.pop_item())
    run(session.get_items(limit=1))  # folded: from now on only new records are read
    reads: list[int] = []
    real_read: Callable[..., Any] = store.read

    def counting_read(*args: Any, **kwargs: Any) -> Any:
        found = real_read(*args, **kwargs)
        reads.append(len(found))
        return found

    monkeypatch.setattr(store, "read", counting_read)
    assert [i["content"] for i in run(session.get_items(limit=2))] == ["m197", "m198"]
    assert sum(reads) <= 3


def test_unicode_and_special_characters(store: Store) -> None:
    session = ThreadlogSession("unicode", store)
    odd = ["こんにちは", "😊👍", "Привет", "'; DROP TABLE x; --", '{"$artifact": 1}', "\x00 nul"]
    run(session.add_items(messages(*odd)))
    assert [i["content"] for i in run(session.get_items())] == odd
    reopened = ThreadlogSession("unicode", store)
    assert [i["content"] for i in run(reopened.get_items())] == odd


def test_large_items_go_to_artifacts_and_come_back(store: Store) -> None:
    session = ThreadlogSession("big", store)
    run(session.add_items(messages("x" * 200_000, "small")))
    assert [len(i["content"]) for i in run(session.get_items())] == [200_000, 5]
    assert run(session.pop_item())["content"] == "small"


def test_concurrent_sessions_on_one_id_lose_nothing(store: Store) -> None:
    sessions = [ThreadlogSession("shared", store) for _ in range(4)]

    def add(session: ThreadlogSession, n: int) -> None:
        for i in range(10):
            run(session.add_items([{"role": "user", "content": f"{n}-{i}"}]))

    workers = [threading.Thread(target=add, args=(s, n)) for n, s in enumerate(sessions)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    got = run(ThreadlogSession("shared", store).get_items())
    assert sorted(i["content"] for i in got) == sorted(
        f"{n}-{i}" for n in range(4) for i in range(10)
    )
    popped = {run(s.pop_item())["content"] for s in sessions}
    assert len(popped) == 4  # no item popped twice
    assert len(run(sessions[0].get_items())) == 36


def test_a_session_survives_reopening_the_store(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    with open_store(home) as store:
        session = ThreadlogSession("persist", store)
        run(session.add_items(messages("one", "two", "three")))
        run(session.pop_item())
    with open_store(home) as store:
        assert [i["content"] for i in run(ThreadlogSession("persist", store).get_items())] == [
            "one",
            "two",
        ]


@pytest.mark.parametrize("method", ["run", "run_streamed"])
def test_the_runner_keeps_history_in_the_session(store: Store, method: str) -> None:
    session = ThreadlogSession("runner", store)
    model = ScriptedModel()
    agent = Agent(name="test", model=model)

    async def turn(question: str) -> Any:
        if method == "run":
            return await Runner.run(agent, question, session=session)
        result = Runner.run_streamed(agent, question, session=session)
        async for _ in result.stream_events():
            pass
        return result

    model.enqueue([text("San Francisco")])
    assert run(turn("What city is the Golden Gate Bridge in?")).final_output == "San Francisco"
    model.enqueue([text("California")])
    assert run(turn("What state is it in?")).final_output == "California"
    assert len(model.calls[-1].input) > 1  # the second turn saw the first
    items = run(session.get_items())
    assert items[0]["content"] == "What city is the Golden Gate Bridge in?"
    assert len(items) == 4


def test_different_sessions_keep_separate_histories(store: Store) -> None:
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    one, two = ThreadlogSession("s1", store), ThreadlogSession("s2", store)
    model.enqueue([text("I like cats.")])
    run(Runner.run(agent, "I like cats.", session=one))
    model.enqueue([text("I like dogs.")])
    run(Runner.run(agent, "I like dogs.", session=two))
    model.enqueue([text("You said cats")])
    run(Runner.run(agent, "What did I say?", session=one))
    seen = str(model.calls[-1].input)
    assert "cats" in seen and "dogs" not in seen
