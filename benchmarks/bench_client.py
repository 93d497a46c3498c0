"""Benchmark the service client's stream reading, from memory (no server, no socket).

Measures, for frames like ``id: 7\\ndata: {…a record with ~300 bytes of data…}\\n\\n`` in
64 KiB chunks:

* ``httpx_sse`` alone: the SSE parser the client uses (events per second);
* ``Client.stream``: the whole sync path (parser, JSON decoding, `Record` building, the
  cursor and de-duplication);
* ``AsyncClient.stream``: the same, async.

The client must keep up with a server well beyond what agents write (about 100,000 events a
second is the bar), so it needs no parser of its own.

Usage::

    .venv/bin/python benchmarks/bench_client.py            # 100,000 events per figure
    .venv/bin/python benchmarks/bench_client.py --quick    # 5,000: a smoke test
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import orjson
from httpx_sse import EventSource

from threadlog.client import AsyncClient, Client


def body(count: int) -> tuple[bytes, int]:
    """``count`` record frames and an ``end`` frame; the size of one frame."""
    frames = []
    for ord in range(1, count + 1):
        record = {
            "v": 1,
            "id": f"0193abcd-0000-7000-8000-{ord:012d}",
            "thread": "0193abcd-1111-7111-8111-000000000001",
            "ord": ord,
            "parent": None,
            "ts": "2026-01-01T00:00:00.000000Z",
            "type": "tool_call.finished",
            "data": {"call_id": f"call_{ord}", "output": "x" * 260},
            "prev": "a" * 64,
            "hash": "b" * 64,
        }
        frames.append(b"id: %d\ndata: %s\n\n" % (ord, orjson.dumps(record)))
    frames.append(b'event: end\ndata: {"reason":"deleted","after":0}\n\n')
    return b"".join(frames), len(frames[0])


class Chunks(httpx.SyncByteStream, httpx.AsyncByteStream):
    def __init__(self, data: bytes) -> None:
        self.data = data

    def __iter__(self) -> Iterator[bytes]:
        for i in range(0, len(self.data), 65536):
            yield self.data[i : i + 65536]

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self:
            yield chunk


def transport(data: bytes) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, headers=headers, stream=Chunks(data))

    return httpx.MockTransport(handler)


def parser_only(data: bytes) -> int:
    with httpx.Client(transport=transport(data)) as http, http.stream("GET", "http://b/") as r:
        return sum(1 for _ in EventSource(r).iter_sse())


def sync_client(data: bytes) -> int:
    with Client("http://b", transport=transport(data)) as client:
        return sum(1 for _ in client.stream("t"))


def async_client(data: bytes) -> int:
    async def main() -> int:
        n = 0
        async with AsyncClient("http://b", transport=transport(data)) as client:
            async for _ in client.stream("t"):
                n += 1
        return n

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5,000 events: a smoke test")
    args = parser.parse_args()
    count = 5_000 if args.quick else 100_000
    data, frame = body(count)
    print(f"{count:,} events, {frame} bytes per frame\n")
    print("| path | events/s |")
    print("|---|---:|")
    for name, run in (
        ("httpx_sse parser", parser_only),
        ("Client.stream", sync_client),
        ("AsyncClient.stream", async_client),
    ):
        start = time.perf_counter()
        got = run(data)
        seconds = time.perf_counter() - start
        assert got >= count, (name, got)
        print(f"| {name} | {count / seconds:,.0f} |")


if __name__ == "__main__":
    main()
