"""Regressions found by an audit: inputs that used to answer 500 (``docs/service.md``: a 500
is a bug)."""

from __future__ import annotations

import asyncio
import glob
from pathlib import Path

import pytest

from tests.server.conftest import Api
from threadlog import open_store
from threadlog.errors import ThreadNotFound, UsageError
from threadlog.server.hub import StreamHub

FAR_FUTURE = "ffffffff-ffff-7fff-bfff-ffffffffffff"
"""A well-formed UUID whose first 48 bits, read as UUIDv7 milliseconds, are past the year 9999
(so is one random UUIDv4 in ten)."""


def test_a_far_future_thread_id_is_404_on_every_route(api: Api) -> None:
    for method, path, body in [
        ("GET", f"/v1/threads/{FAR_FUTURE}", None),
        ("GET", f"/v1/threads/{FAR_FUTURE}/events", None),
        ("GET", f"/v1/threads/{FAR_FUTURE}/events/1", None),
        ("GET", f"/v1/threads/{FAR_FUTURE}/view", None),
        ("POST", f"/v1/threads/{FAR_FUTURE}/turns", {"input": "x"}),
        ("POST", f"/v1/threads/{FAR_FUTURE}/leaf", {"to": "x"}),
        ("POST", f"/v1/threads/{FAR_FUTURE}/fork", {}),
    ]:
        response = api.bob.request(method, path, json=body)
        assert response.status_code == 404, (path, response.text)
        assert response.json()["error"]["type"] == "ThreadNotFound"


def test_an_idempotency_key_with_a_lone_surrogate_is_422(api: Api, workspace: str) -> None:
    thread = api.alice.post("/v1/threads", json={"cwd": workspace}).json()["thread_id"]
    response = api.alice.post(
        f"/v1/threads/{thread}/turns",
        content=b'{"input": "x", "idempotency_key": "\\ud800"}',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["type"] == "UsageError"
    detail = api.alice.get(f"/v1/threads/{thread}").json()
    assert detail["turns"] == []  # nothing was recorded


def test_the_embedded_store_refuses_a_far_future_id_cleanly(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "home")) as store:
        assert store.exists(FAR_FUTURE) is False
        with pytest.raises((ThreadNotFound, UsageError)):
            store.read(FAR_FUTURE)


def test_a_stream_over_a_damaged_log_ends_with_damaged(tmp_path: Path) -> None:
    """The hub used to let the `IntegrityError` escape after the 200 had started: the
    connection was cut with no frame (and logged as an unexpected error)."""
    with open_store(str(tmp_path / "home")) as store:
        thread = store.create_thread(principal="alice", title="t")
        store.flush()
        (path,) = glob.glob(str(tmp_path / "home" / "threads" / "*" / "*" / f"{thread}.jsonl"))
        data = bytearray(Path(path).read_bytes())
        data[40] ^= 0x01  # a flipped bit inside ord 1
        Path(path).write_bytes(bytes(data))

        async def run() -> bytes:
            hub = StreamHub(store, poll=0.05, heartbeat=5.0)
            await hub.start()
            try:
                chunks = []
                async with asyncio.timeout(10):
                    async for chunk in hub.stream(thread, 0):
                        chunks.append(chunk)
                return b"".join(chunks)
            finally:
                await hub.close()

        body = asyncio.run(run())
        assert body.startswith(b"event: end\n"), body
        assert b'"reason":"damaged"' in body and b'"after":0' in body
