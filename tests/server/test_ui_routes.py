"""The browser UI's routes: its static files (with their Content-Security-Policy) and the JSON
routes it needs beyond the API (``docs/ui.md``); ownership of the two that name a thread is
checked by ``test_isolation.py``, which walks every route."""

from __future__ import annotations

from importlib import resources
from typing import Any

import httpx

from tests.cli.test_illegal_record import damaged_thread
from tests.server.conftest import Api, make_app, serve_in_thread
from threadlog import open_store


def _create(api: Api, workspace: str, **body: Any) -> str:
    response = api.alice.post("/v1/threads", json={"cwd": workspace, **body})
    assert response.status_code == 201, response.text
    thread: str = response.json()["thread_id"]
    return thread


def test_the_ui_is_served_from_the_package_under_a_strict_csp(api: Api) -> None:
    root = api.anon.get("/", follow_redirects=False)
    assert root.status_code == 307 and root.headers["location"] == "/ui/"
    page = api.anon.get("/ui/")  # no token needed for the page itself: it asks for one
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert '<script type="module" src="/ui/app.js">' in page.text
    assert "<script>" not in page.text  # nothing inline
    for name in ("app.js", "thread.js", "api.js", "dom.js", "stream.js"):
        script = api.anon.get(f"/ui/{name}")
        assert script.headers["content-type"].startswith("text/javascript")
        assert "innerHTML" not in script.text and "eval(" not in script.text
    assert api.anon.get("/ui/app.css").headers["content-type"].startswith("text/css")
    missing = api.anon.get("/ui/secret.py")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "NotFound"
    assert api.anon.get("/ui/..%2Fapp.py").status_code == 404
    shipped = {p.name for p in (resources.files("threadlog.server") / "ui").iterdir()}
    assert {"index.html", "app.js", "thread.js", "api.js", "dom.js", "stream.js"} <= shipped


def test_the_ui_list_has_each_threads_state_and_only_the_callers(api: Api, workspace: str) -> None:
    assert api.anon.get("/v1/ui/threads").status_code == 401
    waiting = _create(api, workspace, title="pay", input="pay it")
    api.wait(api.alice, waiting, lambda d: d["waiting"])
    idle = _create(api, workspace, title="hi", input="hello")
    api.wait(api.alice, idle, lambda d: d["status"] == "idle" and d["turns"])
    rows = {r["thread_id"]: r for r in api.alice.get("/v1/ui/threads").json()["threads"]}
    assert rows[waiting]["state"] == "waiting" and rows[idle]["state"] == "idle"
    assert rows[idle]["title"] == "hi" and "model" in rows[idle]
    assert api.bob.get("/v1/ui/threads").json()["threads"] == []


def test_the_view_has_the_tree_cards_and_usage_and_the_leaf_moves(api: Api, workspace: str) -> None:
    thread = _create(api, workspace, input="pay it")
    api.wait(api.alice, thread, lambda d: d["waiting"])
    view = api.alice.get(f"/v1/threads/{thread}/view").json()
    assert view["status"] == "waiting" and view["active_turn"]
    (call,) = view["calls"].values()
    assert call["tool"] == "pay" and call["state"] == "waiting" and call["needs"] == "decision"
    kinds = [e["kind"] for e in view["entries"]]
    assert kinds == ["root", "user", "assistant"]
    assert view["entries"][2]["calls"] == [call["call_id"]]
    url = f"/v1/threads/{thread}/tool-calls/{call['call_id']}/approve"
    assert api.alice.post(url, json={"reason": "ok"}).status_code == 202
    api.wait(api.alice, thread, lambda d: d["status"] == "idle")
    view = api.alice.get(f"/v1/threads/{thread}/view").json()
    card = view["calls"][call["call_id"]]
    assert card["state"] == "finished" and card["result_text"] == '{"paid":5}'
    assert card["decision"] == {"as": "approved", "by": "alice", "reason": "ok"}
    assert card["proposed_ts"] and card["started_ts"] and card["finished_ts"]
    first_user = next(e for e in view["entries"] if e["kind"] == "user")

    # continue from the first user message: the old branch stays, a new one starts there
    moved = api.alice.post(f"/v1/threads/{thread}/leaf", json={"to": first_user["id"]})
    assert moved.status_code == 202, moved.text
    assert moved.json()["type"] == "leaf.moved"
    api.alice.post(f"/v1/threads/{thread}/turns", json={"input": "hello again"})
    api.wait(api.alice, thread, lambda d: d["status"] == "idle" and len(d["turns"]) == 2)
    view = api.alice.get(f"/v1/threads/{thread}/view").json()
    point = next(e for e in view["entries"] if e["id"] == first_user["id"])
    assert point["branch"] and point["children"] == 2 and point["active"]
    old = [e for e in view["entries"] if not e["active"]]
    assert old and all(e["depth"] == 1 for e in old)
    assert [e["text"] for e in view["entries"] if e["active"] and e["kind"] == "user"] == [
        "pay it",
        "hello again",
    ]
    bad = api.alice.post(f"/v1/threads/{thread}/leaf", json={"to": "nope"})
    assert bad.status_code == 422
    # no turn runs: the progress stream ends at once (the page opens it when one starts)
    idle = api.alice.get(f"/v1/threads/{thread}/progress")
    assert idle.status_code == 200
    assert idle.headers["content-type"].startswith("text/event-stream")
    assert idle.text == 'event: end\ndata: {"reason":"idle"}\n\n'


def test_a_damaged_thread_is_listed_as_damaged(home: str) -> None:
    thread, bad = damaged_thread(home)
    with open_store(home) as store:
        app = make_app(store, tokens={})  # open mode: principal local sees every thread
        with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as http:
            (row,) = http.get("/v1/ui/threads").json()["threads"]
            assert row["thread_id"] == thread and row["state"] == "damaged"
            assert f"ord {bad}" in row["damage"]
            view = http.get(f"/v1/threads/{thread}/view")
            assert view.status_code == 409
            assert view.json()["error"]["type"] in ("IntegrityError", "InvalidTransition")
