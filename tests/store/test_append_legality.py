"""`store.append` cannot brick a thread: an event the reducer would reject is never written.

A second ``turn.ended`` or a result before its start used to be written, and from then on
``verify``, ``state``, ``show`` and ``resume --salvage`` all failed. Legality is checked before
writing, on every append path, by default: the append raises `UsageError` and writes nothing.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Iterator
from typing import Any

import pytest

from threadlog import IntegrityError, StorageError, UsageError, open_store
from threadlog._clock import new_id
from threadlog.model import codec, snapshot
from threadlog.model.context import Context
from threadlog.model.envelope import encode_record
from threadlog.model.reducer import replay
from threadlog.store._fileops import FileOps
from threadlog.store.embedded import writers
from threadlog.store.protocol import Store


@pytest.fixture(params=["embedded", "memory"])
def any_store(request: pytest.FixtureRequest, home: str) -> Iterator[Store]:
    target = home if request.param == "embedded" else "memory://"
    with open_store(target) as store:
        yield store


def _ended_thread(store: Store) -> str:
    thread = store.create_thread("alice")
    store.append(thread, "turn.started", {"turn_id": "t1", "input": "hi"})
    store.append(thread, "turn.ended", {"turn_id": "t1", "outcome": "completed"})
    return thread


def test_a_second_turn_end_is_refused_and_nothing_is_written(any_store: Store) -> None:
    thread = _ended_thread(any_store)
    before = any_store.read(thread)
    with pytest.raises(UsageError, match="turn"):
        any_store.append(thread, "turn.ended", {"turn_id": "t1", "outcome": "completed"})
    assert any_store.read(thread) == before
    assert any_store.verify(thread).ok
    assert any_store.state(thread).turns["t1"].status == "completed"
    # the thread still takes legal events, at the next ordinal
    record = any_store.append(thread, "turn.started", {"turn_id": "t2", "input": "again"})
    assert record.ord == before[-1].ord + 1


def test_a_result_before_its_start_is_refused_on_the_async_path(any_store: Store) -> None:
    thread = _ended_thread(any_store)
    before = any_store.read(thread)

    async def main() -> None:
        with pytest.raises(UsageError):
            await any_store.aappend(
                thread, "tool_call.finished", {"call_id": "nope", "ok": True, "result": 1}
            )

    asyncio.run(main())
    assert any_store.read(thread) == before


def test_a_refused_event_survives_reopening_as_never_written(home: str) -> None:
    with open_store(home) as store:
        thread = _ended_thread(store)
        with pytest.raises(UsageError):
            store.append(thread, "turn.ended", {"turn_id": "t1", "outcome": "failed"})
    with open_store(home) as store:
        assert [r.type for r in store.read(thread)][-1] == "turn.ended"
        assert len(store.read(thread)) == 3
        assert store.verify(thread).ok


# -- a thread that already holds an illegal record (written by an older threadlog) ----------


def plant_illegal_end(home: str, thread: str) -> int:
    """Append a second ``turn.ended`` straight to the rollout, correctly hash-chained, the
    way a threadlog without the append check wrote it; its ordinal."""
    with open_store(home) as store:
        last = store.read(thread)[-1]
        path = store.path_of(thread)
    line, _ = encode_record(
        id=new_id(),
        thread=thread,
        ord=last.ord + 1,
        parent=last.id,
        ts=last.ts,
        type="turn.ended",
        data_json=codec.canonical({"turn_id": "t1", "outcome": "failed"}),
        prev=last.hash,
    )
    with open(path, "ab") as f:
        f.write(line)
    return last.ord + 1


def test_a_stored_illegal_record_is_reported_with_its_ordinal(home: str) -> None:
    with open_store(home) as store:
        thread = _ended_thread(store)
    bad = plant_illegal_end(home, thread)
    with open_store(home) as store:
        assert store.verify(thread, check_events=False).ok  # the envelope is sound
        report = store.verify(thread)
        assert not report.ok and report.first_bad_ord == bad == 4
        assert "already ended" in str(report.error)
        with pytest.raises(IntegrityError) as info:
            store.state(thread)
        assert info.value.ord == bad and info.value.thread_id == thread
        assert "illegal event turn.ended" in str(info.value)
        # appending to it would build on a log nobody can reduce: refused, nothing written
        with pytest.raises(IntegrityError) as info:
            store.append(thread, "custom.x", {})
        assert info.value.ord == bad
        assert len(store.read(thread)) == bad


# -- the state a writer checks against -------------------------------------------------------


def _snapshotted(home: str) -> str:
    """A thread with a snapshot of its state after ord 40, and 10 records after it."""
    with open_store(home) as store:
        thread = _ended_thread(store)
        for i in range(37):
            store.append(thread, "custom.x", {"i": i})
        records = store.read(thread)
        payload = snapshot.dump(replay(records), Context.from_records(records))
        last = records[-1]
        assert store.save_snapshot(
            thread, payload, ord=last.ord, hash=last.hash, version=snapshot.SNAPSHOT_VERSION
        )
        for i in range(10):
            store.append(thread, "custom.y", {"i": i})
    return thread


def test_a_writers_first_append_starts_from_the_latest_snapshot(
    home: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = _snapshotted(home)
    reduced: list[tuple[int, bool]] = []
    reduce_log = writers.reduce_log

    def spy(thread_id: str, records: Any, state: Any = None) -> Any:
        records = list(records)
        reduced.append((len(records), state is not None))
        return reduce_log(thread_id, records, state)

    monkeypatch.setattr(writers, "reduce_log", spy)
    with open_store(home) as store:  # the store's own checkpoint (taken at close) is later
        with pytest.raises(UsageError, match="already ended"):
            store.append(thread, "turn.ended", {"turn_id": "t1", "outcome": "completed"})
        assert reduced == [(0, True)]  # the checkpoint's state, nothing after it
        store.index.run("DELETE FROM checkpoints")
    reduced.clear()
    with open_store(home) as store:
        store.index.run("DELETE FROM checkpoints")  # (the close took one again)
    with open_store(home) as store:
        with pytest.raises(UsageError, match="already ended"):
            store.append(thread, "turn.ended", {"turn_id": "t1", "outcome": "completed"})
        assert reduced == [(10, True)]  # the snapshot's state, then the 10 records after it
        store.append(thread, "turn.started", {"turn_id": "t2", "input": "x"})
        with pytest.raises(UsageError, match="is running"):
            store.append(thread, "turn.started", {"turn_id": "t3", "input": "x"})
        assert reduced == [(10, True)]  # built once
        assert store.verify(thread).ok


def test_a_snapshot_of_another_version_is_not_trusted(home: str) -> None:
    thread = _snapshotted(home)
    with open_store(home) as store:
        records = store.read(thread, limit=40)
        store.acquire(thread)  # (a snapshot is saved by the thread's writer)
        # the same anchor, but a payload another threadlog wrote: the whole log is reduced
        assert store.save_snapshot(thread, b"{}", ord=40, hash=records[-1].hash, version="another")
    with open_store(home) as store:
        with pytest.raises(UsageError, match="already ended"):
            store.append(thread, "turn.ended", {"turn_id": "t1", "outcome": "completed"})
        assert store.append(thread, "turn.started", {"turn_id": "t2", "input": "x"}).ord == 51


class FailingSync(FileOps):
    """Fails every fdatasync once ``fail`` is set."""

    fail = False

    def fdatasync(self, fd: int) -> None:
        if self.fail:
            raise OSError(errno.EIO, "injected EIO")
        super().fdatasync(fd)


def test_a_record_admitted_but_lost_to_a_failed_write_is_not_assumed(home: str) -> None:
    """The turn's end was checked and queued, then its write failed (fail-stop): nothing is
    acknowledged after it, and reopening checks against the log as it is, without it."""
    ops = FailingSync()
    store = open_store(home, fops=ops)
    thread = store.create_thread("a")
    store.append(thread, "turn.started", {"turn_id": "t1", "input": "hi"})
    ops.fail = True
    with pytest.raises(StorageError):
        store.append(thread, "turn.ended", {"turn_id": "t1", "outcome": "completed"})
    ops.fail = False
    with pytest.raises(StorageError):  # not a refusal: the store stopped acknowledging
        store.append(thread, "turn.started", {"turn_id": "t2", "input": "x"})
    store.close()
    with open_store(home) as store:
        assert [r.type for r in store.read(thread)] == ["thread.created", "turn.started"]
        with pytest.raises(UsageError, match="is running"):
            store.append(thread, "turn.started", {"turn_id": "t2", "input": "x"})
        store.append(thread, "turn.ended", {"turn_id": "t1", "outcome": "completed"})
        assert store.verify(thread).ok
