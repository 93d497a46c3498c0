"""A log opened from a snapshot anchor finds a parent before the anchor, a window at a time."""

from __future__ import annotations

import asyncio

import pytest

from threadlog import UsageError, open_store
from threadlog.runtime import Runtime, SnapshotPolicy
from threadlog.store.embedded import rolloutlog


def test_a_parent_before_the_anchor_is_found_in_bounded_windows(
    home: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rolloutlog, "_SEARCH_CHUNK", 700)  # a few records a window
    monkeypatch.setattr(rolloutlog, "_FIRST_LINE", 100)  # shorter than the first line

    async def build() -> str:
        async with Runtime(home, snapshots=SnapshotPolicy(on_close=1)) as runtime:
            session = await runtime.create("u")
            for i in range(600):
                await session.append("custom.x", {"i": i, "pad": "y" * 200})
            return session.thread_id  # closing saves a snapshot at the end

    thread = asyncio.run(build())
    with open_store(home) as store:
        ids = [r.id for r in store.read(thread)]
    for target in (ids[0], ids[1], ids[300], ids[-2]):
        with open_store(home) as store:
            store.acquire(thread)
            assert store._logs[thread]._first_ord > len(ids) - 1  # opened from the anchor
            record = store.append(thread, "custom.child", {}, parent=target)
            assert record.parent == target
    with open_store(home) as store, pytest.raises(UsageError):
        store.append(thread, "custom.child", {}, parent="01" + ids[5][2:-4] + "ffff")
