"""The HTTP providers against local stub servers, and the SSE parser on its own.

Each test starts a real HTTP/1.1 server on 127.0.0.1 (an ephemeral port) with
``asyncio.start_server``; it records the request and answers with a canned event stream,
chunked or close-delimited, optionally cut short. Nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Literal

import httpx
import pytest

from threadlog.runtime.models import Completed, Model, ModelRequest, ProviderError, TextDelta
from threadlog.runtime.providers import AnthropicMessages, OpenAIChat
from threadlog.runtime.providers._sse import SSEEvent, SSEParser

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine


PHRASES = {s.value: s.phrase for s in HTTPStatus}


# --- a stub HTTP server ------------------------------------------------------------------


@dataclass
class Canned:
    """One response: status, body pieces written one at a time, and how the body is framed."""

    pieces: list[bytes] = field(default_factory=list)
    status: int = 200
    content_type: str = "text/event-stream"
    framing: Literal["chunked", "close", "length"] = "chunked"
    complete: bool = True
    """False: close the connection without ending the body (no last chunk)."""


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class Stub:
    """An HTTP/1.1 server on 127.0.0.1 that answers each connection with the next `Canned`."""

    def __init__(self, *responses: Canned) -> None:
        self.responses = list(responses)
        self.received: list[Received] = []
        self.url = ""
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Stub:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            request_line, *header_lines = head.split("\r\n")
            method, path, _ = request_line.split(" ", 2)
            headers = {}
            for line in header_lines:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            raw = await reader.readexactly(int(headers.get("content-length", "0")))
            self.received.append(Received(method, path, headers, json.loads(raw) if raw else None))
            canned = self.responses.pop(0)
            lines = [
                f"HTTP/1.1 {canned.status} {PHRASES.get(canned.status, 'Error')}",
                f"content-type: {canned.content_type}",
                "connection: close",
            ]
            if canned.framing == "chunked":
                lines.append("transfer-encoding: chunked")
            elif canned.framing == "length":
                lines.append(f"content-length: {sum(len(p) for p in canned.pieces)}")
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
            for piece in canned.pieces:
                if canned.framing == "chunked":
                    writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                else:
                    writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0)
            if canned.complete and canned.framing == "chunked":
                writer.write(b"0\r\n\r\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


async def collect(model: Model, request: ModelRequest) -> tuple[list[str], Completed]:
    """The text deltas and the one `Completed` a model streams (which must come last)."""
    deltas: list[str] = []
    completed: list[Completed] = []
    async for event in model.stream(request):
        assert not completed, "nothing may follow Completed"
        if isinstance(event, TextDelta):
            deltas.append(event.text)
        else:
            completed.append(event)
    assert len(completed) == 1
    return deltas, completed[0]


async def failure(model: Model, request: ModelRequest) -> tuple[ProviderError, list[str]]:
    """The `ProviderError` a stream raises, and the text deltas that came before it."""
    deltas: list[str] = []
    with pytest.raises(ProviderError) as info:
        async for event in model.stream(request):
            assert isinstance(event, TextDelta), "no Completed before a failure"
            deltas.append(event.text)
    return info.value, deltas


def with_stub(
    *responses: Canned,
) -> Callable[[Callable[[Stub, httpx.AsyncClient], Awaitable[Any]]], Any]:
    """Run ``fn(stub, client)`` with a started stub and a proxy-free client; return its result."""

    def runner(fn: Callable[[Stub, httpx.AsyncClient], Awaitable[Any]]) -> Any:
        async def main() -> Any:
            async with Stub(*responses) as stub, httpx.AsyncClient(trust_env=False) as client:
                return await fn(stub, client)

        return run(main())

    return runner


def split(data: bytes, size: int | None, boundaries: list[int]) -> list[bytes]:
    """``data`` cut at ``boundaries`` (``size`` None), or into ``size``-byte pieces."""
    if size is None:
        cuts = [0, *boundaries, len(data)]
        return [data[a:b] for a, b in zip(cuts, cuts[1:], strict=False) if b > a]
    return [data[i : i + size] for i in range(0, len(data), size)]


# --- canned streams ----------------------------------------------------------------------

TEXT = ["Let me ", "look — ", "at both ", "files é."]
CALLS = [
    {"id": "call_a", "name": "read_file", "arguments": {"path": "notes.txt"}},
    {"id": "call_b", "name": "list_dir", "arguments": {"path": ".", "depth": 2}},
]
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
    {
        "name": "list_dir",
        "description": "List a directory.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
]
CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is in notes.txt?"},
    {"role": "assistant", "content": None, "tool_calls": CALLS},
    {"role": "tool", "tool_call_id": "call_a", "name": "read_file", "content": "hello"},
    {"role": "tool", "tool_call_id": "call_b", "name": "list_dir", "content": '["notes.txt"]'},
    {"role": "user", "content": "And then?"},
]
EXPECTED_MESSAGE = {"role": "assistant", "content": "".join(TEXT), "tool_calls": CALLS}


def sse(events: list[tuple[str | None, Any]], eol: str = "\n") -> tuple[bytes, list[int]]:
    """Events as SSE bytes, and the byte offset where each event ends."""
    out = b""
    ends = []
    for name, data in events:
        lines = [] if name is None else [f"event: {name}"]
        lines.append("data: " + (data if isinstance(data, str) else json.dumps(data)))
        out += (eol.join(lines) + eol + eol).encode()
        ends.append(len(out))
    return out, ends


def openai_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def openai_call(index: int, arguments: str, id: str = "", name: str = "") -> dict[str, Any]:
    fragment: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if id:
        fragment.update(id=id, type="function")
        fragment["function"]["name"] = name
    return fragment


OPENAI_EVENTS: list[tuple[str | None, Any]] = [
    (None, openai_chunk({"role": "assistant", "content": ""})),
    *[(None, openai_chunk({"content": piece})) for piece in TEXT],
    (None, openai_chunk({"tool_calls": [openai_call(0, "", "call_a", "read_file")]})),
    (None, openai_chunk({"tool_calls": [openai_call(0, '{"pa')]})),
    (None, openai_chunk({"tool_calls": [openai_call(0, 'th": "not')]})),
    (
        None,
        openai_chunk(
            {
                "tool_calls": [
                    openai_call(0, 'es.txt"}'),
                    openai_call(1, '{"path"', "call_b", "list_dir"),
                ]
            }
        ),
    ),
    (None, openai_chunk({"tool_calls": [openai_call(1, ': ".", "de')]})),
    (None, openai_chunk({"tool_calls": [openai_call(1, 'pth": 2}')]})),
    (None, openai_chunk({}, "tool_calls")),
    (
        None,
        {
            "id": "chatcmpl-1",
            "choices": [],
            "usage": {"prompt_tokens": 31, "completion_tokens": 17},
        },
    ),
    (None, "[DONE]"),
]


def anthropic_delta(index: int, delta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}


def anthropic_json(index: int, partial: str) -> tuple[str, dict[str, Any]]:
    return anthropic_delta(index, {"type": "input_json_delta", "partial_json": partial})


def anthropic_tool_start(index: int, call: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    block = {"type": "tool_use", "id": call["id"], "name": call["name"], "input": {}}
    return "content_block_start", {
        "type": "content_block_start",
        "index": index,
        "content_block": block,
    }


def anthropic_stop(index: int) -> tuple[str, dict[str, Any]]:
    return "content_block_stop", {"type": "content_block_stop", "index": index}


MESSAGE_START = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-test",
        "stop_reason": None,
        "usage": {"input_tokens": 42, "output_tokens": 1},
    },
}
ANTHROPIC_EVENTS: list[tuple[str | None, Any]] = [
    ("message_start", MESSAGE_START),
    (
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ),
    ("ping", {"type": "ping"}),
    *[anthropic_delta(0, {"type": "text_delta", "text": piece}) for piece in TEXT],
    anthropic_stop(0),
    anthropic_tool_start(1, CALLS[0]),
    anthropic_json(1, ""),
    anthropic_json(1, '{"pa'),
    anthropic_json(1, 'th": "not'),
    anthropic_json(1, 'es.txt"}'),
    anthropic_stop(1),
    anthropic_tool_start(2, CALLS[1]),
    anthropic_json(2, '{"path"'),
    ("ping", {"type": "ping"}),
    anthropic_json(2, ': ".", "de'),
    anthropic_json(2, 'pth": 2}'),
    anthropic_stop(2),
    (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 57},
        },
    ),
    ("message_stop", {"type": "message_stop"}),
]

ERROR_BODY = json.dumps({"error": {"type": "some_error", "message": "it went wrong"}}).encode()


# --- OpenAI-compatible Chat Completions --------------------------------------------------


@pytest.mark.parametrize("size", [None, 1, 7])
def test_openai_streams_text_and_tool_calls(size: int | None) -> None:
    body, ends = sse(OPENAI_EVENTS)
    body = b": keep-alive\n\n" + body

    @with_stub(Canned(split(body, size, ends)))
    async def result(stub: Stub, client: httpx.AsyncClient) -> tuple[list[str], Completed]:
        model = OpenAIChat("gpt-test", base_url=stub.url + "/v1", api_key="sk-x", client=client)
        return await collect(model, ModelRequest("gpt-test", [CONVERSATION[1]], tools=TOOLS))

    deltas, completed = result
    assert deltas == TEXT
    assert completed.message == EXPECTED_MESSAGE
    assert completed.usage == {"input_tokens": 31, "output_tokens": 17}
    assert completed.stop_reason == "tool_use"


def test_openai_request_shape() -> None:
    body, _ = sse(OPENAI_EVENTS)
    request = ModelRequest(
        "gpt-test",
        CONVERSATION,
        tools=TOOLS,
        instructions="You are a helper.",
        thinking="low",
        max_tokens=1000,
    )

    @with_stub(Canned([body]))
    async def stub(stub: Stub, client: httpx.AsyncClient) -> Stub:
        model = OpenAIChat(
            "gpt-test",
            base_url=stub.url + "/v1/",
            api_key="sk-x",
            client=client,
            extra_body={"temperature": 0},
        )
        await collect(model, request)
        return stub

    [received] = stub.received
    assert (received.method, received.path) == ("POST", "/v1/chat/completions")
    assert received.headers["authorization"] == "Bearer sk-x"
    assert received.headers["accept"] == "text/event-stream"
    assert received.headers["content-type"] == "application/json"
    assert received.body == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "You are a helper."},
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is in notes.txt?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "list_dir", "arguments": '{"path": ".", "depth": 2}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": "hello"},
            {"role": "tool", "tool_call_id": "call_b", "content": '["notes.txt"]'},
            {"role": "user", "content": "And then?"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 1000,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t["description"],
                    "parameters": t["parameters"],
                },
            }
            for t in TOOLS
        ],
        "reasoning_effort": "low",
        "temperature": 0,
    }


def test_openai_plain_text_without_tools_or_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # No key anywhere: no Authorization header; the default client (client=None) is used.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    body, _ = sse(
        [
            (None, openai_chunk({"content": "Hi"})),
            (None, openai_chunk({"content": "!"}, "stop")),
            (None, "[DONE]"),
        ]
    )

    async def main() -> tuple[Stub, list[str], Completed]:
        async with Stub(Canned([body], framing="close")) as stub:
            model = OpenAIChat("llama", base_url=stub.url + "/v1")
            deltas, completed = await collect(model, ModelRequest("llama", [CONVERSATION[1]]))
            return stub, deltas, completed

    stub, deltas, completed = run(main())
    assert deltas == ["Hi", "!"]
    assert completed == Completed(
        message={"role": "assistant", "content": "Hi!", "tool_calls": []},
        usage={},
        stop_reason="end_turn",
    )
    assert "authorization" not in stub.received[0].headers
    assert "tools" not in stub.received[0].body


def test_openai_api_key_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    body, _ = sse([(None, openai_chunk({"content": "ok"}, "length")), (None, "[DONE]")])

    @with_stub(Canned([body]))
    async def result(stub: Stub, client: httpx.AsyncClient) -> tuple[Stub, Completed]:
        model = OpenAIChat("gpt-test", base_url=stub.url, client=client)
        return stub, (await collect(model, ModelRequest("gpt-test", [CONVERSATION[1]])))[1]

    stub, completed = result
    assert stub.received[0].headers["authorization"] == "Bearer sk-env"
    assert completed.stop_reason == "max_tokens"


@pytest.mark.parametrize("cut", ["chunked", "close", "mid-line"])
def test_openai_broken_stream_keeps_partial_text(cut: str) -> None:
    body, ends = sse(OPENAI_EVENTS)
    upto = ends[2]  # the role chunk and the first two text pieces
    if cut == "mid-line":
        upto = ends[3] - 20
    canned = Canned(
        split(body[:upto], None, [e for e in ends if e < upto]),
        framing="chunked" if cut == "chunked" else "close",
        complete=False,
    )

    @with_stub(canned)
    async def result(stub: Stub, client: httpx.AsyncClient) -> tuple[ProviderError, list[str]]:
        model = OpenAIChat("gpt-test", base_url=stub.url, api_key="k", client=client)
        return await failure(model, ModelRequest("gpt-test", [CONVERSATION[1]]))

    error, deltas = result
    assert deltas == TEXT[:2]
    assert error.partial == "".join(TEXT[:2])
    assert error.retryable


@pytest.mark.parametrize(
    ("status", "retryable"), [(500, True), (429, True), (503, True), (400, False), (401, False)]
)
def test_openai_http_errors(status: int, retryable: bool) -> None:
    canned = Canned([ERROR_BODY], status=status, content_type="application/json", framing="length")

    @with_stub(canned)
    async def result(stub: Stub, client: httpx.AsyncClient) -> tuple[ProviderError, list[str]]:
        model = OpenAIChat("gpt-test", base_url=stub.url, api_key="k", client=client)
        return await failure(model, ModelRequest("gpt-test", [CONVERSATION[1]]))

    error, deltas = result
    assert deltas == []
    assert error.retryable is retryable
    assert error.partial is None
    assert f"HTTP {status}" in str(error)
    assert "it went wrong" in str(error)


@pytest.mark.parametrize(
    ("kind", "retryable"), [("server_error", True), ("invalid_request_error", False)]
)
def test_openai_error_payload_in_stream(kind: str, retryable: bool) -> None:
    body, _ = sse(
        [
            (None, openai_chunk({"content": "Par"})),
            (None, {"error": {"message": "the model crashed", "type": kind}}),
        ]
    )

    @with_stub(Canned([body]))
    async def result(stub: Stub, client: httpx.AsyncClient) -> tuple[ProviderError, list[str]]:
        model = OpenAIChat("gpt-test", base_url=stub.url, api_key="k", client=client)
        return await failure(model, ModelRequest("gpt-test", [CONVERSATION[1]]))

    error, deltas = result
    assert deltas == ["Par"]
    assert error.partial == "Par"
    assert error.retryable is retryable
    assert "the model crashed" in str(error)


@pytest.mark.parametrize("arguments", ['{"path": ', "[1, 2]"])
def test_openai_bad_tool_arguments(arguments: str) -> None:
    body, _ = sse(
        [
            (
                None,
                openai_chunk({"tool_calls": [openai_call(0, arguments, "call_a", "read_file")]}),
            ),
            (None, openai_chunk({}, "tool_calls")),
            (None, "[DONE]"),
        ]
    )

    @with_stub(Canned([body]))
    async def result(stub: Stub, client: httpx.AsyncClient) -> tuple[ProviderError, list[str]]:
        model = OpenAIChat("gpt-test", base_url=stub.url, api_key="k", client=client)
        return await failure(model, ModelRequest("gpt-test", [CONVERSATION[1]]))

    error, _ = result
    assert "read_file" in str(error)
    assert not error.retryable


def test_connection_refused_is_retryable() -> None:
    async def main() -> tuple[ProviderError, list[str]]:
        async with Stub() as stub:
            url = stub.url
        async with httpx.AsyncClient(trust_env=False) as client:
            model = OpenAIChat("gpt-test", base_url=url, api_key="k", client=client)
            return await failure(model, ModelRequest("gpt-test", [CONVERSATION[1]]))

    error, deltas = run(main())
    assert deltas == []
    assert error.partial == ""
    assert error.retryable


# --- Anthropic Messages ------------------------------------------------------------------


@pytest.mark.parametrize(("eol", "size"), [("\n", None), ("\r\n", None), ("\r\n", 1), ("\n", 5)])
def test_anthropic_streams_text_and_tool_calls(eol: str, size: int | None) -> None:
    body, ends = sse(ANTHROPIC_EVENTS, eol)

    @with_stub(Canned(split(body, size, ends)))
    async def result(stub: Stub, client: httpx.AsyncClient) -> tuple[list[str], Completed]:
        model = AnthropicMessages("claude-test", base_url=stub.url, api_key="ak", client=client)
        return await collect(model, ModelRequest("claude-test", [CONVERSATION[1]], tools=TOOLS))

    deltas, completed = result
    assert deltas == TEXT
    assert completed.message == EXPECTED_MESSAGE
    assert completed.usage == {"input_tokens": 42, "output_tokens": 57}
    assert isinstance(AnthropicMessages("claude-test"), Model)
    assert isinstance(OpenAIChat("gpt-test"), Model)
    assert completed.stop_reason == "tool_use"


def test_anthropic_request_shape() -> None:
    body, _ = sse(ANTHROPIC_EVENTS)
    request = ModelRequest(
        "claude-test",
        CONVERSATION,
        tools=TOOLS,
        instructions="You are a helper.",
        thinking="medium",
        max_tokens=1000,
    )

    @with_stub(Canned([body]))
    async def stub(stub: Stub, client: httpx.AsyncClient) -> Stub:
        model = AnthropicMessages("claude-test", base_url=stub.url, api_key="ak", client=client)
        await collect(model, request)
        return stub

    [received] = stub.received
    assert (received.method, received.path) == ("POST", "/v1/messages")
    assert received.headers["x-api-key"] == "ak"
    assert received.headers["anthropic-version"] == "2023-06-01"
    assert received.headers["accept"] == "text/event-stream"
    assert received.body == {
        "model": "claude-test",
        "max_tokens": 1000 + 4096,
        "stream": True,
        "system": "You are a helper.\n\nBe brief.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What is in notes.txt?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["arguments"]}
                    for c in CALLS
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "call_a", "content": "hello"},
                    {"type": "tool_result", "tool_use_id": "call_b", "content": '["notes.txt"]'},
                    {"type": "text", "text": "And then?"},
                ],
            },
        ],
        "tools": [
            {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
            for t in TOOLS
        ],
        "thinking": {"type": "enabled", "budget_tokens": 4096},
    }


def test_anthropic_text_only_and_thinking_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    thinking = {"type": "thinking", "thinking": "", "signature": ""}
    body, _ = sse(
        [
            ("message_start", MESSAGE_START),
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": thinking},
            ),
            anthropic_delta(0, {"type": "thinking_delta", "thinking": "Hmm, "}),
            anthropic_delta(0, {"type": "thinking_delta", "thinking": "easy."}),
            anthropic_delta(0, {"type": "signature_delta", "signature": "sig=="}),
            anthropic_stop(0),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 1,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            anthropic_delta(1, {"type": "text_delta", "text": "Four."}),
            anthropic_stop(1),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": 9},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    )

    @with_stub(Canned([body], framing="close"))
    async def result(stub: Stub, client: httpx.AsyncClient) -> tuple[Stub, list[str], Completed]:
        model = AnthropicMessages("claude-test", base_url=stub.url, client=client)
        deltas, completed = await collect(model, ModelRequest("claude-test", [CONVERSATION[1]]))
        return stub, deltas, completed

    stub, deltas, completed = result
    assert stub.received[0].headers["x-api-key"] == "env-key"
    assert "tools" not in stub.received[0].body
    assert "system" not in stub.received[0].body
    assert deltas == ["Four."]
    assert completed == Completed(
        message={
            "role": "assistant",
            "content": "Four.",
            "tool_calls": [],
            "thinking": [{"type": "thinking", "thinking": "Hmm, easy.", "signature": "sig=="}],
        },
        usage={"input_tokens": 42, "output_tokens": 9},
        stop_reason="end_turn",
    )
    # Thinking blocks go back first when the message is sent again.
    again = AnthropicMessages("claude-test", api_key="k").body(
        ModelRequest("claude-test", [CONVERSATION[1], completed.message])
    )
    assert again["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "Hmm, easy.", "signature": "sig=="},
        {"type": "text", "text": "Four."},
    ]


@pytest.mark.parametrize("cut", ["chunked", "close", "mid-line"])
def test_anthropic_broken_stream_keeps_partial_text(cut: str) -> None:
    body, ends = sse(ANTHROPIC_EVENTS, "\r\n")
    upto = ends[4]  # start, block start, ping, two text pieces
    if cut == "mid-line":
        upto = ends[5] - 15
    canned = Canned(
        split(body[:upto], None, [e for e in ends if e < upto]),
        framing="chunked" if cut == "chunked" else "close",
        complete=False,
    )

    @with_stub(canned)
    async def result(stub: Stub, client: httpx.AsyncClient) -> tuple[ProviderError, list[str]]:
        model = AnthropicMessages("claude-test", base_url=stub.url, api_key="ak", client=client)
        return await failure(model, ModelRequest("claude-test", [CONVERSATION[1]]))

    error, deltas = result
    assert deltas == TEXT[:2]
    assert error.partial == "".join(TEXT[:2])
    assert error.retryable


@pytest.mark.parametrize(
    ("status", "retryable"), [(500, True), (429, True), (529, True), (400, False)]
)
def test_anthropic_http_errors(status: int, retryable: bool) -> None:
    canned = Canned([ERROR_BODY], status=status, content_type="application/json", framing="length")

    @with_stub(canned)
    async def result(stub: Stub, client: httpx.AsyncClient) -> tuple[ProviderError, list[str]]:
        model = AnthropicMessages("claude-test", base_url=stub.url, api_key="ak", client=client)
        return await failure(model, ModelRequest("claude-test", [CONVERSATION[1]]))

    error, deltas = result
    assert deltas == []
    assert error.retryable is retryable
    assert error.partial is None
    assert f"HTTP {status}" in str(error)
    assert "it went wrong" in str(error)


@pytest.mark.parametrize(
    ("kind", "retryable"), [("overloaded_error", True), ("invalid_request_error", False)]
)
def test_anthropic_error_event(kind: str, retryable: bool) -> None:
    body, _ = sse(
        [
            *ANTHROPIC_EVENTS[:4],
            ("error", {"type": "error", "error": {"type": kind, "message": "Overloaded"}}),
        ]
    )

    @with_stub(Canned([body]))
    async def result(stub: Stub, client: httpx.AsyncClient) -> tuple[ProviderError, list[str]]:
        model = AnthropicMessages("claude-test", base_url=stub.url, api_key="ak", client=client)
        return await failure(model, ModelRequest("claude-test", [CONVERSATION[1]]))

    error, deltas = result
    assert deltas == TEXT[:1]
    assert error.partial == TEXT[0]
    assert error.retryable is retryable
    assert kind in str(error)


def test_anthropic_bad_tool_input() -> None:
    body, _ = sse(
        [
            ("message_start", MESSAGE_START),
            anthropic_tool_start(0, CALLS[0]),
            anthropic_json(0, '{"path": "a'),
            anthropic_stop(0),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "tool_use"},
                    "usage": {"output_tokens": 3},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    )

    @with_stub(Canned([body]))
    async def result(stub: Stub, client: httpx.AsyncClient) -> tuple[ProviderError, list[str]]:
        model = AnthropicMessages("claude-test", base_url=stub.url, api_key="ak", client=client)
        return await failure(model, ModelRequest("claude-test", [CONVERSATION[1]]))

    error, _ = result
    assert "read_file" in str(error)
    assert not error.retryable


def test_anthropic_thinking_levels() -> None:
    model = AnthropicMessages("claude-test", api_key="k")

    def body(thinking: str | None) -> dict[str, Any]:
        return model.body(
            ModelRequest("claude-test", [CONVERSATION[1]], thinking=thinking, max_tokens=100)
        )

    assert "thinking" not in body(None)
    assert "thinking" not in body("off")
    assert body("low")["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert body("high")["thinking"] == {"type": "enabled", "budget_tokens": 16384}
    assert body("high")["max_tokens"] == 100 + 16384
    assert body("2000")["thinking"] == {"type": "enabled", "budget_tokens": 2000}
    with pytest.raises(ProviderError, match="thinking"):
        body("extreme")


# --- the SSE parser ----------------------------------------------------------------------

STREAM = (
    ": a comment\r\n"
    "event: first\r\n"
    "data: one\r\n"
    "\r\n"
    "data:no space\n"
    "data:  two spaces\n"
    "id: 7\n"
    "retry: 100\n"
    "\n"
    ":another comment\r"
    "event: multi\r"
    "data: line 1\r"
    "data\r"
    "data: line 3 — é\r"
    "\r"
    "event: ignored, no data\n"
    "\n"
    'data: {"a": ": b"}\r\n'
    "\r\n"
)
EXPECTED_EVENTS = [
    SSEEvent("first", "one"),
    SSEEvent("message", "no space\n two spaces"),
    SSEEvent("multi", "line 1\n\nline 3 — é"),
    SSEEvent("message", '{"a": ": b"}'),
]


def feed_all(chunks: list[str]) -> list[SSEEvent]:
    parser = SSEParser()
    events = [event for chunk in chunks for event in parser.feed(chunk)]
    return events + parser.finish()


def test_sse_whole_stream() -> None:
    assert feed_all([STREAM]) == EXPECTED_EVENTS


def test_sse_any_chunk_boundaries() -> None:
    assert feed_all(list(STREAM)) == EXPECTED_EVENTS
    for i in range(len(STREAM) + 1):
        assert feed_all([STREAM[:i], STREAM[i:]]) == EXPECTED_EVENTS, i
    rng = random.Random(7)
    for _ in range(300):
        cuts = sorted(rng.sample(range(len(STREAM) + 1), rng.randint(2, 12)))
        chunks = [STREAM[a:b] for a, b in zip([0, *cuts], [*cuts, len(STREAM)], strict=True)]
        assert feed_all(chunks) == EXPECTED_EVENTS, cuts


def test_sse_events_come_as_soon_as_complete() -> None:
    parser = SSEParser()
    assert parser.feed("data: a\n") == []
    assert parser.feed("\n") == [SSEEvent("message", "a")]
    assert parser.feed("data: b\r") == []
    assert parser.feed("\r") == [SSEEvent("message", "b")]
    # A CRLF split between chunks is one line end, not two (no spurious blank line).
    assert parser.feed("event: x\r") == []
    assert parser.feed("\ndata: c\r\n") == []
    assert parser.feed("\r\n") == [SSEEvent("x", "c")]


def test_sse_end_of_stream() -> None:
    # Complete lines without the final blank line still make an event ...
    assert feed_all(["data: [DONE]\n"]) == [SSEEvent("message", "[DONE]")]
    # ... a line cut short does not, and neither does anything before it in the same event.
    assert feed_all(['data: a\ndata: {"trunc']) == []
    assert feed_all(['data: a\n\ndata: {"trunc']) == [SSEEvent("message", "a")]
    assert feed_all([]) == []


def test_openai_token_limit_field() -> None:
    request = ModelRequest("m", [CONVERSATION[1]], max_tokens=100)
    plain = OpenAIChat("m", api_key="k").body(request)
    assert plain["max_tokens"] == 100 and "max_completion_tokens" not in plain
    reasoning = OpenAIChat("o4-mini", api_key="k", token_limit="max_completion_tokens")
    body = reasoning.body(request)
    assert body["max_completion_tokens"] == 100 and "max_tokens" not in body
    with pytest.raises(ValueError, match="token_limit"):
        OpenAIChat("m", token_limit="tokens")  # type: ignore[arg-type]
