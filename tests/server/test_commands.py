"""Idempotent submit, and commands for a thread another process holds (``docs/service.md``)."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

import httpx

from tests.server.conftest import Api, make_app, serve_in_thread
from threadlog import open_store
from threadlog.server.app import ServerSettings
from threadlog.store.protocol import Mailbox, Store


def _turns_started(store: Store, thread: str) -> list[str]:
    store.flush()
    return [r.id for r in store.read(thread) if r.type == "turn.started"]


def test_the_same_key_twice_runs_one_turn(api: Api, store: Store, workspace: str) -> None:
    thread = api.alice.post("/v1/threads", json={"cwd": workspace}).json()["thread_id"]
    url = f"/v1/threads/{thread}/turns"
    first = api.alice.post(url, json={"input": "hello"}, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == 202, first.text
    assert first.json()["duplicate"] is False and first.json()["type"] == "turn.started"
    # at once (the turn may still run), then once it has ended; by header and by body
    second = api.alice.post(url, json={"input": "hello"}, headers={"Idempotency-Key": "k-1"})
    api.wait(api.alice, thread, lambda d: d["status"] == "idle")
    third = api.alice.post(url, json={"input": "hello", "idempotency_key": "k-1"})
    for again in (second, third):
        assert again.status_code == 202, again.text
        assert again.json() == {**first.json(), "duplicate": True}
    assert _turns_started(store, thread) == [first.json()["event_id"]]
    detail = api.alice.get(f"/v1/threads/{thread}").json()
    assert [t["status"] for t in detail["turns"]] == ["completed"]
    # the session is unharmed: another key runs another turn
    other = api.alice.post(url, json={"input": "more"}, headers={"Idempotency-Key": "k-2"})
    assert other.status_code == 202 and other.json()["duplicate"] is False
    api.wait(api.alice, thread, lambda d: len(d["turns"]) == 2 and d["status"] == "idle")
    # a key is the thread's: the same key on another thread is another turn
    elsewhere = api.alice.post("/v1/threads", json={"cwd": workspace}).json()["thread_id"]
    moved = api.alice.post(
        f"/v1/threads/{elsewhere}/turns",
        json={"input": "hello"},
        headers={"Idempotency-Key": "k-1"},
    )
    assert moved.json()["duplicate"] is False
    assert moved.json()["event_id"] != first.json()["event_id"]


def test_a_key_survives_a_server_restart(store: Store, workspace: str) -> None:
    headers = {"Authorization": "Bearer tok-alice", "Idempotency-Key": "restart"}
    with serve_in_thread(make_app(store)) as url, httpx.Client(base_url=url) as client:
        thread = client.post("/v1/threads", json={"cwd": workspace}, headers=headers).json()
        thread_id = thread["thread_id"]
        first = client.post(f"/v1/threads/{thread_id}/turns", json={"input": "hi"}, headers=headers)
    with serve_in_thread(make_app(store)) as url, httpx.Client(base_url=url) as client:
        again = client.post(f"/v1/threads/{thread_id}/turns", json={"input": "hi"}, headers=headers)
    assert again.json() == {**first.json(), "duplicate": True}
    assert _turns_started(store, thread_id) == [first.json()["event_id"]]


def test_keys_of_the_wrong_shape(api: Api, workspace: str) -> None:
    thread = api.alice.post("/v1/threads", json={"cwd": workspace}).json()["thread_id"]
    url = f"/v1/threads/{thread}/turns"
    differ = api.alice.post(
        url, json={"input": "x", "idempotency_key": "a"}, headers={"Idempotency-Key": "b"}
    )
    assert differ.status_code == 422 and differ.json()["error"]["type"] == "UsageError"
    long = api.alice.post(url, json={"input": "x"}, headers={"Idempotency-Key": "k" * 300})
    assert long.status_code == 422


def test_a_thread_held_by_another_process_gets_the_command_in_its_mailbox(
    store: Store, home: str, workspace: str
) -> None:
    # idle sessions are closed at once, so that another process can take the thread
    settings = ServerSettings(session_idle=0.0, reap_interval=0.05)
    headers = {"Authorization": "Bearer tok-alice"}
    app = make_app(store, settings=settings)
    with serve_in_thread(app) as url, httpx.Client(base_url=url, headers=headers) as client:
        thread = client.post("/v1/threads", json={"cwd": workspace}).json()["thread_id"]
        deadline = time.monotonic() + 10
        while app.state.host.live(thread) is not None:
            assert time.monotonic() < deadline, "the idle session was not closed"
            time.sleep(0.02)
        ctx = multiprocessing.get_context("spawn")
        ready, done = ctx.Event(), ctx.Event()
        holder = ctx.Process(target=_hold, args=(home, thread, ready, done))
        holder.start()
        try:
            assert ready.wait(30)
            answer = client.post(f"/v1/threads/{thread}/turns", json={"input": "queued hi"})
            assert answer.status_code == 202, answer.text
            assert set(answer.json()) == {"queued", "holder"}
            cancel = client.post(f"/v1/threads/{thread}/cancel", json={})
            assert cancel.status_code == 409  # no turn runs: refused here, nothing posted
            assert isinstance(store, Mailbox)
            (message,) = store.pending(thread)
            assert message.command.to_data() == {
                "kind": "input",
                "text": "queued hi",
                "by": "alice",
            }
        finally:
            done.set()
            holder.join(30)


def _hold(home: str, thread: str, ready: Any, done: Any) -> None:
    """Another process: holds the thread's lease until told to stop."""
    with open_store(home) as store:
        store.acquire(thread)
        ready.set()
        done.wait(30)
