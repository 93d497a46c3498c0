"""Ownership: every route that names a thread answers 404 to any other principal, exactly as
for a thread that does not exist (``docs/service.md``, Identity).

The routes are read from the app itself, so a route added later is covered without editing
this test."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.routing import APIRoute

from tests.server.conftest import Api

PARAM = re.compile(r"{(\w+)}")


def _owned_routes(api: Api) -> list[tuple[str, str]]:
    routes = [
        (method, route.path)
        for route in api.app.routes
        if isinstance(route, APIRoute) and "{thread}" in route.path
        for method in sorted(route.methods)
    ]
    assert len(routes) >= 13  # the doc's routes that name a thread
    return routes


def _alices_thread(api: Api, workspace: str) -> dict[str, str]:
    """Real ids of alice's: a thread with a tool call, an event and an artifact."""
    thread = api.alice.post("/v1/threads", json={"cwd": workspace, "input": "big"}).json()
    thread_id = thread["thread_id"]
    api.wait(api.alice, thread_id, lambda d: d["status"] == "idle" and d["tool_calls"])
    detail = api.alice.get(f"/v1/threads/{thread_id}").json()
    events = api.alice.get(f"/v1/threads/{thread_id}/events", params={"limit": 1000}).json()
    digest = next(
        v["$artifact"]["sha256"]
        for e in events["events"]
        if isinstance(e["data"], dict)
        for v in e["data"].values()
        if isinstance(v, dict) and "$artifact" in v
    )
    assert api.alice.get(f"/v1/threads/{thread_id}/artifacts/{digest}").status_code == 200
    return {
        "thread": thread_id,
        "call_id": detail["tool_calls"][0]["call_id"],
        "ord": "2",
        "digest": digest,
    }


def _url(path: str, ids: dict[str, str]) -> str:
    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        assert name in ids, f"a route with a parameter this test cannot fill: {name}"
        return ids[name]

    return PARAM.sub(fill, path)


def _call(client: Any, method: str, url: str) -> Any:
    body = {"input": "hi", "text": "hi", "as": "done"} if method == "POST" else None
    if method == "POST" and ("/fork" in url or "/approve" in url or "/deny" in url):
        body = {}
    if method == "POST" and url.endswith("/cancel"):
        body = {}
    return client.request(method, url, json=body)


def test_another_principal_gets_404_on_every_route_of_a_thread(api: Api, workspace: str) -> None:
    ids = _alices_thread(api, workspace)
    before = api.alice.get(f"/v1/threads/{ids['thread']}/events").json()["last_ord"]
    for method, path in _owned_routes(api):
        url = _url(path, ids)
        response = _call(api.bob, method, url)
        assert response.status_code == 404, (method, path, response.text)
        error = response.json()["error"]
        assert error == {
            "status": 404,
            "type": "ThreadNotFound",
            "message": f"no thread {ids['thread']!r} in this store",
        }, (method, path)
        # word for word what a thread that does not exist gets
        ghost = _call(api.bob, method, _url(path, {**ids, "thread": "ghost"}))
        assert ghost.status_code == 404
        assert ghost.json()["error"]["message"] == "no thread 'ghost' in this store"
    # bob changed nothing
    assert api.alice.get(f"/v1/threads/{ids['thread']}/events").json()["last_ord"] == before
    # and alice, on the same routes, is never told her thread does not exist
    for method, path in _owned_routes(api):
        response = _call(api.alice, method, _url(path, ids))
        assert response.status_code != 404, (method, path, response.text)


@pytest.mark.parametrize("path", ["/v1/threads", "/v1/threads/x", "/v1/threads/x/events"])
def test_no_token_or_a_wrong_one_is_401(api: Api, path: str) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"}):
        response = api.anon.get(path, headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json()["error"]["type"] == "Unauthorized"
