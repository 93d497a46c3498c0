"""The CLI's --url mode: tail, send, approve, deny, resolve, cancel through the client, with a
mock transport under the client the commands make (`threadlog.cli.remote.make_client`)."""

from __future__ import annotations

import json

import httpx
import orjson
import pytest
from click.testing import CliRunner

from tests.client._service import URL, Script, end, error, events, frame, record
from threadlog.cli import cli, remote
from threadlog.cli import inspect as _inspect  # noqa: F401 - registers the commands
from threadlog.cli import live as _live  # noqa: F401
from threadlog.client import Client

ACK = {"ord": 9, "event_id": "e9", "type": "tool_call.approved"}


@pytest.fixture
def service(monkeypatch: pytest.MonkeyPatch) -> Script:
    """The scripted service every --url command of the test talks to (fill ``replies``)."""
    script = Script()
    tokens: list[str | None] = []

    def make_client(url: str, token: str | None) -> Client:
        assert url == URL
        tokens.append(token)
        return Client(url, token, transport=script.transport(), sleep=lambda _: None)

    monkeypatch.setattr(remote, "make_client", make_client)
    monkeypatch.delenv("THREADLOG_TOKEN", raising=False)
    return script


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [*args, "--url", URL])
    return result.exit_code, result.stdout, result.stderr


def test_tail_prints_the_records_as_the_local_tail_does(service: Script) -> None:
    service.replies += [
        events(frame(3), frame(4), cut=True),
        events(frame(5), end("deleted")),
    ]
    code, out, err = run("tail", "t1", "--after", "2")
    assert code == 0, err
    expected = b"".join(orjson.dumps(record(n)) + b"\n" for n in (3, 4, 5))
    assert out.encode() == expected
    assert [r.headers["last-event-id"] for r in service.requests] == ["2", "4"]


def test_tail_of_an_unknown_thread_is_a_usage_error(service: Script) -> None:
    service.replies.append(error(404, "ThreadNotFound", "no thread 'nope' in this store"))
    code, out, err = run("tail", "nope")
    assert code == 2
    assert err == "error: no thread 'nope' in this store (404 ThreadNotFound)\n"
    assert out == ""


@pytest.mark.parametrize(
    ("args", "path", "body"),
    [
        (["send", "t1", "also the changelog"], "/v1/threads/t1/steer",
         {"text": "also the changelog"}),
        (["approve", "t1", "c1", "--reason", "fine"], "/v1/threads/t1/tool-calls/c1/approve",
         {"reason": "fine"}),
        (["deny", "t1", "c1"], "/v1/threads/t1/tool-calls/c1/deny", {}),
        (["resolve", "t1", "c1", "--as", "retry", "--note", "n"],
         "/v1/threads/t1/tool-calls/c1/resolve", {"as": "retry", "note": "n"}),
    ],
)  # fmt: skip
def test_commands_act_through_the_service(
    service: Script, args: list[str], path: str, body: dict[str, str]
) -> None:
    service.replies.append(httpx.Response(202, json=ACK))
    code, out, err = run(*args)
    assert code == 0, err
    assert out == "recorded tool_call.approved at ord 9\n"
    (request,) = service.requests
    assert (request.method, request.url.path) == ("POST", path)
    assert service.bodies() == [body]


def test_json_output_is_the_local_shape_plus_what_the_service_adds(service: Script) -> None:
    service.replies.append(httpx.Response(202, json=ACK))
    code, out, _ = run("approve", "t1", "c1", "--json")
    assert code == 0
    assert json.loads(out) == {"applied": True, **ACK}
    service.replies.append(httpx.Response(202, json={"queued": "m1", "holder": "pid 7 on h"}))
    code, out, _ = run("approve", "t1", "c1", "--json")
    assert json.loads(out) == {"applied": False, "queued": "m1", "holder": "pid 7 on h"}
    service.replies.append(httpx.Response(202, json={"queued": "m2", "holder": "pid 7 on h"}))
    code, out, _ = run("deny", "t1", "c1")
    assert out == "the thread is open in pid 7 on h: sent to its inbox (m2)\n"


def test_by_is_ignored_with_a_note(service: Script) -> None:
    service.replies.append(httpx.Response(202, json=ACK))
    code, _, err = run("approve", "t1", "c1", "--by", "mallory")
    assert code == 0
    assert "--by is ignored with --url" in err
    assert service.bodies() == [{}]  # no `by` in the request: the service uses the token's
    service.replies.append(httpx.Response(202, json=ACK))
    code, _, err = run("approve", "t1", "c1")
    assert err == ""


def test_cancel(service: Script) -> None:
    service.replies.append(httpx.Response(202, json={"cancelled": True, "turn_id": "u3"}))
    code, out, _ = run("cancel", "t1")
    assert (code, out) == (0, "turn u3 cancelled\n")
    assert service.requests[0].url.path == "/v1/threads/t1/cancel"
    service.replies.append(lambda _: error(409, "InvalidTransition", "no turn is running"))
    code, out, err = run("cancel", "t1")
    assert code == 2
    assert "no turn is running" in err


def test_the_token_option_and_its_environment_variable(
    service: Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    service.replies.append(httpx.Response(202, json=ACK))
    run("approve", "t1", "c1", "--token", "tl_opt")
    monkeypatch.setenv("THREADLOG_TOKEN", "tl_env")
    service.replies.append(httpx.Response(202, json=ACK))
    run("approve", "t1", "c1")
    auth = [r.headers.get("authorization") for r in service.requests]
    assert auth == ["Bearer tl_opt", "Bearer tl_env"]


def test_a_service_that_is_not_there_is_exit_3(service: Script) -> None:
    service.replies += [httpx.ConnectError("connection refused")] * 4
    code, _, err = run("send", "t1", "hi")
    assert code == 3
    assert err.startswith(f"error: cannot reach the threadlog service at {URL}")


def test_without_url_the_commands_stay_local(service: Script, home: str) -> None:
    code = CliRunner().invoke(cli, ["tail", "nope", "--home", home]).exit_code
    assert code == 2  # the local store's "no thread": the service was never asked
    assert service.requests == []
