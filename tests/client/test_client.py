"""threadlog.client: every call sends its route of docs/service.md and decodes the answer,
errors map to ServiceError, retries happen only when they are safe. Each test runs against
the sync and the async client (they share one core; this keeps them equal)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.client._service import URL, Script, error, record, run
from threadlog.client import Client, ServiceError, ServiceUnreachable
from threadlog.client._core import RETRIES
from threadlog.errors import ThreadlogError, UsageError
from threadlog.model.envelope import Record

KINDS = ["sync", "async"]

SUMMARY = {"thread_id": "t1", "title": "x", "status": "idle", "last_ord": 3}
ACK = {"ord": 7, "event_id": "e7", "type": "tool_call.approved"}

# (call, args, kwargs) -> (method, path, query, body, answer, expected result)
CASES: list[tuple[str, tuple[Any, ...], dict[str, Any], str, str, dict[str, str], Any, Any]] = [
    ("threads", (), {"limit": 5}, "GET", "/v1/threads", {"limit": "5"}, None, SUMMARY),
    ("create_thread", (), {"title": "x", "input": "hi"}, "POST", "/v1/threads", {},
     {"title": "x", "input": "hi"}, SUMMARY),
    ("create_thread", (), {}, "POST", "/v1/threads", {}, {}, SUMMARY),
    ("thread", ("t 1/x",), {}, "GET", "/v1/threads/t%201%2Fx", {}, None, SUMMARY),
    ("events", ("t1",), {"after": 3, "limit": 2}, "GET", "/v1/threads/t1/events",
     {"after": "3", "limit": "2"}, None, None),
    ("events", ("t1",), {"before": 9}, "GET", "/v1/threads/t1/events",
     {"before": "9", "limit": "100"}, None, None),
    ("event", ("t1", 4), {}, "GET", "/v1/threads/t1/events/4", {}, None, None),
    ("submit", ("t1", "go"), {"idempotency_key": "k1"}, "POST", "/v1/threads/t1/turns", {},
     {"input": "go"}, ACK),
    ("steer", ("t1", "left"), {}, "POST", "/v1/threads/t1/steer", {}, {"text": "left"}, ACK),
    ("cancel", ("t1",), {}, "POST", "/v1/threads/t1/cancel", {}, {},
     {"cancelled": True, "turn_id": "u1"}),
    ("approve", ("t1", "c1"), {"reason": "ok"}, "POST",
     "/v1/threads/t1/tool-calls/c1/approve", {}, {"reason": "ok"}, ACK),
    ("deny", ("t1", "c1"), {}, "POST", "/v1/threads/t1/tool-calls/c1/deny", {}, {},
     {"queued": "m1", "holder": "pid 7"}),
    ("resolve", ("t1", "c1", "done"), {"note": "n"}, "POST",
     "/v1/threads/t1/tool-calls/c1/resolve", {}, {"as": "done", "note": "n"}, ACK),
    ("fork", ("t1",), {"at": 12, "title": "b"}, "POST", "/v1/threads/t1/fork", {},
     {"at": 12, "title": "b"}, SUMMARY),
    ("fork", ("t1",), {"at": "0193-entry"}, "POST", "/v1/threads/t1/fork", {},
     {"at": "0193-entry"}, SUMMARY),
]  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("call", "args", "kwargs", "method", "path", "query", "body", "answer"),
    CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)],
)
def test_each_call_sends_its_route_and_returns_the_answer(
    kind: str,
    call: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    method: str,
    path: str,
    query: dict[str, str],
    body: Any,
    answer: Any,
) -> None:
    if call == "threads":
        reply = httpx.Response(200, json={"threads": [answer]})
    elif call == "events":
        reply = httpx.Response(200, json={"events": [record(4), record(5)], "last_ord": 5})
    elif call == "event":
        reply = httpx.Response(200, json=record(4))
    else:
        reply = httpx.Response(201 if call in ("create_thread", "fork") else 202, json=answer)
    script = Script(reply)

    result = run(kind, script, call, *args, **kwargs)

    (request,) = script.requests
    assert request.method == method
    assert request.url.raw_path.decode().split("?")[0] == path
    assert dict(request.url.params) == query
    assert script.bodies() == [body]
    assert request.headers["accept"] == "application/json"
    if call == "threads":
        assert result == [answer]
    elif call == "events":
        assert [r.ord for r in result] == [4, 5]
        assert all(isinstance(r, Record) for r in result)
    elif call == "event":
        assert result == Record(**record(4))
    else:
        assert result == answer
    if call == "submit":
        assert request.headers["idempotency-key"] == "k1"


@pytest.mark.parametrize("kind", KINDS)
def test_artifact_returns_the_bytes(kind: str) -> None:
    script = Script(httpx.Response(200, content=b"\x00raw", headers={"etag": '"sha256:ab"'}))
    assert run(kind, script, "artifact", "t1", "sha256:ab") == b"\x00raw"
    assert script.requests[0].url.raw_path == b"/v1/threads/t1/artifacts/sha256%3Aab"


@pytest.mark.parametrize("kind", KINDS)
def test_submit_makes_a_key_and_retries_a_lost_answer_with_the_same_key(kind: str) -> None:
    script = Script(
        httpx.ReadError("connection reset"),
        httpx.Response(202, json={**ACK, "type": "turn.started", "duplicate": True}),
    )
    sleeps: list[float] = []
    result = run(kind, script, "submit", "t1", "go", sleeps=sleeps)
    first, second = (r.headers["idempotency-key"] for r in script.requests)
    assert first == second
    assert uuid.UUID(first).version == 4
    assert result["duplicate"] is True
    assert len(sleeps) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_each_submit_gets_its_own_key(kind: str) -> None:
    script = Script(httpx.Response(202, json=ACK), httpx.Response(202, json=ACK))
    run(kind, script, "submit", "t1", "a")
    run(kind, script, "submit", "t1", "a")
    keys = {r.headers["idempotency-key"] for r in script.requests}
    assert len(keys) == 2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("call", ["steer", "approve", "cancel"])
def test_a_lost_answer_is_not_resent_when_that_could_act_twice(kind: str, call: str) -> None:
    script = Script(httpx.ReadError("connection reset"), httpx.Response(202, json=ACK))
    args = {"steer": ("t1", "x"), "approve": ("t1", "c1"), "cancel": ("t1",)}[call]
    with pytest.raises(ServiceUnreachable) as caught:
        run(kind, script, call, *args)
    assert len(script.requests) == 1
    assert caught.value.status == 0 and caught.value.type == "ReadError"
    assert "may have been applied" in str(caught.value) and URL in str(caught.value)


@pytest.mark.parametrize("kind", KINDS)
def test_a_refused_connection_is_retried_then_named(kind: str) -> None:
    script = Script(*[httpx.ConnectError("connection refused")] * (RETRIES + 1))
    sleeps: list[float] = []
    with pytest.raises(ServiceUnreachable) as caught:
        run(kind, script, "steer", "t1", "x", sleeps=sleeps)
    assert len(script.requests) == RETRIES + 1  # never sent, so safe to resend even steer
    assert len(sleeps) == RETRIES
    for attempt, delay in enumerate(sleeps):  # 0.1 s doubling, jittered to half..all of it
        assert 0.05 * 2**attempt <= delay <= 0.1 * 2**attempt
    message = str(caught.value)
    assert URL in message and "threadlog serve" in message
    assert isinstance(caught.value, ThreadlogError)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("reply", "status", "type_", "message"),
    [
        (lambda _: error(404, "ThreadNotFound", "no thread 'x'"), 404, "ThreadNotFound", "no thread 'x'"),
        (lambda _: error(401, "Unauthorized", "no token"), 401, "Unauthorized", "no token"),
        (lambda _: error(409, "InvalidTransition", "call c1 is finished"), 409, "InvalidTransition",
         "call c1 is finished"),
        (lambda _: httpx.Response(502, text="<html>Bad Gateway</html>"), 502, "HTTPError",
         "<html>Bad Gateway</html>"),
        (lambda _: httpx.Response(500), 500, "HTTPError", "Internal Server Error"),
    ],
)  # fmt: skip
def test_errors_map_to_service_error(
    kind: str, reply: Callable[[object], httpx.Response], status: int, type_: str, message: str
) -> None:
    with pytest.raises(ServiceError) as caught:
        run(kind, Script(reply), "thread", "x")
    exc = caught.value
    assert (exc.status, exc.type, exc.message) == (status, type_, message)
    assert str(status) in str(exc) and type_ in str(exc)


@pytest.mark.parametrize("kind", KINDS)
def test_a_validation_error_says_which_field(kind: str) -> None:
    fields = [{"loc": ["body", "input"], "msg": "field required"}]
    reply = error(422, "ValidationError", "bad body", errors=fields)
    with pytest.raises(ServiceError) as caught:
        run(kind, Script(reply), "submit", "t1", "x")
    assert caught.value.errors == fields


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("call", "args", "reply"),
    [
        ("event", ("t1", 1), lambda _: httpx.Response(200, json={"nope": 1})),
        ("events", ("t1",), lambda _: httpx.Response(200, json={"events": [{"ord": 1}]})),
        ("threads", (), lambda _: httpx.Response(200, json=[1, 2])),
        ("thread", ("t1",), lambda _: httpx.Response(200, text="not json")),
    ],
)
def test_an_answer_that_breaks_the_contract_is_an_error(
    kind: str, call: str, args: tuple[Any, ...], reply: Callable[[object], httpx.Response]
) -> None:
    with pytest.raises(ServiceError) as caught:
        run(kind, Script(reply), call, *args)
    assert caught.value.type == "InvalidResponse"


@pytest.mark.parametrize("kind", KINDS)
def test_events_refuses_after_and_before_together(kind: str) -> None:
    script = Script()
    with pytest.raises(UsageError):
        run(kind, script, "events", "t1", after=1, before=5)
    assert script.requests == []


def test_the_token_comes_from_the_argument_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def auth(token: str | None) -> str | None:
        script = Script(httpx.Response(200, json={"threads": []}))
        with Client(URL, token, transport=script.transport()) as client:
            client.threads()
        value: str | None = script.requests[0].headers.get("authorization")
        return value

    monkeypatch.delenv("THREADLOG_TOKEN", raising=False)
    assert auth(None) is None
    assert auth("tl_abc") == "Bearer tl_abc"
    monkeypatch.setenv("THREADLOG_TOKEN", "tl_env")
    assert auth(None) == "Bearer tl_env"
    assert auth("tl_arg") == "Bearer tl_arg"


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("http://h:1", "/v1/threads"),
        ("http://h:1/", "/v1/threads"),
        ("https://h/tl", "/tl/v1/threads"),
        ("https://h/tl/", "/tl/v1/threads"),
    ],
)
def test_the_url_may_end_with_a_slash_or_have_a_prefix(url: str, path: str) -> None:
    script = Script(httpx.Response(200, json={"threads": []}))
    with Client(url, transport=script.transport()) as client:
        client.threads()
    assert script.requests[0].url.path == path


@pytest.mark.parametrize("url", ["127.0.0.1:8765", "ftp://h/", "http://", "/tmp/home"])
def test_a_url_that_is_not_a_service_is_refused(url: str) -> None:
    with pytest.raises(UsageError, match="not a service URL"):
        Client(url)
