"""The service's routes against a real uvicorn server (``docs/service.md``)."""

from __future__ import annotations

from typing import Any

from tests.server.conftest import BIG, Api


def _create(api: Api, workspace: str, **body: Any) -> dict[str, Any]:
    response = api.alice.post("/v1/threads", json={"cwd": workspace, **body})
    assert response.status_code == 201, response.text
    return response.json()


def test_healthz_and_openapi(api: Api) -> None:
    assert api.anon.get("/healthz").json() == {"ok": True}
    spec = api.anon.get("/openapi.json").json()
    assert "/v1/threads/{thread}/events" in spec["paths"]
    assert api.anon.get("/docs").status_code == 404
    assert api.anon.get("/redoc").status_code == 404


def test_create_a_thread_and_run_a_turn(api: Api, workspace: str) -> None:
    summary = _create(api, workspace, title="hello", input="hi there")
    thread = summary["thread_id"]
    assert summary["principal"] == "alice"
    assert summary["title"] == "hello"
    detail = api.wait(api.alice, thread, lambda d: d["turns"] and d["status"] == "idle")
    assert [t["status"] for t in detail["turns"]] == ["completed"]
    assert detail["waiting"] == []
    listed = api.alice.get("/v1/threads").json()["threads"]
    assert [t["thread_id"] for t in listed] == [thread]
    assert api.bob.get("/v1/threads").json()["threads"] == []


def test_approval_flow(api: Api, workspace: str) -> None:
    thread = _create(api, workspace, input="pay the bill")["thread_id"]
    detail = api.wait(api.alice, thread, lambda d: d["waiting"])
    (call,) = detail["waiting"]
    assert call["needs"] == "decision" and call["tool"] == "pay"
    url = f"/v1/threads/{thread}/tool-calls/{call['call_id']}"
    assert api.alice.get(url).json()["status"] == "proposed"
    answer = api.alice.post(f"{url}/approve", json={"reason": "fine"})
    assert answer.status_code == 202, answer.text
    assert answer.json()["type"] == "tool_call.approved"
    detail = api.wait(api.alice, thread, lambda d: d["status"] == "idle")
    assert detail["tool_calls"][0]["status"] == "finished"
    assert detail["tool_calls"][0]["decided_by"] == "alice"
    again = api.alice.post(f"{url}/approve", json={})
    assert again.status_code == 409
    assert again.json()["error"]["type"] == "InvalidTransition"
    missing = api.alice.post(f"/v1/threads/{thread}/tool-calls/nope/deny", json={})
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "NotFound"


def test_cancel_and_steer(api: Api, workspace: str) -> None:
    thread = _create(api, workspace, input="pay now")["thread_id"]
    api.wait(api.alice, thread, lambda d: d["waiting"])
    steered = api.alice.post(f"/v1/threads/{thread}/steer", json={"text": "quickly"})
    assert steered.status_code == 202 and steered.json()["type"] == "input.queued"
    cancelled = api.alice.post(f"/v1/threads/{thread}/cancel", json={})
    assert cancelled.status_code == 202, cancelled.text
    assert cancelled.json()["cancelled"] is True
    detail = api.alice.get(f"/v1/threads/{thread}").json()
    assert detail["turns"][-1]["status"] == "aborted"
    again = api.alice.post(f"/v1/threads/{thread}/cancel")
    assert again.status_code == 409


def test_events_paging(api: Api, workspace: str) -> None:
    thread = _create(api, workspace, input="hi")["thread_id"]
    api.wait(api.alice, thread, lambda d: d["status"] == "idle" and d["turns"])
    everything = api.alice.get(f"/v1/threads/{thread}/events", params={"limit": 1000}).json()
    ords = [e["ord"] for e in everything["events"]]
    head = everything["last_ord"]
    assert ords == list(range(1, head + 1))
    assert everything["next_after"] is None and everything["prev_before"] is None
    page = api.alice.get(f"/v1/threads/{thread}/events", params={"after": 1, "limit": 2}).json()
    assert [e["ord"] for e in page["events"]] == [2, 3]
    assert (page["first"], page["last"], page["next_after"], page["prev_before"]) == (2, 3, 3, 2)
    back = api.alice.get(f"/v1/threads/{thread}/events", params={"before": head, "limit": 3}).json()
    assert [e["ord"] for e in back["events"]] == [head - 3, head - 2, head - 1]
    start = api.alice.get(f"/v1/threads/{thread}/events", params={"before": 3}).json()
    assert [e["ord"] for e in start["events"]] == [1, 2]
    one = api.alice.get(f"/v1/threads/{thread}/events/2").json()
    assert one == everything["events"][1]
    assert api.alice.get(f"/v1/threads/{thread}/events/{head + 1}").status_code == 404
    both = api.alice.get(f"/v1/threads/{thread}/events", params={"after": 1, "before": 3})
    assert both.status_code == 422


def test_stream_resumes_after_last_event_id(api: Api, workspace: str) -> None:
    thread = _create(api, workspace, input="hi")["thread_id"]
    api.wait(api.alice, thread, lambda d: d["status"] == "idle" and d["turns"])
    with api.alice.stream(
        "GET", f"/v1/threads/{thread}/stream", headers={"Last-Event-ID": "3"}
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        text = response.read().decode()
    assert text.startswith("id: 4\n")
    bad = api.alice.get(f"/v1/threads/{thread}/stream", headers={"Last-Event-ID": "x"})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "BadRequest"


def test_fork(api: Api, workspace: str) -> None:
    thread = _create(api, workspace, input="hi")["thread_id"]
    api.wait(api.alice, thread, lambda d: d["status"] == "idle" and d["turns"])
    child = api.alice.post(f"/v1/threads/{thread}/fork", json={"at": 1, "title": "again"})
    assert child.status_code == 201, child.text
    assert child.json()["forked_from"] == thread
    assert child.json()["principal"] == "alice"
    assert api.alice.post(f"/v1/threads/{thread}/fork", json={"at": "nope"}).status_code == 422


def test_artifacts_served_only_through_a_referencing_thread(api: Api, workspace: str) -> None:
    thread = _create(api, workspace, input="big one")["thread_id"]
    api.wait(api.alice, thread, lambda d: d["status"] == "idle" and d["turns"])
    events = api.alice.get(f"/v1/threads/{thread}/events", params={"limit": 1000}).json()
    digests = [
        v["$artifact"]["sha256"]
        for e in events["events"]
        if isinstance(e["data"], dict)
        for v in e["data"].values()
        if isinstance(v, dict) and "$artifact" in v
    ]
    assert digests
    url = f"/v1/threads/{thread}/artifacts/{digests[0]}"
    blob = api.alice.get(url)
    assert blob.status_code == 200
    assert blob.headers["etag"] == f'"{digests[0]}"'
    assert str(BIG) in blob.headers["content-length"] or len(blob.content) > BIG
    assert api.alice.get(url, headers={"If-None-Match": blob.headers["etag"]}).status_code == 304
    other = _create(api, workspace)["thread_id"]
    assert api.alice.get(f"/v1/threads/{other}/artifacts/{digests[0]}").status_code == 404
    assert api.alice.get(f"/v1/threads/{thread}/artifacts/{'0' * 64}").status_code == 404
