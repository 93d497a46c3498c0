"""A scripted service for the client's tests: httpx.MockTransport, no server, no sockets.

`Script` answers each request with the next scripted reply (a response, a function of the
request, or a transport error to raise) and keeps every request it saw. `run` calls a client
method through the sync or the async client, so each test runs against both.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import orjson

from threadlog.client import AsyncClient, Client
from threadlog.model.envelope import Record

URL = "http://service.test:8765"

Reply = httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


class Script:
    """The transport's handler: scripted replies, in order; the requests it was sent."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if not self.replies:
            raise AssertionError(f"unexpected request {request.method} {request.url}")
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, httpx.Response):
            return reply
        return reply(request)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)

    def bodies(self) -> list[Any]:
        return [orjson.loads(r.content) if r.content else None for r in self.requests]


def record(ord: int, *, id: str | None = None, type: str = "custom.test") -> dict[str, Any]:
    """An envelope dict (the client does not check hashes: any 64 hex digits do)."""
    return {
        "v": 1,
        "id": id or f"ev-{ord}",
        "thread": "t1",
        "ord": ord,
        "parent": None,
        "ts": "2026-01-01T00:00:00.000000Z",
        "type": type,
        "data": {"n": ord, "text": "x" * 20},
        "prev": None if ord == 1 else "a" * 64,
        "hash": "b" * 64,
    }


def frame(ord: int, **kw: Any) -> bytes:
    """One record as the stream sends it."""
    return b"id: %d\ndata: %s\n\n" % (ord, orjson.dumps(record(ord, **kw)))


def end(reason: str, after: int = 0) -> bytes:
    return b"event: end\ndata: %s\n\n" % orjson.dumps({"reason": reason, "after": after})


class Body(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A response body sent in ``chunks``, then ended, or cut with ``error``."""

    def __init__(self, *chunks: bytes, error: Exception | None = None) -> None:
        self.chunks = chunks
        self.error = error

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        if self.error is not None:
            raise self.error

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        if self.error is not None:
            raise self.error


def events(*chunks: bytes, cut: bool = False) -> httpx.Response:
    """A ``text/event-stream`` answer; ``cut``: the connection breaks after the chunks."""
    error = httpx.ReadError("connection reset by peer") if cut else None
    return httpx.Response(
        200,
        headers={"content-type": "text/event-stream; charset=utf-8"},
        stream=Body(*chunks, error=error),
    )


def error(status: int, type: str, message: str, **extra: Any) -> httpx.Response:
    body: dict[str, Any] = {"error": {"status": status, "type": type, "message": message}}
    body.update(extra)
    return httpx.Response(status, json=body)


def run(
    kind: str,
    script: Script,
    method: str,
    *args: Any,
    sleeps: list[float] | None = None,
    **kwargs: Any,
) -> Any:
    """``Client(URL).method(*args, **kwargs)`` through the sync or async client; the pauses
    before retries go to ``sleeps`` (nothing waits)."""
    sleeps = [] if sleeps is None else sleeps
    if kind == "sync":
        with Client(URL, transport=script.transport(), sleep=sleeps.append) as client:
            return getattr(client, method)(*args, **kwargs)

    async def main() -> Any:
        async def sleep(delay: float) -> None:
            sleeps.append(delay)

        async with AsyncClient(URL, transport=script.transport(), sleep=sleep) as client:
            return await getattr(client, method)(*args, **kwargs)

    return asyncio.run(main())


def follow(
    kind: str,
    script: Script,
    *,
    sleeps: list[float] | None = None,
    got: list[Record] | None = None,
    thread: str = "t1",
    **kwargs: Any,
) -> list[Record]:
    """Every record ``stream()`` delivers (it must end by itself); each is also appended to
    ``got`` as it comes, for a test that expects the stream to raise."""
    sleeps = [] if sleeps is None else sleeps
    got = [] if got is None else got
    if kind == "sync":
        with Client(URL, transport=script.transport(), sleep=sleeps.append) as client:
            for r in client.stream(thread, **kwargs):
                got.append(r)
        return got

    async def main() -> None:
        async def sleep(delay: float) -> None:
            sleeps.append(delay)

        async with AsyncClient(URL, transport=script.transport(), sleep=sleep) as client:
            async for r in client.stream(thread, **kwargs):
                got.append(r)

    asyncio.run(main())
    return got
