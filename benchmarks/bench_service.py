"""The live stream over HTTP: many SSE clients, a long replay, append-to-delivery latency.

A real uvicorn server on 127.0.0.1 (a free port) serves a minimal Starlette app whose only
route, ``GET /stream/{thread}?after=N``, returns ``StreamingResponse(hub.stream(...))`` (the
service's own app adds auth and the ``/v1`` routes around the same call). The server and the
writer share one process and one event loop, as in ``threadlog serve``; the clients run in a
separate process (httpx), so that parsing 2,000,000 events does not compete with the server
for the GIL. Both processes read ``time.perf_counter()`` (CLOCK_MONOTONIC on Linux: one clock
for the whole machine), so the writer's stamps and the clients' receipt times compare.

Measures:

(a) 200 concurrent clients on one thread while a writer appends a 10,000-event turn
    (``custom.bench`` events of ~300 bytes, buffered, every 100th durable): every client must
    receive every event, in order; the time from the first append to the last client's last
    event. Run twice: clients parsing with httpx-sse, and with raw httpx line parsing.
(b) replay of a 100,000-event thread to one client from ``after=0``: events/s.
(c) append-to-delivery latency while 200 clients listen: the writer appends durable events
    at a steady rate, stamping ``perf_counter()`` into each; clients take the difference on
    receipt; p50 / p99 over every (client, event) pair.

Usage::

    .venv/bin/python benchmarks/bench_service.py            # --quick for a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import shutil
import statistics
import tempfile
import time
from typing import Any

import httpx
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from threadlog import open_store
from threadlog.server.hub import StreamHub
from threadlog.store.protocol import Store

PAD = "x" * 260  # with the stamp and the envelope: ~300 bytes of data, a ~600-byte frame


# -- the clients (in their own process) ---------------------------------------------------------


async def _raw_client(
    client: httpx.AsyncClient, url: str, after: int, target: int, ready: Any, out: list[Any]
) -> None:
    expect = after + 1
    latencies: list[float] = []
    async with client.stream("GET", url, params={"after": after}) as response:
        ready()
        async for line in response.aiter_lines():
            if line.startswith("id: "):
                if int(line[4:]) != expect:
                    raise AssertionError(f"expected id {expect}, got {line}")
                expect += 1
            elif line.startswith("data: "):
                now = time.perf_counter()
                stamp = orjson.loads(line[6:])["data"].get("t")
                if stamp:
                    latencies.append(now - stamp)
            if expect > target and line == "":
                break
    out.append((expect - 1 - after, time.perf_counter(), latencies))


async def _sse_client(
    client: httpx.AsyncClient, url: str, after: int, target: int, ready: Any, out: list[Any]
) -> None:
    from httpx_sse import aconnect_sse

    expect = after + 1
    latencies: list[float] = []
    async with aconnect_sse(client, "GET", url, params={"after": after}) as source:
        ready()
        async for event in source.aiter_sse():
            if not event.id:
                continue
            if int(event.id) != expect:
                raise AssertionError(f"expected id {expect}, got {event.id}")
            expect += 1
            now = time.perf_counter()
            stamp = orjson.loads(event.data)["data"].get("t")
            if stamp:
                latencies.append(now - stamp)
            if expect > target:
                break
    out.append((expect - 1 - after, time.perf_counter(), latencies))


def _clients_main(
    url: str, n: int, after: int, target: int, parser: str, ready: Any, results: Any
) -> None:
    async def main() -> None:
        out: list[Any] = []
        connected = 0

        def one_ready() -> None:
            nonlocal connected
            connected += 1
            if connected == n:
                ready.set()

        limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
        timeout = httpx.Timeout(120.0)
        run = _raw_client if parser == "raw" else _sse_client
        async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
            await asyncio.gather(
                *(run(client, url, after, target, one_ready, out) for _ in range(n))
            )
        results.put(out)

    try:
        asyncio.run(main())
    except BaseException as exc:
        results.put(f"the clients failed: {exc!r}")
        raise


def _start_clients(url: str, n: int, after: int, target: int, parser: str) -> tuple[Any, Any, Any]:
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    results = ctx.Queue()
    proc = ctx.Process(
        target=_clients_main, args=(url, n, after, target, parser, ready, results), daemon=True
    )
    proc.start()
    return proc, ready, results


async def _collect(proc: Any, results: Any) -> list[Any]:
    out: list[Any] | str = await asyncio.to_thread(results.get, True, 600)
    if isinstance(out, str):
        raise RuntimeError(out)
    await asyncio.to_thread(proc.join, 30)
    return out


# -- the server and the writer (this process) ---------------------------------------------------


def make_app(hub: StreamHub) -> Starlette:
    async def stream(request: Request) -> StreamingResponse:
        after = int(request.query_params.get("after", "0"))
        return StreamingResponse(
            hub.stream(request.path_params["thread"], after), media_type="text/event-stream"
        )

    return Starlette(routes=[Route("/stream/{thread}", stream)])


async def wait_ready(ready: Any) -> None:
    ok = await asyncio.to_thread(ready.wait, 120)
    if not ok:
        raise RuntimeError("the clients did not connect")


async def fan_out(
    store: Store, base: str, clients: int, events: int, parser: str
) -> dict[str, Any]:
    """(a): ``clients`` listen while ``events`` are appended as fast as the writer can."""
    thread = store.create_thread("bench")
    proc, ready, results = _start_clients(f"{base}/stream/{thread}", clients, 1, 1 + events, parser)
    await wait_ready(ready)
    await asyncio.sleep(0.2)  # the last requests reach the hub
    start = time.perf_counter()
    for i in range(events):
        data = {"t": time.perf_counter(), "pad": PAD}
        if i % 100 == 99:
            await store.aappend(thread, "custom.bench", data, durable=True)
        else:
            store.append(thread, "custom.bench", data, durable=False)
        if i % 50 == 49:
            await asyncio.sleep(0)  # a turn yields to the loop now and then (model I/O)
    store.flush()
    written = time.perf_counter() - start
    out = await _collect(proc, results)
    assert len(out) == clients and all(count == events for count, _, _ in out), "lost events"
    total = max(done for _, done, _ in out) - start
    return {"written": written, "total": total, "delivered": clients * events / total}


async def replay(store: Store, base: str, events: int) -> dict[str, Any]:
    """(b): one client reads a long thread from the start."""
    thread = store.create_thread("bench")
    for _ in range(events - 1):
        store.append(thread, "custom.bench", {"t": 0.0, "pad": PAD}, durable=False)
    store.flush()
    store.release(thread)
    proc, ready, results = _start_clients(f"{base}/stream/{thread}", 1, 0, events, "raw")
    await wait_ready(ready)
    start = time.perf_counter()  # the request went out just before: a few ms in its favour
    out = await _collect(proc, results)
    count, done, _ = out[0]
    assert count == events
    return {"events": count, "seconds": done - start, "rate": count / (done - start)}


async def latency(
    store: Store, base: str, clients: int, events: int, rate: float
) -> dict[str, Any]:
    """(c): durable appends at ``rate``/s while ``clients`` listen."""
    thread = store.create_thread("bench")
    proc, ready, results = _start_clients(f"{base}/stream/{thread}", clients, 1, 1 + events, "raw")
    await wait_ready(ready)
    await asyncio.sleep(0.2)
    period = 1.0 / rate
    next_at = time.perf_counter()
    for _ in range(events):
        await store.aappend(
            thread, "custom.bench", {"t": time.perf_counter(), "pad": PAD}, durable=True
        )
        next_at += period
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
    out = await _collect(proc, results)
    samples = sorted(x for _, _, lat in out for x in lat)
    assert len(samples) == clients * events
    q = statistics.quantiles(samples, n=100)
    return {"p50": q[49] * 1000, "p99": q[98] * 1000, "max": samples[-1] * 1000}


async def run(args: argparse.Namespace) -> None:
    home = tempfile.mkdtemp(prefix="threadlog-bench-service-")
    try:
        with open_store(home) as store:
            hub = StreamHub(store)
            await hub.start()
            config = uvicorn.Config(
                make_app(hub), host="127.0.0.1", port=0, log_level="warning", lifespan="off"
            )
            server = uvicorn.Server(config)
            serving = asyncio.create_task(server.serve())
            while not server.started:
                await asyncio.sleep(0.01)
            port = server.servers[0].sockets[0].getsockname()[1]
            base = f"http://127.0.0.1:{port}"
            rows: list[tuple[str, str]] = []
            try:
                for parser in ("httpx-sse", "raw"):
                    a = await fan_out(store, base, args.clients, args.events, parser)
                    rows.append(
                        (
                            f"(a) {args.clients} clients x {args.events:,} events, {parser}",
                            f"all delivered in {a['total']:.2f} s (writer {a['written']:.2f} s);"
                            f" {a['delivered']:,.0f} events/s delivered",
                        )
                    )
                b = await replay(store, base, args.replay)
                rows.append(
                    (
                        f"(b) replay of {b['events']:,} events to one client",
                        f"{b['seconds']:.2f} s, {b['rate']:,.0f} events/s",
                    )
                )
                c = await latency(store, base, args.clients, args.latency_events, args.rate)
                rows.append(
                    (
                        f"(c) latency, {args.clients} clients, durable appends at {args.rate:g}/s",
                        f"p50 {c['p50']:.1f} ms, p99 {c['p99']:.1f} ms, max {c['max']:.1f} ms",
                    )
                )
            finally:
                await hub.close()
                server.should_exit = True
                await serving
    finally:
        shutil.rmtree(home, ignore_errors=True)
    width = max(len(name) for name, _ in rows)
    print(f"{'measurement':<{width}}  result")
    for name, result in rows:
        print(f"{name:<{width}}  {result}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--events", type=int, default=10_000, help="(a): events in the turn")
    parser.add_argument("--replay", type=int, default=100_000, help="(b): events replayed")
    parser.add_argument("--latency-events", type=int, default=1_000)
    parser.add_argument("--rate", type=float, default=200.0, help="(c): appends per second")
    parser.add_argument("--quick", action="store_true", help="a small version (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.clients, args.events, args.replay, args.latency_events = 20, 500, 5_000, 100
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
