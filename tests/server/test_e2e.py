"""The service end to end, as a user runs it: ``threadlog serve`` in its own process, a real
HTTP client on a loopback port, the stream cut and resumed, the server killed and restarted.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.harness.service import ServerProcess
from tests.server.agents import READS
from threadlog import open_store
from threadlog.client import Client

Server = ServerProcess


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "README.md").write_text("# project\n\nSomething to read.\n")
    return work


def _frames(chunks: list[str]) -> list[dict[str, Any]]:
    """The records in SSE text (control events and comments left out)."""
    out = []
    for block in "".join(chunks).split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if ": " in line and line[0] != ":"
        )
        if "id" in fields and "data" in fields:
            out.append(orjson.loads(fields["data"]))
    return out


def test_cut_stream_fifty_times_the_concatenation_is_the_log(home: str) -> None:
    """Cut the stream at random points, reconnect with the last id: exactly the log, in order,
    while a writer keeps appending."""
    with open_store(home) as store:
        thread = store.create_thread("local", title="cut")
    server = Server(home)
    rng = random.Random(12)
    try:
        with open_store(home) as store:
            total = 1 + 1500

            def write() -> None:
                for i in range(1500):
                    store.append(
                        thread, "custom.test.tick", {"i": i, "pad": "x" * rng.randrange(300)}
                    )
                    if i % 50 == 0:
                        store.flush()  # custom events are buffered: make them durable, visible
                        time.sleep(0.01)
                store.flush()

            writer = threading.Thread(target=write)
            writer.start()
            got: list[dict[str, Any]] = []
            cursor = 0
            cuts = 0
            with httpx.Client(base_url=server.url, timeout=30) as http:
                while cursor < total:
                    budget = rng.randrange(1, 8000)  # cut after this many bytes, mid-frame or not
                    headers = {"Last-Event-ID": str(cursor)} if cuts % 2 else {}
                    params = {} if cuts % 2 else {"after": cursor}
                    received = b""
                    with http.stream(
                        "GET", f"/v1/threads/{thread}/stream", params=params, headers=headers
                    ) as response:
                        assert response.status_code == 200
                        for chunk in response.iter_raw():
                            received += chunk
                            if len(received) >= budget or b"id: %d\n" % total in received:
                                break
                    complete = received[:budget].rpartition(b"\n\n")[0]
                    seen = _frames([complete.decode() + "\n\n"]) if complete else []
                    got += seen
                    if seen:
                        cursor = seen[-1]["ord"]
                    cuts += 1
            writer.join()
            log = store.read(thread)
        assert [r["ord"] for r in got[: len(log)]] == [r.ord for r in log]
        assert [(r["id"], r["hash"]) for r in got] == [(r.id, r.hash) for r in log]
        assert cuts >= 50
    finally:
        assert server.stop() == 0


def test_the_client_stream_resumes_across_a_server_restart(home: str, workdir: Path) -> None:
    """The client's stream outlives the server: it reconnects from its cursor and delivers each
    record once."""
    server = Server(home, "--model", "python:tests.server.agents:reader")
    delivered = []
    try:
        with Client(server.url) as client:
            thread = client.create_thread(title="restart", cwd=str(workdir))["thread_id"]
            client.submit(thread, "read it", idempotency_key="k1")
            for record in client.stream(thread, max_backoff=0.5):
                delivered.append(record)
                if record.type == "tool_call.finished" and server.proc.poll() is None:
                    port = server.port
                    assert server.stop() == 0
                    # The same address: the stream reconnects to whatever listens there.
                    server = Server(home, "--model", "python:tests.server.agents:reader", port=port)
                if record.type == "turn.ended":
                    break
    finally:
        server.stop()
    with open_store(home) as store:
        log = store.read(thread)
    assert [r.ord for r in delivered] == list(range(1, len(delivered) + 1))
    assert [(r.id, r.hash) for r in delivered] == [(r.id, r.hash) for r in log[: len(delivered)]]


def test_kill_9_during_a_turn_loses_nothing_acknowledged_and_the_turn_resumes(
    home: str, workdir: Path
) -> None:
    server = Server(home, "--model", "python:tests.server.agents:reader")
    seen = []
    with Client(server.url) as client:
        thread = client.create_thread(title="killed", cwd=str(workdir))["thread_id"]
        ack = client.submit(thread, "read it", idempotency_key="once")
        for record in client.stream(thread, reconnect=False):
            seen.append(record)
            if record.type == "tool_call.finished":
                break
    assert server.stop(signal.SIGKILL) == -signal.SIGKILL
    with open_store(home) as store:
        log = {r.ord: r for r in store.read(thread)}
    assert ack["ord"] in log
    assert all(log[r.ord].hash == r.hash for r in seen)

    server = Server(home, "--model", "python:tests.server.agents:reader")
    ends = []
    try:
        with Client(server.url) as client:
            again = client.submit(thread, "read it", idempotency_key="once")
            assert again["duplicate"] is True and again["ord"] == ack["ord"]
            # The resumed server ends the cut-off turn "interrupted" and a continuation turn
            # carries the task on (`Runtime.resume`): the reads done are reused, the rest run.
            for record in client.stream(thread, after=seen[-1].ord):
                if record.type == "turn.ended":
                    ends.append(record.data["outcome"])
                    if record.data["outcome"] != "interrupted":
                        break
        assert ends == ["interrupted", "completed"]
    finally:
        assert server.stop() == 0
    with open_store(home) as store:
        assert store.verify(thread).ok
        records = store.read(thread)
    types = [r.type for r in records]
    assert types.count("thread.resumed") == 1
    started = [r for r in records if r.type == "turn.started"]
    # the submitted turn (once, the second submit was a duplicate), then its continuation
    assert [r.id for r in started][:1] == [ack["event_id"]] and len(started) == 2
    assert started[1].ord > types.index("thread.resumed")
    finished = [r.data["call_id"] for r in records if r.type == "tool_call.finished"]
    assert len(finished) == len(set(finished)) == READS  # each read once: none lost, none twice


def test_sigterm_ends_streams_with_a_final_event_and_closes_sessions(
    home: str, workdir: Path
) -> None:
    server = Server(home, "--model", "python:tests.server.agents:writer")
    with Client(server.url) as client:
        thread = client.create_thread(title="stop", cwd=str(workdir), input="append")["thread_id"]
    chunks: list[str] = []
    with httpx.Client(base_url=server.url, timeout=30) as http:
        with http.stream("GET", f"/v1/threads/{thread}/stream") as response:
            for text in response.iter_text():
                chunks.append(text)
                if "tool_call.proposed" in text and server.proc.poll() is None:
                    server.proc.send_signal(signal.SIGTERM)
    assert server.stop() == 0
    body = "".join(chunks)
    assert "event: end" in body and '"shutdown"' in body
    with open_store(home) as store:
        types = [r.type for r in store.read(thread)]
        assert store.verify(thread).ok
    assert types[-1] == "session.closed"
