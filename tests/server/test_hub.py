"""The live stream's fan-out (`threadlog.server.hub`), driven directly: no HTTP.

Every test runs the hub on a real embedded store and checks what clients receive against
``store.read``: the ordinals and hashes of the records, in order, with nothing missing and
nothing twice.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threadlog.errors import UsageError
from threadlog.server.hub import StreamHub, parse_last_event_id
from threadlog.server.sse import end_frame, record_frame
from threadlog.store.protocol import Store

WAIT = 10.0  # seconds: a deadline for every wait, far above what the tests need


@dataclass
class Parsed:
    """What a client made of the bytes it was sent."""

    records: list[dict[str, object]] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    pings: int = 0
    end: dict[str, object] | None = None


class Reader:
    """An SSE parser fed with chunks (a chunk may end mid-event)."""

    def __init__(self) -> None:
        self.buffer = b""
        self.out = Parsed()

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk
        while b"\n\n" in self.buffer:
            block, self.buffer = self.buffer.split(b"\n\n", 1)
            self._event(block.decode())

    def _event(self, block: str) -> None:
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line.startswith(":"):
                assert line == ": ping"
                self.out.pings += 1
                continue
            name, _, value = line.partition(": ")
            assert name not in fields, f"field {name} twice in one event"
            fields[name] = value
        if not fields:
            return
        if fields.get("event") == "end":
            assert "id" not in fields
            self.out.end = json.loads(fields["data"])
            return
        assert set(fields) == {"id", "data"}
        record = json.loads(fields["data"])
        assert int(fields["id"]) == record["ord"]
        self.out.ids.append(record["ord"])
        self.out.records.append(record)


def expected(store: Store, thread: str, after: int = 0) -> list[tuple[int, str]]:
    return [(r.ord, r.hash) for r in store.read(thread, after)]


def got(parsed: Parsed) -> list[tuple[int, str]]:
    return [(int(r["ord"]), str(r["hash"])) for r in parsed.records]  # type: ignore[call-overload]


async def consume(
    stream: AsyncIterator[bytes], until_ord: int | None = None, *, pings: int = 0
) -> Parsed:
    """Read ``stream`` until it ends, it has sent ``until_ord``, or ``pings`` heartbeats."""
    reader = Reader()
    async with asyncio.timeout(WAIT):
        async for chunk in stream:
            reader.feed(chunk)
            out = reader.out
            if until_ord is not None and out.ids and out.ids[-1] >= until_ord:
                break
            if pings and out.pings >= pings:
                break
    await stream.aclose()  # type: ignore[attr-defined]
    return reader.out


def append_many(store: Store, thread: str, n: int, *, start: int = 0) -> int:
    last = 0
    for i in range(start, start + n):
        last = store.append(thread, "custom.test", {"i": i}, durable=(i % 7 == 0)).ord
    store.flush()
    return last


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


async def wait_for(predicate: object, what: str) -> None:
    async with asyncio.timeout(WAIT):
        while not predicate():  # type: ignore[operator]
            await asyncio.sleep(0.005)


# -- framing ------------------------------------------------------------------------------------


def test_parse_last_event_id() -> None:
    assert parse_last_event_id("42") == 42
    assert parse_last_event_id("0") == 0
    assert parse_last_event_id(" 7 ") == 7
    assert parse_last_event_id("") is None
    assert parse_last_event_id(None) is None
    assert parse_last_event_id(str(2**62)) == 2**62
    for bad in ["-1", "4.2", "abc", "0x10", "٣", "9" * 5000, "1 2", str(2**62 + 1), "9" * 20]:
        with pytest.raises(UsageError, match="bad Last-Event-ID"):
            parse_last_event_id(bad)


def test_frames(store: Store) -> None:
    thread = store.create_thread("local")
    record = store.read(thread)[0]
    frame = record_frame(record)
    assert frame.startswith(b"id: 1\ndata: {")
    assert frame.endswith(b"}\n\n") and frame.count(b"\n") == 3
    assert json.loads(frame.split(b"data: ", 1)[1]) == record.to_dict()
    assert end_frame("shutdown", 9) == b'event: end\ndata: {"reason":"shutdown","after":9}\n\n'


# -- replay, live and the seam ------------------------------------------------------------------


def test_replay_then_live_equals_the_log(store: Store) -> None:
    thread = store.create_thread("local")
    append_many(store, thread, 120)

    async def main() -> Parsed:
        hub = StreamHub(store, poll=0.05, ring=16)
        await hub.start()
        client = asyncio.create_task(consume(hub.stream(thread, 0), until_ord=421))
        for i in range(300):  # live appends race the replay
            await store.aappend(thread, "custom.test", {"i": i}, durable=(i % 25 == 0))
            if i % 40 == 0:
                await asyncio.sleep(0.01)
        store.flush()
        try:
            return await client
        finally:
            await hub.close()

    parsed = run(main())
    assert isinstance(parsed, Parsed)
    assert got(parsed) == expected(store, thread)
    assert parsed.ids == list(range(1, 422))


@pytest.mark.parametrize("after", [0, 1, 2, 37, 59, 60, 61, 75])
def test_resume_from_any_after(store: Store, after: int) -> None:
    thread = store.create_thread("local")
    append_many(store, thread, 59)  # ords 1..60

    async def main() -> Parsed:
        hub = StreamHub(store, poll=0.05, ring=8)
        await hub.start()
        client = asyncio.create_task(consume(hub.stream(thread, after), until_ord=100))
        await asyncio.sleep(0.02)
        append_many(store, thread, 40, start=59)  # ords 61..100
        try:
            return await client
        finally:
            await hub.close()

    parsed = run(main())
    assert isinstance(parsed, Parsed)
    assert got(parsed) == expected(store, thread, after)
    assert parsed.ids[0] == after + 1 and parsed.ids[-1] == 100


def test_many_concurrent_consumers_get_everything(store: Store) -> None:
    thread = store.create_thread("local")
    append_many(store, thread, 30)
    starts = [i % 31 for i in range(60)]

    async def main() -> list[Parsed]:
        hub = StreamHub(store, poll=0.05, ring=32)
        await hub.start()
        clients = [
            asyncio.create_task(consume(hub.stream(thread, a), until_ord=531)) for a in starts
        ]
        for i in range(500):
            await store.aappend(thread, "custom.test", {"i": i}, durable=(i % 50 == 0))
            if i % 100 == 0:
                await asyncio.sleep(0.005)
        store.flush()
        try:
            return list(await asyncio.gather(*clients))
        finally:
            assert hub.watched == 0  # every client left: the pump stopped
            await hub.close()

    results = run(main())
    assert isinstance(results, list)
    for after, parsed in zip(starts, results, strict=True):
        assert got(parsed) == expected(store, thread, after)


def test_a_lost_wake_up_loses_no_event(store: Store) -> None:
    """Without the store's notifications, the poll alone delivers every record."""
    thread = store.create_thread("local")

    async def main() -> Parsed:
        hub = StreamHub(store, poll=0.02)
        await hub.start()
        store.remove_listener(hub._listener)  # every wake-up is lost
        client = asyncio.create_task(consume(hub.stream(thread, 0), until_ord=81))
        for i in range(80):
            await store.aappend(thread, "custom.test", {"i": i})
        store.flush()
        try:
            return await client
        finally:
            await hub.close()

    parsed = run(main())
    assert isinstance(parsed, Parsed)
    assert got(parsed) == expected(store, thread)


def test_records_from_another_process_arrive_through_the_poll(store: Store, home: str) -> None:
    thread = store.create_thread("local")
    append_many(store, thread, 10)
    store.release(thread)  # the writer's lease: the other process takes it
    script = textwrap.dedent(
        f"""
        from threadlog import open_store
        with open_store({home!r}) as store:
            for i in range(200):
                store.append({thread!r}, "custom.other", {{"i": i}}, durable=(i % 20 == 0))
        """
    )

    async def main() -> Parsed:
        hub = StreamHub(store, poll=0.02, ring=64)
        await hub.start()
        client = asyncio.create_task(consume(hub.stream(thread, 5), until_ord=211))
        done = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-c", script], capture_output=True, timeout=60
        )
        assert done.returncode == 0, done.stderr.decode()
        try:
            return await client
        finally:
            await hub.close()

    parsed = run(main())
    assert isinstance(parsed, Parsed)
    assert got(parsed) == expected(store, thread, 5)
    assert [r["type"] for r in parsed.records][-1] == "custom.other"


# -- clients that stop, idle, lag or are shut down ----------------------------------------------


def test_a_consumer_that_stops_iterating_is_cleaned_up(store: Store) -> None:
    thread = store.create_thread("local")
    append_many(store, thread, 20)

    async def main() -> None:
        hub = StreamHub(store, poll=0.02)
        await hub.start()
        stream = hub.stream(thread, 0)
        first = await anext(stream)
        assert first.startswith(b"id: 1\n")
        assert hub.watched == 1
        await stream.aclose()  # type: ignore[attr-defined]
        assert hub.watched == 0
        me = asyncio.current_task()
        await wait_for(lambda: asyncio.all_tasks() == {me}, "the pump to stop")
        # a consumer dropped while waiting for records is cleaned up too
        waiting = asyncio.create_task(consume(hub.stream(thread, 21), until_ord=10**9))
        await wait_for(lambda: hub.watched == 1, "the client to subscribe")
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await wait_for(lambda: asyncio.all_tasks() == {me}, "the pump to stop")
        assert hub.watched == 0
        await hub.close()

    run(main())


def test_heartbeats_fill_silence(store: Store) -> None:
    thread = store.create_thread("local")

    async def main() -> Parsed:
        hub = StreamHub(store, heartbeat=0.05)
        await hub.start()
        try:
            return await consume(hub.stream(thread, 0), pings=3)
        finally:
            await hub.close()

    parsed = run(main())
    assert isinstance(parsed, Parsed)
    assert parsed.ids == [1] and parsed.pings == 3


def test_a_client_that_falls_behind_overflows(store: Store) -> None:
    thread = store.create_thread("local")
    append_many(store, thread, 4)  # ords 1..5

    async def main() -> tuple[Parsed, Parsed]:
        hub = StreamHub(store, poll=0.02, ring=4, max_lag=10)
        await hub.start()
        slow = hub.stream(thread, 0)
        reader = Reader()
        reader.feed(await anext(slow))
        assert reader.out.ids == [1, 2, 3, 4, 5]
        append_many(store, thread, 30, start=4)  # ords 6..35: 30 behind, more than 10
        topic = hub._topics[thread]
        await wait_for(lambda: topic.head == 35, "the pump to see the new records")
        async with asyncio.timeout(WAIT):
            async for chunk in slow:
                reader.feed(chunk)
        # a new client replaying the whole thread is catching up, not lagging
        fresh = await consume(hub.stream(thread, 0), until_ord=35)
        await hub.close()
        return reader.out, fresh

    result = run(main())
    assert isinstance(result, tuple)
    slow, fresh = result
    assert slow.end == {"reason": "overflow", "after": 5}
    assert slow.ids == [1, 2, 3, 4, 5]
    assert got(fresh) == expected(store, thread)


def test_close_ends_every_stream_with_the_end_frame(store: Store) -> None:
    thread = store.create_thread("local")
    append_many(store, thread, 9)

    async def main() -> tuple[list[Parsed], Parsed]:
        hub = StreamHub(store, poll=0.02)
        await hub.start()
        clients = [asyncio.create_task(consume(hub.stream(thread, a))) for a in (0, 4, 10)]
        await wait_for(lambda: thread in hub._topics and hub._topics[thread].clients == 3, "")
        await asyncio.sleep(0.05)
        await hub.close("shutdown")
        done = list(await asyncio.gather(*clients))
        later = await consume(hub.stream(thread, 3))
        return done, later

    result = run(main())
    assert isinstance(result, tuple)
    done, later = result
    for after, parsed in zip((0, 4, 10), done, strict=True):
        assert got(parsed) == expected(store, thread, after)
        assert parsed.end == {"reason": "shutdown", "after": 10}
    assert later.ids == [] and later.end == {"reason": "shutdown", "after": 3}


# -- the seam, cut anywhere ---------------------------------------------------------------------


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    cuts=st.lists(
        st.tuples(st.integers(min_value=1, max_value=4000), st.integers(0, 12)),
        min_size=1,
        max_size=12,
    )
)
def test_cutting_a_stream_anywhere_and_resuming_from_the_last_id_loses_nothing(
    store: Store, cuts: list[tuple[int, int]]
) -> None:
    """Connections dropped after any number of bytes (mid-event too), with records appended
    between them: what the client parsed, resuming each time from the last id it saw, is the
    log exactly."""
    thread = store.create_thread("local")
    append_many(store, thread, 40)

    async def main() -> list[dict[str, object]]:
        hub = StreamHub(store, poll=0.02, ring=8, batch=1)
        await hub.start()
        received: list[dict[str, object]] = []
        cursor = 0
        n = 40
        for budget, appended in cuts:
            stream = hub.stream(thread, cursor)
            reader = Reader()
            taken = 0
            async with asyncio.timeout(WAIT):
                while taken < budget:
                    head = store.read(thread, cursor)
                    if not head and taken == 0:
                        break  # nothing to send: a real client would wait; cut here
                    chunk = await anext(stream)
                    if chunk.startswith(b":"):
                        continue
                    piece = chunk[: budget - taken]
                    reader.feed(piece)
                    taken += len(piece)
                    if reader.out.ids and reader.out.ids[-1] == store.read(thread)[-1].ord:
                        break
            await stream.aclose()  # type: ignore[attr-defined]
            received.extend(reader.out.records)
            if reader.out.ids:
                cursor = reader.out.ids[-1]
            append_many(store, thread, appended, start=n)
            n += appended
        # finally read to the end
        last = store.read(thread)[-1].ord
        if cursor < last:
            tail = await consume(hub.stream(thread, cursor), until_ord=last)
            received.extend(tail.records)
        await hub.close()
        return received

    received = run(main())
    assert isinstance(received, list)
    assert [(r["ord"], r["hash"]) for r in received] == expected(store, thread)
