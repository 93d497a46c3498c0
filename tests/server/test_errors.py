"""One error shape, the body-size limits, and no 500 on any input (``docs/service.md``)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.conftest import Api, make_app, serve_in_thread
from threadlog import open_store
from threadlog.server.app import ServerSettings

MiB = 1024 * 1024


def _error(response: Any, status: int, type: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["status"] == status and error["type"] == type
    assert isinstance(error["message"], str) and error["message"]
    return error


def test_a_body_over_the_limit_is_413_before_it_is_read(api: Api) -> None:
    body = b'{"title": "' + b"x" * MiB + b'"}'
    declared = api.alice.post(
        "/v1/threads", content=body, headers={"Content-Type": "application/json"}
    )
    _error(declared, 413, "PayloadTooLarge")

    def chunks() -> Iterator[bytes]:
        yield b'{"title": "'
        for _ in range(20):
            yield b"x" * 65536
        yield b'"}'

    chunked = api.alice.post(
        "/v1/threads", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert "content-length" not in chunked.request.headers  # sent chunked
    _error(chunked, 413, "PayloadTooLarge")
    assert api.alice.get("/v1/threads").json()["threads"] == []  # nothing was created


def test_input_over_the_limit_is_413(api: Api, workspace: str) -> None:
    big = "x" * (256 * 1024 + 1)
    _error(api.alice.post("/v1/threads", json={"input": big}), 413, "PayloadTooLarge")
    thread = api.alice.post("/v1/threads", json={"cwd": workspace}).json()["thread_id"]
    turns = api.alice.post(f"/v1/threads/{thread}/turns", json={"input": big})
    _error(turns, 413, "PayloadTooLarge")


def test_bad_json_is_400_and_wrong_shapes_are_422(api: Api, workspace: str) -> None:
    bad = api.alice.post(
        "/v1/threads", content=b"{nope", headers={"Content-Type": "application/json"}
    )
    _error(bad, 400, "BadRequest")
    thread = api.alice.post("/v1/threads", json={"cwd": workspace}).json()["thread_id"]
    for body in ({"input": 5}, {}, {"input": "x", "by": "mallory"}, [1], "text"):
        wrong = api.alice.post(f"/v1/threads/{thread}/turns", json=body)
        error = _error(wrong, 422, "ValidationError")
        assert error["errors"] and all("loc" in e and "msg" in e for e in error["errors"])
    _error(api.alice.get("/v1/threads", params={"limit": 0}), 422, "ValidationError")
    _error(api.alice.get("/v1/threads", params={"limit": "x"}), 422, "ValidationError")
    blank = api.alice.post(f"/v1/threads/{thread}/turns", json={"input": "  "})
    _error(blank, 422, "UsageError")
    resolve = api.alice.post(f"/v1/threads/{thread}/tool-calls/c/resolve", json={"as": "maybe"})
    _error(resolve, 422, "ValidationError")


def test_http_errors_have_the_shape(api: Api) -> None:
    _error(api.alice.get("/v1/nowhere"), 404, "NotFound")
    _error(api.alice.delete("/v1/threads"), 405, "MethodNotAllowed")
    _error(api.alice.get("/v1/threads/nope"), 404, "ThreadNotFound")


# -- fuzz: whatever arrives, the answer is never a 500 -------------------------------------
# (over a real server on loopback: Starlette's in-process TestClient warns about its httpx)

_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    _TEXT,
)
_JSON = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_TEXT, inner, max_size=3)),
    max_leaves=8,
)
_KEYS = ["input", "text", "title", "cwd", "at", "as", "note", "reason", "idempotency_key", "by"]
_BODY = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(_KEYS), _JSON, max_size=4),
    _JSON,
    st.binary(max_size=40),
)
_QUERY_KEYS = ["after", "before", "limit", "x"]


def _routes(app: Any) -> list[tuple[str, str]]:
    return [
        (method, route.path)
        for route in app.routes
        if isinstance(route, APIRoute)
        for method in sorted(route.methods)
    ]


def test_no_request_gets_a_500(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with open_store(str(tmp_path / "home")) as store:
        app = make_app(store, settings=ServerSettings(max_body=4096, max_input=512))
        with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as client:
            auth = {"Authorization": "Bearer tok-alice"}
            made = client.post(
                "/v1/threads", json={"cwd": str(workspace), "input": "pay"}, headers=auth
            )
            assert made.status_code == 201, made.text
            real = {"thread": made.json()["thread_id"], "ord": "1", "digest": "0" * 64}
            routes = _routes(app)
            seen: dict[int, int] = {}

            @settings(
                max_examples=150,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            )
            @given(
                route=st.sampled_from(routes),
                params=st.dictionaries(
                    st.sampled_from(["thread", "call_id", "ord", "digest"]),
                    st.one_of(_TEXT, st.sampled_from(sorted(real.values()))),
                ),
                query=st.dictionaries(st.sampled_from(_QUERY_KEYS), _TEXT, max_size=3),
                body=_BODY,
                token=st.sampled_from(
                    ["tok-alice", "tok-alice", "tok-alice", "tok-bob", "wrong", None]
                ),
                last_event=st.one_of(st.none(), _TEXT),
            )
            def check(
                route: tuple[str, str],
                params: dict[str, str],
                query: dict[str, str],
                body: Any,
                token: str | None,
                last_event: str | None,
            ) -> None:
                method, path = route
                for name in ("thread", "call_id", "ord", "digest"):
                    value = params.get(name, real.get(name, "x")) or "x"
                    path = path.replace("{" + name + "}", urllib.parse.quote(value, safe=""))
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                if (
                    last_event
                    and last_event.isascii()
                    and last_event.isprintable()
                    and last_event == last_event.strip()
                ):
                    headers["Last-Event-ID"] = last_event
                kwargs: dict[str, Any] = {"params": query, "headers": headers}
                if isinstance(body, bytes):
                    kwargs["content"] = body
                elif body is not None:
                    kwargs["json"] = body
                response = client.request(method, path, **kwargs)
                assert response.status_code < 500, (method, path, body, response.text)
                seen[response.status_code] = seen.get(response.status_code, 0) + 1
                if response.status_code >= 400:
                    error = response.json()["error"]
                    assert error["status"] == response.status_code
                    assert {"type", "message"} <= set(error)

            check()
            # the fuzz reached past authentication and validation
            assert {200, 401, 404, 422} <= set(seen), seen


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1", "example.com"])
def test_serve_refuses_open_mode_off_loopback(
    host: str, home: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from tests.server.conftest import FakeAuthenticator
    from threadlog.cli import cli
    from threadlog.server import serve

    monkeypatch.setattr(serve, "make_authenticator", lambda store: FakeAuthenticator({}))
    result = CliRunner().invoke(cli, ["serve", "--store", home, "--host", host, "--port", "0"])
    assert result.exit_code == 2, result.output
    assert "no token" in result.output


def test_head_answers_what_get_would_without_a_body(api: Api, workspace: str) -> None:
    """HEAD on any GET route (RFC 9110 §9.3.2): the GET's status and headers, no body; a
    live stream is ended once its headers are sent; a route with no GET is still 405."""
    thread = api.alice.post("/v1/threads", json={"cwd": workspace}).json()["thread_id"]
    for path in (
        "/healthz",
        "/v1/threads",
        f"/v1/threads/{thread}",
        f"/v1/threads/{thread}/events",
    ):
        got, head = api.alice.get(path), api.alice.head(path)
        assert head.status_code == got.status_code == 200, path
        assert head.content == b""
        assert head.headers["content-type"] == got.headers["content-type"]
        assert int(head.headers["content-length"]) == len(got.content), path
    missing = api.alice.head("/v1/threads/01a23ce8-795f-7eae-8396-2ac3a435e576")
    assert missing.status_code == 404 and missing.content == b""
    assert api.anon.head("/v1/threads").status_code == 401
    with httpx.Client(base_url=api.url, headers=api.alice.headers, timeout=10) as client:
        stream = client.head(f"/v1/threads/{thread}/stream")  # returns: not a stream left open
        assert stream.status_code == 200 and stream.content == b""
        assert stream.headers["content-type"].startswith("text/event-stream")
        assert client.get("/healthz").status_code == 200  # the connection still serves
    assert api.alice.head(f"/v1/threads/{thread}/turns").status_code == 405


@pytest.mark.parametrize("spec_version", ["2.3", "2.4"])
def test_head_of_a_stream_ends_at_its_headers_and_stops_the_stream(spec_version: str) -> None:
    """A stream with nothing to send yet (a live stream caught up: silent until the next
    record or heartbeat), or one that goes on sending, is answered at its headers and then
    stopped, whether the server tells a gone client by a disconnect (ASGI 2.3) or by a send
    that fails (2.4, where Starlette no longer listens for one)."""
    import asyncio

    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    from threadlog.server.errors import ErrorMiddleware

    closed: list[str] = []

    def route(name: str, first_after: float) -> Route:
        async def endpoint(request: Any) -> StreamingResponse:
            async def frames() -> Any:
                try:
                    await asyncio.sleep(first_after)
                    while True:
                        yield b": ping\n\n"
                        await asyncio.sleep(0.01)
                finally:
                    closed.append(name)

            return StreamingResponse(frames(), media_type="text/event-stream")

        return Route(f"/{name}", endpoint)

    app = ErrorMiddleware(
        Starlette(routes=[route("silent", 30.0), route("chatty", 0.0)]), max_body=1000
    )

    async def head(path: str) -> list[dict[str, Any]]:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": spec_version},
            "http_version": "1.1",
            "method": "HEAD",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [],
            "server": ("127.0.0.1", 80),
            "client": ("127.0.0.1", 1),
        }
        sent: list[dict[str, Any]] = []
        complete = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await complete.wait()  # (as uvicorn: a disconnect once the response is complete)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if complete.is_set():
                raise OSError("the response is complete")  # (what a server does, ASGI 2.4)
            sent.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                complete.set()

        await asyncio.wait_for(app(scope, receive, send), 5)  # the app returns
        return sent

    for path in ("/silent", "/chatty"):
        sent = asyncio.run(head(path))
        assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
        assert sent[0]["status"] == 200 and sent[1]["body"] == b""
    assert closed == ["silent", "chatty"]
