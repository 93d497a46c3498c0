"""Snapshots: resume costs the tail, and a snapshot is only trusted when its anchor verifies."""

from __future__ import annotations

import asyncio
from typing import Any

from threadlog import DuplicateEventConflict, open_store
from threadlog.model import snapshot
from threadlog.model.ids import uuid7
from threadlog.model.reducer import replay
from threadlog.runtime import Reply, Runtime, ScriptedModel


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def build(home: str, n: int) -> tuple[str, str]:
    """A thread with a finished turn and n custom records; returns (thread, an explicit id)."""
    explicit = uuid7(1_700_000_000_000, b"\x01" * 10)

    async def main() -> str:
        async with Runtime(home, model=ScriptedModel([Reply("hi")])) as runtime:
            session = await runtime.create("u")
            await session.submit("hello")
            await session.wait_idle(10)
            await session.append("custom.marker", {"i": -1}, id=explicit)
            return session.thread_id

    thread = run(main())
    with open_store(home) as store:
        for i in range(n):
            store.append(thread, "custom.x", {"i": i}, durable=False)
    return thread, explicit


def open_and_close(home: str, thread: str) -> tuple[int, Any]:
    """Open a session and close it; returns (the rollout's first loaded ord, the state),
    and checks that the session started from a snapshot exactly when the store had one."""

    async def main() -> tuple[int, Any]:
        async with Runtime(home) as runtime:
            usable = runtime.store.load_snapshot(thread, snapshot.SNAPSHOT_VERSION)  # type: ignore[attr-defined]
            session = await runtime.open(thread)
            assert session.base_ord == (usable[0] if usable else 0)
            rollout = runtime.store._logs[thread]  # type: ignore[attr-defined]
            return rollout._first_ord, session.state

    return run(main())  # type: ignore[no-any-return]


def _no_checkpoints(home: str) -> None:
    """Drop the store's own checkpoints (`store.embedded.checkpoint`), so that an open starts
    from the runtime's snapshot or from ord 1, as these tests look at."""
    with open_store(home) as store:
        store.index.run("DELETE FROM checkpoints")  # type: ignore[attr-defined]


def test_a_closed_session_leaves_a_snapshot_and_reopening_reads_only_the_tail(home: str) -> None:
    thread, _ = build(home, 2400)
    _no_checkpoints(home)
    first_ord, state = open_and_close(home, thread)  # no snapshot yet: full replay, then saved
    assert first_ord == 1
    with open_store(home) as store:
        full = replay(store.read(thread))
        saved = store.load_snapshot(thread, snapshot.SNAPSHOT_VERSION)
        assert saved is not None and saved[0] == full.last_ord
        store.append(thread, "custom.after", {"x": 1})
        tail = store.read(thread, after=saved[0])
        assert [r.type for r in tail] == ["custom.after"]
    _no_checkpoints(home)
    first_ord, state = open_and_close(home, thread)
    assert first_ord == saved[0] + 1  # the prefix was not scanned
    with open_store(home) as store:
        assert state == replay(store.read(thread))


def test_ids_in_the_snapshotted_prefix_still_deduplicate(home: str) -> None:
    thread, explicit = build(home, 2100)
    open_and_close(home, thread)
    with open_store(home) as store:
        store.acquire(thread)
        assert store._logs[thread]._first_ord > 1
        marker = next(r for r in store.read(thread) if r.id == explicit)
        record = store.append(thread, "custom.marker", {"i": -1}, id=explicit)
        assert record == marker  # the stored one, found in the prefix
        try:
            store.append(thread, "custom.marker", {"i": 0}, id=explicit)
        except DuplicateEventConflict as exc:
            assert exc.ord == marker.ord
        else:
            raise AssertionError("no conflict")


def test_a_snapshot_whose_anchor_does_not_verify_is_ignored(home: str) -> None:
    thread, _ = build(home, 2100)
    open_and_close(home, thread)
    with open_store(home) as store:
        ord_, hash_, end, version, payload = store.index.get_snapshot(thread)  # type: ignore[misc]
        store.index.put_snapshot(thread, ord_, "0" * 64, end, version, payload)
        assert store.load_snapshot(thread, version) is None
        store.index.put_snapshot(thread, ord_, hash_, end, "0/old", payload)
        assert store.load_snapshot(thread, snapshot.SNAPSHOT_VERSION) is None
    _, state = open_and_close(home, thread)  # the session replays the whole log instead
    with open_store(home) as store:
        assert state == replay(store.read(thread))
