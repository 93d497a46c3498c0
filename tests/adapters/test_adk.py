"""`ThreadlogSessionService` through ADK's session-service contract: create / get / list /
delete, append_event, and state by scope (``app:``, ``user:``, session, ``temp:`` never
stored); the cases of ADK's own session-service tests, adapted."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.conftest import require

require("google.adk")

from google.adk.errors.already_exists_error import AlreadyExistsError  # noqa: E402
from google.adk.errors.session_not_found_error import SessionNotFoundError  # noqa: E402
from google.adk.events.event import Event  # noqa: E402
from google.adk.events.event_actions import EventActions  # noqa: E402
from google.adk.sessions.base_session_service import GetSessionConfig  # noqa: E402
from google.genai import types  # noqa: E402

from threadlog import open_store  # noqa: E402
from threadlog.adapters.adk import ThreadlogSessionService  # noqa: E402
from threadlog.store.protocol import Store  # noqa: E402


@pytest.fixture(params=["memory", "embedded"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    where = "memory://" if request.param == "memory" else str(tmp_path / "home")
    with open_store(where) as opened:
        yield opened


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def event(text: str, delta: dict[str, Any] | None = None, ts: float | None = None) -> Event:
    made = Event(
        invocation_id="inv",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=delta or {}),
    )
    if ts is not None:
        made.timestamp = ts
    return made


def test_create_get_list_delete(store: Store) -> None:
    service = ThreadlogSessionService(store)
    made = run(service.create_session(app_name="app", user_id="u1", state={"k": 1}))
    assert made.id and made.state == {"k": 1} and made.events == []
    named = run(service.create_session(app_name="app", user_id="u1", session_id="s2"))
    assert named.id == "s2"
    with pytest.raises(AlreadyExistsError):
        run(service.create_session(app_name="app", user_id="u1", session_id="s2"))
    run(service.create_session(app_name="app", user_id="u2", session_id="s3"))
    run(service.create_session(app_name="other", user_id="u1", session_id="s4"))
    got = run(service.get_session(app_name="app", user_id="u1", session_id=made.id))
    assert got is not None and got.id == made.id and got.state == {"k": 1}
    assert run(service.get_session(app_name="app", user_id="u2", session_id=made.id)) is None
    listed = run(service.list_sessions(app_name="app", user_id="u1"))
    assert {s.id for s in listed.sessions} == {made.id, "s2"}
    assert all(s.events == [] for s in listed.sessions)
    everyone = run(service.list_sessions(app_name="app"))
    assert {s.id for s in everyone.sessions} == {made.id, "s2", "s3"}
    run(service.delete_session(app_name="app", user_id="u1", session_id="s2"))
    assert run(service.get_session(app_name="app", user_id="u1", session_id="s2")) is None
    assert {s.id for s in run(service.list_sessions(app_name="app", user_id="u1")).sessions} == {
        made.id
    }
    again = run(service.create_session(app_name="app", user_id="u1", session_id="s2"))
    assert again.events == []  # the id may be used again after a delete


def test_append_event_and_state_by_scope(store: Store) -> None:
    service = ThreadlogSessionService(store)
    state = {"app:theme": "dark", "user:lang": "fr", "temp:scratch": 1, "k": "v"}
    session = run(service.create_session(app_name="app", user_id="u1", state=state))
    assert session.state == {"app:theme": "dark", "user:lang": "fr", "k": "v"}
    delta = {"app:n": 1, "user:seen": True, "temp:step": "x", "count": 1}
    appended = run(service.append_event(session, event("hello", delta)))
    assert "temp:step" not in appended.actions.state_delta
    assert session.state["temp:step"] == "x"  # in memory, for the rest of the invocation
    assert session.state["count"] == 1 and len(session.events) == 1
    got = run(service.get_session(app_name="app", user_id="u1", session_id=session.id))
    assert got is not None
    assert got.state == {
        "app:theme": "dark",
        "app:n": 1,
        "user:lang": "fr",
        "user:seen": True,
        "k": "v",
        "count": 1,
    }
    assert [e.content.parts[0].text for e in got.events] == ["hello"]
    assert got.events[0].id == appended.id
    # app state is the app's, user state the user's, across sessions
    other = run(service.create_session(app_name="app", user_id="u2"))
    assert other.state == {"app:theme": "dark", "app:n": 1}
    mine = run(service.create_session(app_name="app", user_id="u1"))
    assert mine.state == {"app:theme": "dark", "app:n": 1, "user:lang": "fr", "user:seen": True}
    assert run(service.get_user_state(app_name="app", user_id="u1")) == {
        "lang": "fr",
        "seen": True,
    }
    assert run(service.get_user_state(app_name="app", user_id="nobody")) == {}


def test_appending_the_same_event_twice_stores_it_once(store: Store) -> None:
    service = ThreadlogSessionService(store)
    session = run(service.create_session(app_name="app", user_id="u"))
    once = event("hi", {"user:n": 1})
    run(service.append_event(session, once))
    stale = run(service.get_session(app_name="app", user_id="u", session_id=session.id))
    run(service.append_event(stale, once))
    got = run(service.get_session(app_name="app", user_id="u", session_id=session.id))
    assert got is not None and len(got.events) == 1


def test_recent_events_and_after_timestamp(store: Store) -> None:
    service = ThreadlogSessionService(store)
    session = run(service.create_session(app_name="app", user_id="u"))
    for i in range(5):
        run(service.append_event(session, event(f"e{i}", ts=1000.0 + i)))

    def texts(config: GetSessionConfig) -> list[str]:
        got = run(
            service.get_session(app_name="app", user_id="u", session_id=session.id, config=config)
        )
        return [e.content.parts[0].text for e in got.events]

    assert texts(GetSessionConfig(num_recent_events=2)) == ["e3", "e4"]
    assert texts(GetSessionConfig(num_recent_events=0)) == []
    assert texts(GetSessionConfig(after_timestamp=1002.0)) == ["e2", "e3", "e4"]
    listed = run(service.list_sessions(app_name="app", user_id="u")).sessions
    assert listed[0].last_update_time == 1004.0


def test_partial_events_are_not_stored_and_unknown_sessions_refused(store: Store) -> None:
    service = ThreadlogSessionService(store)
    session = run(service.create_session(app_name="app", user_id="u"))
    partial = event("streaming")
    partial.partial = True
    run(service.append_event(session, partial))
    got = run(service.get_session(app_name="app", user_id="u", session_id=session.id))
    assert got is not None and got.events == []
    run(service.delete_session(app_name="app", user_id="u", session_id=session.id))
    with pytest.raises(SessionNotFoundError):
        run(service.append_event(session, event("late")))


def test_sessions_survive_reopening_the_store(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    with open_store(home) as store:
        service = ThreadlogSessionService(store)
        session = run(service.create_session(app_name="app", user_id="u", session_id="s"))
        run(service.append_event(session, event("one", {"app:x": 1, "y": 2})))
    with open_store(home) as store:
        got = run(
            ThreadlogSessionService(store).get_session(app_name="app", user_id="u", session_id="s")
        )
        assert got is not None and got.state == {"app:x": 1, "y": 2}
        assert [e.content.parts[0].text for e in got.events] == ["one"]
