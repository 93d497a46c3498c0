"""Snapshots while a session runs: by count and by time, off the append path, one in flight,
never breaking the session; and a session killed without closing resumes from its latest."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
from typing import TYPE_CHECKING, Any

import pytest

from threadlog import _clock, open_store
from threadlog.model import snapshot
from threadlog.model.nodes import Nodes
from threadlog.model.reducer import replay
from threadlog.runtime import Runtime, SnapshotPolicy
from threadlog.store.inmemory import MemoryStore

if TYPE_CHECKING:
    from threadlog.runtime import Session


@pytest.fixture(autouse=True)
def _still_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Time stands still unless a test moves it: a snapshot then costs no time, and the
    share a snapshot may take (`SnapshotPolicy.max_share`) never delays the next."""
    monkeypatch.setattr(_clock, "monotonic", lambda: 0.0)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class Saves:
    """Wraps a store's ``save_snapshot``: records the anchors, can fail or block."""

    def __init__(self, store: MemoryStore, *, fail: bool = False, refuse: bool = False) -> None:
        self.store = store
        self.ords: list[int] = []
        self.fail = fail
        self.refuse = refuse
        self.gate: threading.Event | None = None
        self.running = 0
        self.most_at_once = 0
        self._real = store.save_snapshot
        store.save_snapshot = self  # type: ignore[method-assign]

    def __call__(self, thread_id: str, payload: bytes, **kw: Any) -> bool:
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            if self.gate is not None:
                self.gate.wait(10)
            if self.fail:
                raise OSError("disk full")
            if self.refuse:
                return False
            self.ords.append(kw["ord"])
            return self._real(thread_id, payload, **kw)
        finally:
            self.running -= 1


async def appends(session: Session, n: int, *, settle: bool = True) -> None:
    for i in range(n):
        await session.append("custom.x", {"i": i})
        if settle:
            await session.snapshots.wait()


def test_a_snapshot_every_n_records_and_the_append_does_not_wait_for_it() -> None:
    store = MemoryStore()
    saves = Saves(store)

    async def main() -> None:
        runtime = Runtime(store, snapshots=SnapshotPolicy(every_records=5, every_seconds=None))
        session = await runtime.create("u")
        assert session.state.last_ord == 1  # thread.created
        await appends(session, 2)  # session.opened, 2 records
        assert saves.ords == []  # 4 records, not yet 5
        await session.append("custom.x", {"i": 2})  # the fifth record
        assert session.snapshots.saved == 0 and saves.ords == []  # scheduled, not done
        await session.snapshots.wait()
        assert saves.ords == [5]
        await appends(session, 12)
        assert saves.ords == [5, 10, 15]
        saved = store.load_snapshot(session.thread_id, snapshot.SNAPSHOT_VERSION)
        assert saved is not None and saved[0] == 15
        loaded = snapshot.load(saved[1])
        assert loaded is not None
        assert loaded[0] == replay(store.read(session.thread_id)[:15])
        await runtime.close()

    run(main())


def test_a_snapshot_after_t_seconds_if_a_record_came(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(_clock, "monotonic", lambda: now[0])
    store = MemoryStore()
    saves = Saves(store)

    async def main() -> None:
        runtime = Runtime(store, snapshots=SnapshotPolicy(every_records=None, every_seconds=30))
        session = await runtime.create("u")
        await appends(session, 50)
        assert saves.ords == []  # no count cadence, and no time passed
        now[0] += 29
        await appends(session, 1)
        assert saves.ords == []
        now[0] += 2
        await appends(session, 1)
        assert saves.ords == [session.state.last_ord]
        now[0] += 31  # time passes, nothing is appended: nothing to save
        await asyncio.sleep(0)
        assert len(saves.ords) == 1
        await appends(session, 1)  # the next record finds it due
        assert saves.ords[-1] == session.state.last_ord and len(saves.ords) == 2
        await runtime.close()

    run(main())


def test_a_failing_snapshot_never_breaks_the_session() -> None:
    store = MemoryStore()
    saves = Saves(store, fail=True)

    async def main() -> None:
        runtime = Runtime(store, snapshots=SnapshotPolicy(every_records=3, every_seconds=None))
        session = await runtime.create("u")
        await appends(session, 10)
        assert session.snapshots.failed >= 3 and session.snapshots.saved == 0
        saves.fail, saves.refuse = False, True  # refused (anchor not durable there)
        await appends(session, 4)
        assert session.snapshots.saved == 0
        saves.refuse = False
        await appends(session, 3)
        assert session.snapshots.saved == 1
        record = await session.append("custom.after", {})
        assert store.read(session.thread_id)[-1] == record
        await runtime.close()

    run(main())


def test_at_most_one_snapshot_in_flight() -> None:
    store = MemoryStore()
    saves = Saves(store)
    saves.gate = threading.Event()

    async def main() -> None:
        runtime = Runtime(store, snapshots=SnapshotPolicy(every_records=2, every_seconds=None))
        session = await runtime.create("u")
        await appends(session, 3, settle=False)
        for _ in range(50):  # let the first save reach the worker thread
            if saves.running:
                break
            await asyncio.sleep(0.01)
        await appends(session, 10, settle=False)  # thresholds crossed while one is saved
        assert saves.running == 1
        saves.gate.set()  # type: ignore[union-attr]
        await session.snapshots.wait()
        assert saves.most_at_once == 1 and len(saves.ords) == 1
        await appends(session, 2)  # due again: the next one goes
        assert len(saves.ords) == 2
        await runtime.close()

    run(main())


def test_nodes_stay_serialized_until_read_and_dump_without_decoding() -> None:
    store = MemoryStore()

    async def main() -> None:
        runtime = Runtime(store, snapshots=SnapshotPolicy(every_records=10, every_seconds=None))
        session = await runtime.create("u")
        await appends(session, 12)
        await runtime.close()
        runtime = Runtime(store)
        session = await runtime.open(session.thread_id)
        nodes = session.context.nodes
        assert isinstance(nodes, Nodes) and nodes.pending
        await session.append("custom.y", {})
        assert nodes.pending  # appending added a node without decoding the others
        payload = snapshot.dump(session.state, session.context)
        assert nodes.pending
        loaded = snapshot.load(payload)
        assert loaded is not None
        all_ids = [r.id for r in store.read(session.thread_id)]
        assert list(loaded[1].nodes) == all_ids  # every node, in log order
        assert list(nodes) == all_ids and not nodes.pending
        await runtime.close()

    run(main())


CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from threadlog.runtime import Runtime, SnapshotPolicy

    async def main():
        policy = SnapshotPolicy(every_records=40, every_seconds=None, max_share=1.0)
        runtime = Runtime(sys.argv[1], snapshots=policy)
        session = await runtime.create("u")
        for i in range(int(sys.argv[2])):
            await session.append("custom.x", {"i": i})
        await session.snapshots.wait()
        print(session.thread_id, session.snapshots.saved_ord, session.state.last_ord, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no close: no snapshot at close

    asyncio.run(main())
    """
)


def test_a_killed_session_resumes_from_the_snapshot_it_wrote_while_running(home: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, home, "130"], capture_output=True, text=True, env=env
    )
    assert done.returncode == -9, done.stderr
    thread, saved_ord, left = done.stdout.split()
    assert int(saved_ord) >= 120  # 3 snapshots by count, none at close

    async def main() -> Session:
        async with Runtime(home) as runtime:
            session = await runtime.resume(thread, continue_work=False)
            assert session.base_ord == int(saved_ord)
            assert session.replayed == int(left) - int(saved_ord)  # only the tail was reduced
            assert session.replayed < 40
        return session

    session = run(main())
    with open_store(home) as store:
        assert session.state == replay(store.read(thread))


def test_a_costly_snapshot_delays_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [50.0]
    monkeypatch.setattr(_clock, "monotonic", lambda: now[0])
    store = MemoryStore()
    saves = Saves(store)
    real = saves._real

    def slow(thread_id: str, payload: bytes, **kw: Any) -> bool:
        now[0] += 1.0  # this save takes a second
        return real(thread_id, payload, **kw)

    saves._real = slow  # type: ignore[method-assign]

    async def main() -> None:
        policy = SnapshotPolicy(every_records=2, every_seconds=None, max_share=0.1)
        runtime = Runtime(store, snapshots=policy)
        session = await runtime.create("u")
        await appends(session, 1)  # thread.created, session.opened, 1 record: due
        assert len(saves.ords) == 1
        await appends(session, 6)  # past the count, but 1 s of 10 is over
        assert len(saves.ords) == 1
        now[0] += 9.0
        await appends(session, 1)
        assert saves.ords[-1] == session.state.last_ord and len(saves.ords) == 2
        await runtime.close()

    run(main())


def test_packed_nodes_merge_with_the_ones_added_in_any_size() -> None:
    import zlib

    import orjson

    from threadlog.model.nodes import merge, pack

    many = {f"id{i}": [f"id{i - 1}", None, None] for i in range(200_000)}  # several MiB
    for old in ({}, {"a": [None, None, None]}, many):
        for added in ({}, {"z": ["a", {"role": "user", "content": "hi"}, None]}):
            merged = merge(pack(orjson.dumps(old)), orjson.dumps(added))
            assert orjson.loads(zlib.decompress(merged)) == {**old, **added}
