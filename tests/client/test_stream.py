"""Client.stream / AsyncClient.stream: resume from the last ordinal after a cut, never deliver
a record twice, back off between attempts, stop for good on a 4xx. Both clients, one script."""

from __future__ import annotations

import httpx
import pytest

from tests.client._service import Script, end, error, events, follow, frame
from threadlog.client import ServiceError, ServiceUnreachable
from threadlog.client._stream import SEEN_WINDOW, Follow
from threadlog.model.envelope import Record

KINDS = ["sync", "async"]


def ords(records: list[Record]) -> list[int]:
    return [r.ord for r in records]


def last_event_ids(script: Script) -> list[str]:
    return [r.headers["last-event-id"] for r in script.requests]


@pytest.mark.parametrize("kind", KINDS)
def test_a_cut_reconnects_from_the_last_ord_and_drops_what_comes_again(kind: str) -> None:
    script = Script(
        # frames 1 and 2, then half of frame 3 and the connection breaks
        events(frame(1), frame(2), frame(3)[:20], cut=True),
        # the server replays from the cursor; a record at or below it is dropped anyway
        events(frame(2), frame(3), frame(4), end("deleted", 4)),
    )
    sleeps: list[float] = []
    got = follow(kind, script, sleeps=sleeps)
    assert ords(got) == [1, 2, 3, 4]
    assert last_event_ids(script) == ["0", "2"]
    assert [r.url.params["after"] for r in script.requests] == ["0", "2"]
    assert script.requests[0].url.path == "/v1/threads/t1/stream"
    assert script.requests[0].headers["accept"] == "text/event-stream"
    assert len(sleeps) == 1 and 0.05 <= sleeps[0] <= 0.1


@pytest.mark.parametrize("kind", KINDS)
def test_a_body_that_just_ends_is_a_drop_too(kind: str) -> None:
    script = Script(events(frame(1)), events(frame(2), end("deleted")))
    assert ords(follow(kind, script)) == [1, 2]
    assert last_event_ids(script) == ["0", "1"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_record_whose_event_id_was_delivered_is_dropped(kind: str) -> None:
    script = Script(
        events(frame(1), frame(2), frame(3, id="ev-2"), frame(4), end("deleted")),
    )
    got = follow(kind, script)
    assert ords(got) == [1, 2, 4]
    assert [r.id for r in got] == ["ev-1", "ev-2", "ev-4"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_end_frame_reconnects_unless_the_thread_was_deleted(kind: str) -> None:
    script = Script(
        events(frame(1), end("shutdown", 1), frame(9)),  # nothing after `end` is read
        events(frame(2), end("overflow", 2)),
        events(frame(3), end("deleted", 3)),
    )
    assert ords(follow(kind, script, after=0)) == [1, 2, 3]
    assert last_event_ids(script) == ["0", "1", "2"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_backoff_doubles_to_the_cap_and_resets_after_a_record(kind: str) -> None:
    down = httpx.ConnectError("connection refused")
    script = Script(
        events(frame(1), cut=True),
        down,
        lambda _: error(503, "HTTPError", "restarting"),
        down,
        down,
        events(frame(2)),
        down,
        events(frame(3), end("deleted")),
    )
    sleeps: list[float] = []
    assert ords(follow(kind, script, sleeps=sleeps, max_backoff=0.3)) == [1, 2, 3]
    caps = [0.1, 0.2, 0.3, 0.3, 0.3, 0.1, 0.2]  # reset by record 2
    assert len(sleeps) == len(caps)
    for delay, cap in zip(sleeps, caps, strict=True):
        assert cap / 2 <= delay <= cap
    assert last_event_ids(script) == ["0", "1", "1", "1", "1", "1", "2", "2"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("status", "type_"),
    [(401, "Unauthorized"), (404, "ThreadNotFound"), (403, "Forbidden"), (400, "BadRequest")],
)
def test_a_4xx_is_never_retried(kind: str, status: int, type_: str) -> None:
    script = Script(events(frame(1), cut=True), lambda _: error(status, type_, "no"))
    got: list[Record] = []
    with pytest.raises(ServiceError) as caught:
        follow(kind, script, got=got)
    assert (caught.value.status, caught.value.type) == (status, type_)
    assert ords(got) == [1]
    assert len(script.requests) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_a_first_refusal_raises_at_once(kind: str) -> None:
    script = Script(lambda _: error(404, "ThreadNotFound", "no thread 'zz'"))
    with pytest.raises(ServiceError, match="no thread 'zz'"):
        follow(kind, script, thread="zz")
    script = Script(httpx.ConnectError("connection refused"))
    with pytest.raises(ServiceUnreachable, match="threadlog serve"):
        follow(kind, script)
    assert len(script.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_without_reconnect_the_first_drop_ends_it(kind: str) -> None:
    for reply in (events(frame(1), frame(2)), events(frame(1), frame(2), cut=True)):
        script = Script(reply)
        sleeps: list[float] = []
        assert ords(follow(kind, script, sleeps=sleeps, reconnect=False)) == [1, 2]
        assert sleeps == [] and len(script.requests) == 1
    script = Script(events(frame(1), end("shutdown"), frame(2)))
    assert ords(follow(kind, script, reconnect=False)) == [1]


@pytest.mark.parametrize("kind", KINDS)
def test_heartbeats_and_unknown_events_are_ignored(kind: str) -> None:
    script = Script(
        events(
            b": ping\n\n",
            frame(1),
            b": ping\n\n",
            b"event: something.new\ndata: {}\n\n",
            frame(2),
            end("deleted"),
        )
    )
    assert ords(follow(kind, script)) == [1, 2]


@pytest.mark.parametrize("kind", KINDS)
def test_frames_split_anywhere_are_put_back_together(kind: str) -> None:
    body = b"".join([frame(1), b": ping\r\n\r\n", frame(2), end("deleted")])
    chunks = [body[i : i + 7] for i in range(0, len(body), 7)]
    assert ords(follow(kind, Script(events(*chunks)))) == [1, 2]


@pytest.mark.parametrize("kind", KINDS)
def test_stop_ends_it_after_the_record_it_accepts(kind: str) -> None:
    script = Script(events(frame(1), frame(2, type="turn.ended"), frame(3)))
    got = follow(kind, script, stop=lambda r: r.type == "turn.ended", after=0)
    assert ords(got) == [1, 2]


@pytest.mark.parametrize("kind", KINDS)
def test_after_skips_what_the_caller_has(kind: str) -> None:
    script = Script(events(frame(5), frame(6), end("deleted")))
    assert ords(follow(kind, script, after=4)) == [5, 6]
    assert last_event_ids(script) == ["4"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_answer_that_is_not_an_event_stream_is_refused(kind: str) -> None:
    script = Script(httpx.Response(200, json={"threads": []}))
    with pytest.raises(ServiceError) as caught:
        follow(kind, script)
    assert caught.value.type == "InvalidResponse"


def test_the_seen_window_is_bounded() -> None:
    state = Follow("http://h", "t1", after=0, reconnect=True, max_backoff=1.0, stop=None)
    from httpx_sse import ServerSentEvent

    for n in range(1, SEEN_WINDOW + 50):
        data = frame(n).split(b"data: ", 1)[1].strip().decode()
        assert state.feed(ServerSentEvent(data=data, id=str(n))) is not None
    assert len(state._seen) == SEEN_WINDOW
    assert "ev-1" not in state._seen and f"ev-{SEEN_WINDOW + 49}" in state._seen


def test_leaving_the_loop_early_closes_the_connection() -> None:
    import asyncio
    from contextlib import aclosing

    from tests.client._service import URL
    from threadlog.client import AsyncClient, Client

    closed: list[bool] = []

    class Tracked(httpx.ByteStream):
        def close(self) -> None:
            closed.append(True)

        async def aclose(self) -> None:
            closed.append(True)

    def reply(_: httpx.Request) -> httpx.Response:
        body = frame(1) + frame(2) + frame(3)
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, headers=headers, stream=Tracked(body))

    with Client(URL, transport=Script(reply).transport()) as client:
        for record in client.stream("t1"):
            assert record.ord == 1
            break
    assert closed == [True]

    async def main() -> None:
        async with AsyncClient(URL, transport=Script(reply).transport()) as client:
            async with aclosing(client.stream("t1")) as stream:
                async for record in stream:
                    assert record.ord == 1
                    break

    asyncio.run(main())
    assert closed == [True, True]
