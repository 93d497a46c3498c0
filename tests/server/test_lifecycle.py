"""The app's lifespan: threads a dead server left mid-turn are resumed at start; sessions
close at stop; any backend works (``docs/service.md``)."""

from __future__ import annotations

import time

import httpx

from tests.server.conftest import FakeHub, make_app, serve_in_thread
from threadlog import open_store
from threadlog._clock import new_id
from threadlog.model.events import SessionOpened, TurnStarted
from threadlog.store.protocol import Store

AUTH = {"Authorization": "Bearer tok-alice"}


def _left_running(store: Store, source: str) -> str:
    """A thread as a process of ``source`` leaves it when killed just after a turn started."""
    thread = store.create_thread("alice")
    session = new_id()
    store.append(thread, SessionOpened(session_id=session, pid=1, host="gone", source=source))
    store.append(thread, TurnStarted(turn_id=new_id(), input="hello", session=session))
    return thread


def test_a_turn_left_running_by_a_server_is_resumed_at_start(store: Store) -> None:
    by_server = _left_running(store, "api")
    by_cli = _left_running(store, "cli")
    app = make_app(store)
    with serve_in_thread(app) as url, httpx.Client(base_url=url, headers=AUTH) as client:
        for _ in range(200):
            detail = client.get(f"/v1/threads/{by_server}").json()
            if detail["status"] == "idle":
                break
            time.sleep(0.05)
        assert detail["status"] == "idle"
        assert detail["turns"][-1]["status"] == "completed"
        types = [e["type"] for e in client.get(f"/v1/threads/{by_server}/events").json()["events"]]
        assert "thread.resumed" in types
        # a thread another kind of process left is not the server's to resume
        other = client.get(f"/v1/threads/{by_cli}/events").json()
        assert [e["type"] for e in other["events"]] == [
            "thread.created",
            "session.opened",
            "turn.started",
        ]
    # the stop ran every live session's close protocol and ended the streams
    assert app.state.hub.closed == "shutdown"
    assert store.read(by_server)[-1].type == "session.closed"


def test_the_service_over_the_in_memory_store(tmp_path: object) -> None:
    with open_store("memory://") as store:
        app = make_app(store)
        assert isinstance(app.state.hub, FakeHub)
        with serve_in_thread(app) as url, httpx.Client(base_url=url, headers=AUTH) as client:
            made = client.post("/v1/threads", json={"title": "mem", "input": "hi"})
            assert made.status_code == 201, made.text
            thread = made.json()["thread_id"]
            for _ in range(200):
                detail = client.get(f"/v1/threads/{thread}").json()
                if detail["status"] == "idle" and detail["turns"]:
                    break
                time.sleep(0.05)
            assert detail["turns"][0]["status"] == "completed"
            assert [t["thread_id"] for t in client.get("/v1/threads").json()["threads"]] == [thread]
            page = client.get(f"/v1/threads/{thread}/events", params={"before": 3}).json()
            assert [e["ord"] for e in page["events"]] == [1, 2]
            assert page["last_ord"] == detail["last_ord"]
            forked = client.post(f"/v1/threads/{thread}/fork", json={})
            assert forked.status_code == 201 and forked.json()["principal"] == "alice"
