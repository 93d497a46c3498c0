"""The cases of ADK's own ``tests/unittests/sessions/test_session_service.py``, adapted to
`ThreadlogSessionService` (on the in-memory and the embedded store): the same intent, our
code. ``test_adk.py`` beside this module has the rest."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.conftest import require

require("google.adk")

from google.adk.events.event import Event  # noqa: E402
from google.adk.events.event_actions import EventActions  # noqa: E402
from google.adk.sessions.base_session_service import GetSessionConfig  # noqa: E402
from google.genai import types  # noqa: E402

from threadlog import open_store  # noqa: E402
from threadlog.adapters.adk import ThreadlogSessionService  # noqa: E402


@pytest.fixture(params=["memory", "embedded"])
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ThreadlogSessionService]:
    where = "memory://" if request.param == "memory" else str(tmp_path / "home")
    with open_store(where) as store:
        yield ThreadlogSessionService(store)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_get_empty_session(service: ThreadlogSessionService) -> None:
    assert run(service.get_session(app_name="my_app", user_id="u", session_id="123")) is None


def test_create_get_session(service: ThreadlogSessionService) -> None:
    session = run(service.create_session(app_name="my_app", user_id="u", state={"key": "v"}))
    assert (session.app_name, session.user_id, session.state) == ("my_app", "u", {"key": "v"})
    assert session.id
    got = run(service.get_session(app_name="my_app", user_id="u", session_id=session.id))
    assert got == session
    run(service.delete_session(app_name="my_app", user_id="u", session_id=session.id))
    assert run(service.get_session(app_name="my_app", user_id="u", session_id=session.id)) is None


def test_create_and_list_sessions(service: ThreadlogSessionService) -> None:
    ids = [f"session{i}" for i in range(5)]
    for session_id in ids:
        run(service.create_session(app_name="my_app", user_id="u", session_id=session_id))
    listed = run(service.list_sessions(app_name="my_app", user_id="u")).sessions
    assert [s.id for s in listed] == ids


def test_session_state(service: ThreadlogSessionService) -> None:
    s11 = run(
        service.create_session(
            app_name="a", user_id="user1", state={"key11": "value11"}, session_id="s11"
        )
    )
    run(
        service.create_session(
            app_name="a", user_id="user1", state={"key12": "v"}, session_id="s12"
        )
    )
    run(service.create_session(app_name="a", user_id="user2", session_id="s2"))
    delta = {"app:key": "value", "user:key1": "value1", "temp:key": "temp", "key11": "new"}
    run(service.append_event(s11, Event(author="user", actions=EventActions(state_delta=delta))))
    assert s11.state["app:key"] == "value" and s11.state["key11"] == "new"
    assert s11.state["user:key1"] == "value1"
    s12 = run(service.get_session(app_name="a", user_id="user1", session_id="s12"))
    assert s12.state == {"key12": "v", "app:key": "value", "user:key1": "value1"}
    s2 = run(service.get_session(app_name="a", user_id="user2", session_id="s2"))
    assert s2.state == {"app:key": "value"}  # another user's state is not visible
    s11 = run(service.get_session(app_name="a", user_id="user1", session_id="s11"))
    assert s11.state == {"key11": "new", "app:key": "value", "user:key1": "value1"}


def test_create_new_session_will_merge_states(service: ThreadlogSessionService) -> None:
    s1 = run(service.create_session(app_name="a", user_id="u", state={"k1": "v1"}, session_id="1"))
    delta = {"app:key": "value", "user:key1": "value1", "temp:key": "temp"}
    run(service.append_event(s1, Event(author="user", actions=EventActions(state_delta=delta))))
    s2 = run(service.create_session(app_name="a", user_id="u", state={}, session_id="2"))
    assert s2.state == {"app:key": "value", "user:key1": "value1"}


def test_append_event_bytes(service: ThreadlogSessionService) -> None:
    session = run(service.create_session(app_name="a", user_id="u"))
    content = types.Content(
        role="user", parts=[types.Part.from_bytes(data=b"test_image_data", mime_type="image/png")]
    )
    grounding = types.GroundingMetadata(
        search_entry_point=types.SearchEntryPoint(sdk_blob=b"test_sdk_blob")
    )
    run(
        service.append_event(
            session,
            Event(invocation_id="i", author="user", content=content, grounding_metadata=grounding),
        )
    )
    assert session.events[0].content == content
    got = run(service.get_session(app_name="a", user_id="u", session_id=session.id))
    assert len(got.events) == 1
    assert got.events[0].content == content
    assert got.events[0].grounding_metadata == grounding


def test_append_event_complete(service: ThreadlogSessionService) -> None:
    session = run(service.create_session(app_name="a", user_id="u"))
    event = Event(
        invocation_id="invocation",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text="test_text")]),
        turn_complete=True,
        partial=False,
        actions=EventActions(artifact_delta={"file": 0}, transfer_to_agent="agent", escalate=True),
        long_running_tool_ids={"tool1"},
        error_code="error_code",
        error_message="error_message",
        interrupted=True,
    )
    run(service.append_event(session, event))
    assert run(service.get_session(app_name="a", user_id="u", session_id=session.id)) == session


def test_get_session_with_config(service: ThreadlogSessionService) -> None:
    session = run(service.create_session(app_name="a", user_id="u"))
    for i in range(1, 6):
        run(service.append_event(session, Event(author="user", timestamp=i)))

    def events(**config: Any) -> list[Event]:
        got = run(
            service.get_session(
                app_name="a", user_id="u", session_id=session.id, config=GetSessionConfig(**config)
            )
        )
        return list(got.events)

    assert len(events()) == 5
    recent = events(num_recent_events=3)
    assert len(recent) == 3 and recent[0].timestamp == 3
    after = events(after_timestamp=4.0)
    assert len(after) == 2 and after[0].timestamp == 4.0
    assert events(after_timestamp=50) == []
    assert len(events(after_timestamp=4.0, num_recent_events=3)) == 2
