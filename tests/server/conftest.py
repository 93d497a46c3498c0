"""Fixtures for the service's tests: a real uvicorn server on 127.0.0.1 (port 0) in a thread,
over an embedded store, with stand-ins for the token authenticator and the stream hub (their
real modules are tested on their own), and a scripted model that proposes tool calls."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from fastapi import FastAPI

from threadlog.runtime import Reply, ScriptedModel, Tool, ToolCallSpec, ToolContext
from threadlog.runtime.models import ModelRequest
from threadlog.server.app import ServerSettings, create_app
from threadlog.store.protocol import Store

TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
BIG = 100_000
"""Bytes of the ``big`` tool's result: over the artifact threshold, so stored as a blob."""


class FakeAuthenticator:
    """The interface of `threadlog.server.tokens.Authenticator`, over a fixed table."""

    def __init__(self, tokens: dict[str, str]) -> None:
        self.tokens = dict(tokens)

    @property
    def open_mode(self) -> bool:
        return not self.tokens

    def principal_for(self, token: str) -> str | None:
        return self.tokens.get(token)


class FakeHub:
    """The interface of `threadlog.server.hub.StreamHub`: replays the log, then ends."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.started = False
        self.closed: str | None = None

    async def start(self) -> None:
        self.started = True

    async def close(self, reason: str = "shutdown") -> None:
        self.closed = reason

    async def stream(self, thread_id: str, after: int) -> AsyncIterator[bytes]:
        records = await asyncio.to_thread(self.store.read, thread_id, after)
        for record in records:
            yield b"id: %d\ndata: %s\n\n" % (record.ord, orjson.dumps(record.to_dict()))
        last = records[-1].ord if records else after
        yield b'event: end\ndata: {"reason":"shutdown","after":%d}\n\n' % last


def script(request: ModelRequest, step: int) -> Reply:
    """``pay …`` proposes a call that needs approval, ``big …`` one whose result is a blob;
    anything else is echoed."""
    last = request.messages[-1]
    if last["role"] != "user":
        return Reply("done")
    text = str(last.get("content") or "")
    if text.startswith("pay"):
        return Reply("paying", [ToolCallSpec("pay", {"amount": 5})])
    if text.startswith("big"):
        return Reply("", [ToolCallSpec("big")])
    return Reply(f"echo {text}")


async def _pay(ctx: ToolContext, args: dict[str, Any]) -> Any:
    return {"paid": args.get("amount")}


async def _big(ctx: ToolContext, args: dict[str, Any]) -> Any:
    return "x" * BIG


TOOLS = [
    Tool("pay", "pays", {"type": "object"}, "non_idempotent", _pay),
    Tool("big", "a large result", {"type": "object"}, "read_only", _big),
]


def make_app(
    store: Store,
    tokens: dict[str, str] | None = None,
    settings: ServerSettings | None = None,
    model: ScriptedModel | None = None,
) -> FastAPI:
    return create_app(
        store,
        model=model or ScriptedModel(script),
        tools=TOOLS,
        settings=settings,
        authenticator=FakeAuthenticator(TOKENS if tokens is None else tokens),
        hub=FakeHub(store),
    )


@contextlib.contextmanager
def serve_in_thread(app: FastAPI) -> Iterator[str]:
    """Run ``app`` under uvicorn on 127.0.0.1, a free port, in a thread; its base URL.
    Always stopped (lifespan shutdown included) when the block ends."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", ws="none")
    server = uvicorn.Server(config)
    sock = config.bind_socket()
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@dataclass
class Api:
    """A running service and a client for each principal."""

    url: str
    app: FastAPI
    alice: httpx.Client
    bob: httpx.Client
    anon: httpx.Client

    def wait(self, client: httpx.Client, thread: str, done: Any, timeout: float = 15) -> Any:
        """Poll the thread's detail until ``done(detail)`` is true; the detail."""
        deadline = time.monotonic() + timeout
        while True:
            detail = client.get(f"/v1/threads/{thread}").json()
            if done(detail):
                return detail
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; last detail: {detail}")
            time.sleep(0.05)


@pytest.fixture
def workspace(tmp_path: Path) -> str:
    root = tmp_path / "ws"
    root.mkdir()
    return str(root)


@pytest.fixture
def api(store: Store) -> Iterator[Api]:
    app = make_app(store)
    with serve_in_thread(app) as url:
        clients = [
            httpx.Client(base_url=url, headers=headers, timeout=30)
            for headers in (
                {"Authorization": "Bearer tok-alice"},
                {"Authorization": "Bearer tok-bob"},
                {},
            )
        ]
        try:
            yield Api(url, app, *clients)
        finally:
            for client in clients:
                client.close()
