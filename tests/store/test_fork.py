"""Forks inherit their prefix byte for byte (see `threadlog.model.lineage`)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import orjson
import pytest

from threadlog import EmbeddedStore, IntegrityError, StorageError, UsageError, open_store
from threadlog.model import codec
from threadlog.model.envelope import encode_record, parse_line
from threadlog.store._fileops import FileOps


def lines_of(store: EmbeddedStore, thread: str) -> list[bytes]:
    return Path(store.path_of(thread)).read_bytes().splitlines(keepends=True)


def source_thread(store: EmbeddedStore, n: int = 6) -> str:
    thread = store.create_thread("alice", model="m")
    for i in range(n - 1):
        store.append(thread, "custom.x", {"i": i})
    return thread


def rewrite_first_line(store: EmbeddedStore, thread: str, change: object) -> None:
    """Rewrite a thread's ord 1 with ``change(data)`` applied and a valid hash of its own."""
    path = Path(store.path_of(thread))
    lines = path.read_bytes().splitlines(keepends=True)
    first = parse_line(lines[0])
    data = orjson.loads(orjson.dumps(first.data))
    change(data)  # type: ignore[operator]
    lines[0], _ = encode_record(
        id=first.id,
        thread=first.thread,
        ord=1,
        parent=None,
        ts=first.ts,
        type=first.type,
        data_json=codec.canonical(data),
        prev=None,
    )
    path.write_bytes(b"".join(lines))


def test_the_inherited_records_are_the_sources_bytes(store: EmbeddedStore) -> None:
    thread = source_thread(store)
    child = store.fork(thread, 4)
    source, copy = lines_of(store, thread), lines_of(store, child)
    assert copy[1:4] == source[1:4] and len(copy) == 4
    records = store.read(child)
    assert [r.thread for r in records] == [child, thread, thread, thread]
    lineage = store.state(child).lineage
    assert lineage is not None
    assert lineage["copied"] == {"prev": records[1].prev, "threads": [thread]}
    assert lineage["hash"] == records[3].hash and store.verify(child).ok
    # the child's own records continue the inherited chain
    own = store.append(child, "custom.x", {"i": "child"})
    assert (own.ord, own.prev, own.thread) == (5, records[3].hash, child)


def test_a_fork_at_ord_1_inherits_nothing(store: EmbeddedStore) -> None:
    thread = source_thread(store)
    child = store.fork(thread, 1)
    lineage = store.state(child).lineage
    assert lineage is not None and "copied" not in lineage
    assert store.append(child, "custom.x", {}).ord == 2 and store.verify(child).ok


@pytest.mark.parametrize("at", [3, 6, 8])
def test_a_fork_of_a_fork(home: str, at: int) -> None:
    with open_store(home) as store:
        thread = source_thread(store)
        child = store.fork(thread, 5)
        for i in range(3):
            store.append(child, "custom.x", {"i": f"child {i}"})
        grandchild = store.fork(child, at, changes={"model": "other"})
    with open_store(home) as store:  # reopened: the index catches up from the files
        records = store.read(grandchild)
        writers = [r.thread for r in records]
        expected = [grandchild] + [thread] * min(at - 1, 4) + [child] * max(0, at - 5)
        assert writers == [*expected, grandchild]  # the last is the child's settings
        lineage = store.state(grandchild).lineage
        assert lineage is not None and lineage["thread"] == child
        assert sorted(lineage["copied"]["threads"]) == sorted(
            {thread} | ({child} if at > 5 else set())
        )
        assert store.state(grandchild).config == {"model": "other"}
        assert store.verify(grandchild).ok and store.verify(child).ok
        store.append(grandchild, "custom.x", {"i": "grandchild"})
        info = store.thread_info(grandchild)
        assert (info.last_ord, info.forked_from) == (at + 2, child)
        # inherited records did not touch the ancestors' rows in the index
        assert store.thread_info(thread).last_ord == 6
        assert store.thread_info(child).last_ord == 8


def test_damage_in_the_source_fails_the_fork_and_leaves_nothing(store: EmbeddedStore) -> None:
    thread = source_thread(store)
    store.release(thread)
    path = Path(store.path_of(thread))
    path.write_bytes(path.read_bytes().replace(b'"i":2', b'"i":7'))
    with pytest.raises(IntegrityError) as info:
        store.fork(thread)
    assert info.value.ord == 4
    assert store.thread_ids() == [thread]
    assert not list(path.parent.glob(".*.tmp"))


def test_damage_in_the_inherited_prefix_is_found_in_the_child(store: EmbeddedStore) -> None:
    thread = source_thread(store)
    child = store.fork(thread)
    path = Path(store.path_of(child))
    path.write_bytes(path.read_bytes().replace(b'"i":1', b'"i":9'))
    report = store.verify(child)
    assert not report.ok and report.error is not None and report.error.ord == 3


def test_a_header_that_does_not_match_its_prefix_is_refused(store: EmbeddedStore) -> None:
    thread = source_thread(store)
    child = store.fork(thread)
    rewrite_first_line(store, child, lambda d: d["lineage"].update(hash="0" * 64))
    report = store.verify(child)
    assert not report.ok and "lineage hash" in str(report.error)


def test_records_of_a_thread_the_lineage_does_not_name_are_refused(
    store: EmbeddedStore,
) -> None:
    thread = source_thread(store)
    child = store.fork(thread)
    other = "01a22a49-510c-7584-9d29-5f2f1ad5387b"
    rewrite_first_line(store, child, lambda d: d["lineage"]["copied"].update(threads=[other]))
    report = store.verify(child)
    assert not report.ok and report.error is not None and report.error.ord == 2
    assert "belongs to thread" in str(report.error)


def test_a_snapshot_anchored_on_an_inherited_record_is_used(home: str) -> None:
    with open_store(home) as store:
        thread = source_thread(store)
        child = store.fork(thread)
        last = store.read(child)[-1]
        assert last.thread == thread
        store.acquire(child)
        assert store.save_snapshot(child, b"{}", ord=last.ord, hash=last.hash, version="t")
        assert store.load_snapshot(child, "t") == (6, b"{}")
    with open_store(home) as store:
        assert store.load_snapshot(child, "t") == (6, b"{}")


def test_appends_to_a_new_fork_reach_the_index_after_its_prefix(store: EmbeddedStore) -> None:
    thread = source_thread(store)
    child = store.fork(thread, 3)
    store.append(child, "custom.x", {"i": "buffered"}, durable=False)
    store.flush()  # the fork's scan must be applied before the append that follows it
    assert store.thread_info(child).last_ord == 4


def test_a_fork_shares_artifacts_by_hash(home: str) -> None:
    big = "z" * 300_000
    with open_store(home) as store:
        thread = store.create_thread("alice")
        store.append(thread, "custom.blob", {"text": big})
        artifacts = sorted(p for p in Path(home, "artifacts").rglob("*") if p.is_file())
        child = store.fork(thread)
        assert os.path.getsize(store.path_of(child)) < 10_000  # the record holds a reference
        assert sorted(p for p in Path(home, "artifacts").rglob("*") if p.is_file()) == artifacts
        assert len(artifacts) == 1
        assert store.resolve(store.read(child)[1].data)["text"] == big


def temp_files(home: str) -> list[Path]:
    return list(Path(home, "threads").glob("*/*/.*.tmp"))


def test_ctrl_c_during_a_fork_waits_for_its_writer_and_leaves_nothing(home: str) -> None:
    """The fork's writer thread may still be writing when the fork is interrupted: its file
    must not be closed under it (the number would be reused by the next file opened)."""
    gate, entered = threading.Event(), threading.Event()

    class Slow(FileOps):
        armed = False

        def write(self, fd: int, data: bytes | memoryview) -> int:
            if self.armed and threading.current_thread() is not threading.main_thread():
                entered.set()
                gate.wait()
            return super().write(fd, data)

    def interrupt() -> None:
        entered.wait()
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.3)
        gate.set()

    fops = Slow()
    with EmbeddedStore(home, fops=fops) as store:
        thread = source_thread(store, 30)
        threading.Thread(target=interrupt, daemon=True).start()
        fops.armed = True
        with pytest.raises(KeyboardInterrupt):
            store.fork(thread)
        fops.armed = False
        assert gate.is_set()  # the fork gave up only once its writer was done
        assert store.thread_ids() == [thread] and not temp_files(home)


def test_an_error_closing_the_fork_fails_it_cleanly(home: str) -> None:
    class EioOnClose(FileOps):
        armed = False

        def close(self, fd: int) -> None:
            super().close(fd)
            if self.armed:
                self.armed = False
                raise OSError(5, "close: EIO")

    fops = EioOnClose()
    with EmbeddedStore(home, fops=fops) as store:
        thread = source_thread(store)
        fops.armed = True
        with pytest.raises(StorageError):
            store.fork(thread)
        assert store.thread_ids() == [thread] and not temp_files(home)


def test_a_fork_whose_directory_cannot_be_synced_leaves_no_child(home: str) -> None:
    class EioOnDirSync(FileOps):
        armed = False

        def fsync_dir(self, path: str) -> None:
            if self.armed:
                raise OSError(5, "fsync: EIO")
            super().fsync_dir(path)

    fops = EioOnDirSync()
    with EmbeddedStore(home, fops=fops) as store:
        thread = source_thread(store)
        fops.armed = True
        with pytest.raises(StorageError):
            store.fork(thread)
        fops.armed = False
        assert store.thread_ids() == [thread]


def test_only_a_fork_declares_inherited_records(store: EmbeddedStore) -> None:
    thread = source_thread(store)
    child = store.fork(thread)
    lineage = store.state(child).lineage
    with pytest.raises(UsageError, match="fork only"):
        store.create_thread("alice", lineage=lineage)
    assert sorted(store.thread_ids()) == sorted([thread, child])


def test_a_fork_cut_inside_its_inherited_records_is_damaged(store: EmbeddedStore) -> None:
    thread = source_thread(store)
    child = store.fork(thread)
    path = Path(store.path_of(child))
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:4]))  # a cut at a line boundary, ord 5 of 6 missing
    report = store.verify(child)
    assert not report.ok and "inside its inherited records" in str(report.error)
    path.write_bytes(b"".join(lines[:5]) + lines[5][:20])  # looks like a torn tail
    with pytest.raises(IntegrityError, match="inside its inherited records"):
        store.append(child, "custom.x", {})  # never "repaired" and written over
    with pytest.raises(IntegrityError):
        store.fork(child)


def test_a_source_whose_header_does_not_match_its_prefix_cannot_be_forked(
    store: EmbeddedStore,
) -> None:
    thread = source_thread(store)
    child = store.fork(thread)
    store.append(child, "custom.x", {"i": "own"})
    store.release(child)
    rewrite_first_line(store, child, lambda d: d["lineage"].update(hash="0" * 64))
    for at in (None, 4):
        with pytest.raises(IntegrityError, match="lineage hash"):
            store.fork(child, at)


def test_a_fork_ignores_a_torn_tail_holding_a_newline(store: EmbeddedStore) -> None:
    thread = source_thread(store)
    store.release(thread)
    path = Path(store.path_of(thread))
    path.write_bytes(path.read_bytes() + b"\x00" * 40 + b"\n" + b"\x00" * 10)
    child = store.fork(thread)
    assert store.state(child).lineage["ord"] == 6  # type: ignore[index]
    assert store.verify(child).ok


def test_an_entry_only_in_a_torn_tail_is_no_entry(store: EmbeddedStore) -> None:
    thread = source_thread(store)
    records = store.read(thread)
    store.release(thread)
    path = Path(store.path_of(thread))
    path.write_bytes(path.read_bytes()[:-100])  # the last line, cut after its id
    torn = path.read_bytes()
    assert not torn.endswith(b"\n") and records[-1].id.encode() in torn
    with pytest.raises(UsageError, match="no entry"):
        store.fork(thread, records[-1].id)
    child = store.fork(thread, records[-2].id)
    assert store.read(child)[1:] == records[1:-1]


def test_an_entry_past_damage_in_the_source_fails_the_fork(store: EmbeddedStore) -> None:
    thread = source_thread(store)
    records = store.read(thread)
    store.release(thread)
    path = Path(store.path_of(thread))
    path.write_bytes(path.read_bytes().replace(b'"i":2', b'"i":7'))
    with pytest.raises(IntegrityError) as info:
        store.fork(thread, records[5].id)
    assert info.value.ord == 4
    assert store.thread_ids() == [thread]


def test_a_forks_index_rows_are_those_a_rebuild_gives(store: EmbeddedStore) -> None:
    thread = store.create_thread("alice", title="source")
    store.append(thread, "turn.started", {"turn_id": "t1", "input": "go"})
    call = {"turn_id": "t1", "call_id": "c1", "tool": "read_file", "args": {}}
    store.append(thread, "tool_call.proposed", {**call, "side_effect": "read_only"})
    store.append(thread, "tool_call.approved", {"call_id": "c1", "by": "policy"})
    for i in range(20):
        store.append(thread, "custom.x", {"i": i})
    fact = {"memory_id": "m1", "fact": "f", "scope": "thread", "source_event": "e"}
    store.append(thread, "memory.written", {**fact, "written_at": "2026-11-30T00:00:00Z"})
    store.append(thread, "turn.ended", {"turn_id": "t1", "outcome": "completed"})
    store.append(thread, "custom.x", {"last": True})
    child = store.fork(thread, 6, changes={"model": "other"})  # inside the turn
    whole = store.fork(thread)
    grandchild = store.fork(child)
    store.append(grandchild, "custom.x", {"own": True})
    store.flush()
    incremental = store.index.dump()
    assert {row[0] for row in incremental["threads"]} == {thread, child, whole, grandchild}
    store.rebuild()
    assert store.index.dump() == incremental
