"""The embedded store beyond the shared contract (`threadlog.testing.StoreContract`): the
files, reopening, group commit, index, leases."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import threadlog
from threadlog import (
    DuplicateEventConflict,
    EmbeddedStore,
    InvalidData,
    InvalidEventType,
    LeaseHeld,
    RecordTooLarge,
    StorageError,
    ThreadNotFound,
    UsageError,
    open_store,
)
from threadlog.model.ids import uuid7
from threadlog.model.projection import project_log
from threadlog.store._fileops import FileOps
from threadlog.testing.contract._common import start_call

if TYPE_CHECKING:
    from pathlib import Path


def test_records_survive_reopen(home: str) -> None:
    with open_store(home) as store:
        thread = store.create_thread("a")
        written = [
            store.append(thread, "custom.n", {"i": i}, durable=i % 2 == 0) for i in range(50)
        ]
    with open_store(home) as store:
        assert store.read(thread)[1:] == written
        assert store.append(thread, "custom.n", {"i": 50}).ord == 52
        assert store.verify(thread).ok


def test_idempotent_append_survives_reopen(home: str) -> None:
    event_id = uuid7(1_700_000_000_000, bytes(10))
    with open_store(home) as store:
        thread = store.create_thread("a")
        first = store.append(thread, "custom.x", {"v": 1}, id=event_id)
    with open_store(home) as store:
        assert store.append(thread, "custom.x", {"v": 1}, id=event_id) == first
        with pytest.raises(DuplicateEventConflict):
            store.append(thread, "custom.y", {"v": 1}, id=event_id)


@pytest.mark.parametrize(
    ("type_", "data", "error"),
    [
        ("Turn Started", {}, InvalidEventType),
        ("no_such.type", {}, InvalidEventType),
        ("turn.started", {"turn_id": "t"}, InvalidData),  # missing field
        ("turn.started", {"turn_id": 1, "input": "x"}, InvalidData),  # wrong type
        ("turn.started", {"turn_id": "t", "input": "x", "extra": 1}, InvalidData),
        ("custom.x", {"f": float("nan")}, InvalidData),
        ("custom.x", {"f": {1, 2}}, InvalidData),
        ("custom.x", {1: "non-string key"}, InvalidData),
        ("custom.x", {"big": 2**70}, InvalidData),
        ("thread.created", {}, UsageError),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(
    store: EmbeddedStore, type_: str, data: object, error: type[Exception]
) -> None:
    thread = store.create_thread("a")
    size = os.path.getsize(store.path_of(thread))
    with pytest.raises(error):
        store.append(thread, type_, data)
    store.flush()
    assert os.path.getsize(store.path_of(thread)) == size
    assert len(store.read(thread)) == 1


def test_unknown_and_malformed_threads(store: EmbeddedStore) -> None:
    missing = uuid7(1_700_000_000_000, bytes(10))
    with pytest.raises(ThreadNotFound):
        store.append(missing, "custom.x", {})
    with pytest.raises(ThreadNotFound):
        store.read(missing)
    for bad in ("../../etc/passwd", "", "ABC"):
        with pytest.raises(UsageError):
            store.read(bad)


def test_oversized_record(home: str) -> None:
    with open_store(home, max_record_bytes=4096, artifact_threshold=1 << 30) as store:
        thread = store.create_thread("a")
        with pytest.raises(RecordTooLarge):
            store.append(thread, "custom.x", {"text": "y" * 5000})
        assert len(store.read(thread)) == 1
        assert store.append(thread, "custom.x", {"text": "ok"}).ord == 2


def test_large_values_go_to_the_artifact_store(store: EmbeddedStore) -> None:
    thread = store.create_thread("a")
    start_call(store, thread)
    big = "z" * 200_000
    record = store.append(
        thread, "tool_call.finished", {"call_id": "c", "ok": True, "result": big}, durable=True
    )
    ref = record.data["result"]["$artifact"]
    assert ref["size"] == len(big) + 2 and len(ref["sha256"]) == 64
    assert os.path.getsize(store.path_of(thread)) < 10_000
    assert store.resolve(record.data)["result"] == big
    whole = store.append(thread, "custom.blob", ["w" * 100_000])
    assert store.resolve(whole.data) == ["w" * 100_000]


def test_buffered_appends_are_flushed(home: str) -> None:
    with open_store(home, commit_interval=3600) as store:
        thread = store.create_thread("a")
        store.append(thread, "config.changed", {"changes": {"model": "m"}})  # buffered by type
        store.append(thread, "custom.x", {}, durable=False)
        assert len(store.read(thread)) == 1  # not durable, so not visible yet
        store.flush()
        assert len(store.read(thread)) == 3
        store.append(thread, "custom.x", {}, durable=False)
    with open_store(home) as store:  # close() flushed it
        assert len(store.read(thread)) == 4


def test_a_critical_append_commits_what_was_buffered_before_it(home: str) -> None:
    with open_store(home, commit_interval=3600) as store:
        thread = store.create_thread("a")
        store.append(thread, "custom.x", {"i": 1}, durable=False)
        store.append(thread, "custom.x", {"i": 2}, durable=True)
        assert [r.data.get("i") for r in store.read(thread)[1:]] == [1, 2]


class CountingOps(FileOps):
    def __init__(self) -> None:
        self.fdatasyncs = 0
        self.fail_fdatasync: int | None = None
        self.fail_write_errno: int | None = None

    def fdatasync(self, fd: int) -> None:
        self.fdatasyncs += 1
        if self.fail_fdatasync is not None and self.fdatasyncs >= self.fail_fdatasync:
            raise OSError(errno.EIO, "injected EIO")
        super().fdatasync(fd)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if self.fail_write_errno is not None:
            # a short write first, then the error: the classic ENOSPC mid-record
            self.fail_write_errno, err = None, self.fail_write_errno
            os.write(fd, bytes(data[: len(data) // 2]))
            raise OSError(err, os.strerror(err))
        return super().write(fd, data)


def test_concurrent_appends_share_fsyncs(home: str) -> None:
    ops = CountingOps()
    with open_store(home, fops=ops) as store:
        threads = [store.create_thread("a") for _ in range(8)]
        before = ops.fdatasyncs
        barrier = threading.Barrier(16)

        def writer(i: int) -> None:
            barrier.wait()
            for n in range(50):
                store.append(threads[i % 8], "custom.x", {"w": i, "n": n}, durable=True)

        workers = [threading.Thread(target=writer, args=(i,)) for i in range(16)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        syncs = ops.fdatasyncs - before
    assert syncs < 800 / 2, f"{syncs} fdatasyncs for 800 appends: no group commit"
    with open_store(home) as store:
        for thread in threads:
            records = store.read(thread)
            assert len(records) == 101
            assert store.verify(thread).ok


def test_asyncio_appends_share_fsyncs(home: str) -> None:
    ops = CountingOps()
    with open_store(home, fops=ops) as store:
        thread = store.create_thread("a")
        before = ops.fdatasyncs

        async def writer(i: int) -> None:
            for n in range(50):
                await store.aappend(thread, "custom.x", {"w": i, "n": n}, durable=True)

        async def main() -> None:
            await asyncio.gather(*(writer(i) for i in range(32)))

        asyncio.run(main())
        syncs = ops.fdatasyncs - before
        assert len(store.read(thread)) == 1 + 32 * 50
    assert syncs < 1600 / 4


def test_fsync_failure_is_fail_stop(home: str) -> None:
    ops = CountingOps()
    store = open_store(home, fops=ops)
    thread = store.create_thread("a")
    acked = [store.append(thread, "custom.x", {"i": i}) for i in range(5)]
    size = os.path.getsize(store.path_of(thread))
    ops.fail_fdatasync = ops.fdatasyncs + 1
    with pytest.raises(StorageError):
        store.append(thread, "custom.x", {"i": 5})
    # cut off the file: after a failed fdatasync its pages may be "clean" without being on
    # disk, and no reader may take them for a record
    assert os.path.getsize(store.path_of(thread)) == size
    ops.fail_fdatasync = None  # the fault is gone, but the store must not pretend
    with pytest.raises(StorageError):
        store.append(thread, "custom.x", {"i": 6})
    with pytest.raises(StorageError):
        store.create_thread("b")
    store.close()  # leaves the journal for the next open
    with open_store(home) as store:
        records = store.read(thread)
        assert records[1:6] == acked
        assert [r.data["i"] for r in records[1:]] == [0, 1, 2, 3, 4]
        assert store.append(thread, "custom.x", {"i": 7}).ord == len(records) + 1
        assert store.verify(thread).ok


def test_enospc_mid_record_then_recovery(home: str) -> None:
    ops = CountingOps()
    store = open_store(home, fops=ops)
    thread = store.create_thread("a")
    acked = [store.append(thread, "custom.x", {"i": i}) for i in range(3)]
    ops.fail_write_errno = errno.ENOSPC
    with pytest.raises(StorageError):
        store.append(thread, "custom.x", {"i": 3, "pad": "p" * 3000})
    store.close()
    with open_store(home) as store:
        assert store.read(thread)[1:4] == acked
        new = store.append(thread, "custom.x", {"i": 4})
        assert new.ord == len(store.read(thread))
        assert store.verify(thread).ok


def test_lease_refused_in_the_same_process(home: str) -> None:
    with open_store(home) as one:
        thread = one.create_thread("a")
        with open_store(home) as two:
            with pytest.raises(LeaseHeld) as info:
                two.append(thread, "custom.x", {})
            assert f"pid {os.getpid()}" in str(info.value)
            assert two.read(thread)  # reading needs no lease


LEASE_CHILD = """
import sys, threadlog
with threadlog.open_store(sys.argv[1]) as store:
    try:
        store.append(sys.argv[2], "custom.x", {"from": "child"})
    except threadlog.LeaseHeld as exc:
        print("REFUSED", exc)
    else:
        print("APPENDED")
"""


def test_lease_refused_from_a_second_process_and_taken_over_after_exit(home: str) -> None:
    with open_store(home) as store:
        thread = store.create_thread("a")
        out = subprocess.run(
            [sys.executable, "-c", LEASE_CHILD, home, thread],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert out.startswith("REFUSED") and f"pid {os.getpid()}" in out
    out = subprocess.run(
        [sys.executable, "-c", LEASE_CHILD, home, thread],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.startswith("APPENDED")


def test_lease_of_a_killed_process_is_taken_over(home: str) -> None:
    with open_store(home) as store:
        thread = store.create_thread("a")
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time, threadlog\n"
            "s = threadlog.open_store(sys.argv[1]); s.append(sys.argv[2], 'custom.x', {})\n"
            "print('HELD', flush=True); time.sleep(60)",
            home,
            thread,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "HELD"
        with open_store(home) as store, pytest.raises(LeaseHeld):
            store.append(thread, "custom.x", {})
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    with open_store(home) as store:
        assert store.append(thread, "custom.x", {}).ord == 3


def test_rebuild_gives_the_incremental_index(home: str) -> None:
    with open_store(home) as store:
        threads = [store.create_thread(f"p{i}", title=f"t{i}") for i in range(3)]
        for i, thread in enumerate(threads):
            store.append(thread, "turn.started", {"turn_id": "t1", "input": "go"})
            store.append(
                thread,
                "tool_call.proposed",
                {
                    "turn_id": "t1",
                    "call_id": "c1",
                    "tool": "read_file",
                    "args": {},
                    "side_effect": "read_only",
                },
            )
            store.append(thread, "tool_call.approved", {"call_id": "c1", "by": "policy"})
            if i:
                store.append(thread, "turn.ended", {"turn_id": "t1", "outcome": "completed"})
        store.flush()
        incremental = store.index.dump()
        assert len(incremental["threads"]) == 3 and len(incremental["tool_calls"]) == 3
        store.rebuild()
        assert store.index.dump() == incremental
    os.unlink(os.path.join(home, "index.sqlite3"))
    with open_store(home) as store:  # a lost index is caught up from the rollouts
        assert store.index.dump() == incremental


def test_index_catches_up_with_writes_from_elsewhere(home: str) -> None:
    with open_store(home) as store:
        thread = store.create_thread("a")
    with open_store(home, catch_up=False) as writer:
        for i in range(5):
            writer.append(thread, "custom.x", {"i": i})
    with open_store(home) as store:
        assert store.thread_info(thread).last_ord == 6


def test_too_many_open_threads_are_evicted(home: str) -> None:
    with open_store(home, max_open_threads=4) as store:
        threads = [store.create_thread("a") for _ in range(10)]
        for round_ in range(3):
            for thread in threads:
                store.append(thread, "custom.x", {"r": round_})
        assert len(store._logs) <= 4
    with open_store(home) as store:
        assert all(len(store.read(t)) == 4 and store.verify(t).ok for t in threads)


def test_a_closed_store_refuses_appends(home: str) -> None:
    store = open_store(home)
    thread = store.create_thread("a")
    store.close()
    store.close()
    with pytest.raises(UsageError):
        store.append(thread, "custom.x", {})


def test_public_api_opens_the_default_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("THREADLOG_HOME", str(tmp_path / "env-home"))
    with threadlog.open_store() as store:
        assert store.home == str(tmp_path / "env-home")


def test_a_damaged_index_is_set_aside_and_rebuilt(home: str) -> None:
    with open_store(home) as store:
        thread = store.create_thread("a", title="kept")
        store.append(thread, "custom.x", {})
    index = os.path.join(home, "index.sqlite3")
    with open(index, "r+b") as f:
        f.write(b"this is not a database" * 100)
    with open_store(home) as store:
        (row,) = store.threads()
        assert (row.thread_id, row.title, row.last_ord) == (thread, "kept", 2)
    assert any(name.startswith("index.sqlite3.damaged-") for name in os.listdir(home))


def test_no_sqlite_error_escapes_untranslated(home: str) -> None:
    with open_store(home) as store:
        store.create_thread("a")
        store.index._db.close()  # any driver failure from here on
        with pytest.raises(StorageError):
            store.index.threads()
        with pytest.raises(StorageError):
            store.index.apply([])


def test_temp_files_of_dead_writers_are_removed_on_open(home: str, dead_pid: str) -> None:
    with open_store(home) as store:
        ref = store.artifacts.put(b"blob")
        directory = os.path.dirname(store.artifacts.path(ref.sha256))
    orphan = os.path.join(directory, f".abcdef.0123.{dead_pid}.tmp")
    live = os.path.join(directory, f".abcdef.4567.{os.getpid()}.tmp")
    for path in (orphan, live):
        with open(path, "wb") as f:
            f.write(b"half a blob")
    with open_store(home) as store:
        assert store.artifacts.get(ref.sha256) == b"blob"
    assert not os.path.exists(orphan)  # its writer is dead
    assert os.path.exists(live)  # a live writer's is left alone


def test_a_limited_read_reads_only_the_head_yet_never_hides_damage(store: EmbeddedStore) -> None:
    thread = store.create_thread("a")
    for i in range(5):
        store.append(thread, "custom.x", {"i": i})
    store.release(thread)
    path = store.path_of(thread)
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data.replace(b'"i":3', b'"i":9') + b'{"torn')
    assert [r.ord for r in store.read(thread, limit=2)] == [1, 2]  # damage lies beyond
    with pytest.raises(threadlog.IntegrityError) as info:
        store.read(thread, limit=6)
    assert info.value.ord == 5
    with open(path, "wb") as f:
        f.write(data + b'{"torn')
    assert [r.ord for r in store.read(thread, limit=10)] == [1, 2, 3, 4, 5, 6]


def test_the_scan_that_opened_a_thread_serves_the_next_read_once(home: str) -> None:
    with open_store(home) as store:
        thread = store.create_thread("a")
        for i in range(4):
            store.append(thread, "custom.x", {"i": i})
    with open_store(home) as store:
        store.acquire(thread)  # scans and verifies the whole log
        first = store.read(thread, 1, limit=2)
        assert [r.ord for r in first] == [2, 3]
        assert [r.ord for r in store.read(thread)] == [1, 2, 3, 4, 5]  # from the file again
        store.append(thread, "custom.x", {"i": 4})
        store.release(thread)
        store.acquire(thread)
        store.append(thread, "custom.x", {"i": 5}, durable=False)  # drops the opening scan
        store.flush()
        assert [r.ord for r in store.read(thread)] == [1, 2, 3, 4, 5, 6, 7]


@settings(max_examples=60, deadline=None)
@given(
    title=st.one_of(st.none(), st.sampled_from(["", "named"])),
    steps=st.lists(st.sampled_from(["turn", "empty", "end", "call", "archive", "memory"])),
    cut=st.integers(min_value=1, max_value=3),
)
def test_a_batch_indexes_as_its_records_one_by_one(
    tmp_path_factory: pytest.TempPathFactory, title: str | None, steps: list[str], cut: int
) -> None:
    """`Index.apply` merges a batch's changes of one row (the thread's, a turn's, a call's)
    into one statement: the rows end as applying each record alone leaves them (the batch
    whole, or its first records and then the rest)."""
    from threadlog.model.envelope import Record
    from threadlog.store.embedded.index import Index

    thread = "0190b6d0-0000-7000-8000-000000000001"
    events: list[tuple[str, dict[str, Any]]] = [
        ("thread.created", {"principal": "p", "title": title, "config": {}})
    ]
    for n, step in enumerate(steps):
        if step in ("turn", "empty"):
            events.append(
                ("turn.started", {"turn_id": f"t{n}", "input": f"ask {n}" * (step == "turn")})
            )
        elif step == "end":
            events.append(("turn.ended", {"turn_id": f"t{n - 1}", "outcome": "completed"}))
        elif step == "call":
            events.append(("tool_call.proposed", {"call_id": f"c{n}", "turn_id": "t", "tool": "x"}))
            events.append(("tool_call.started", {"call_id": f"c{n}"}))
        elif step == "archive":
            events.append(("thread.archived", {"archived": n % 2 == 0}))
        else:
            events.append(("memory.written", {"memory_id": "m", "fact": f"f{n}"}))
            events.append(("memory.revoked", {"memory_id": "m"}))
    records = [
        Record(1, f"r{i}", thread, i, None, f"2026-01-01T00:00:{i:02d}Z", t, d, None, f"h{i}")
        for i, (t, d) in enumerate(events, 1)
    ]
    root = tmp_path_factory.mktemp("index")
    whole, alone = Index(str(root / "whole.sqlite3")), Index(str(root / "alone.sqlite3"))
    built = Index(str(root / "built.sqlite3"))
    try:
        whole.apply([(thread, "p", records[:cut], 100)])
        whole.apply([(thread, "p", records[cut:], 100)])
        for record in records:
            alone.apply([(thread, "p", [record], 100)])
        assert whole.dump() == alone.dump()
        built.apply([(thread, "p", project_log(records), 100)])  # as a worker sends it
        assert built.dump() == alone.dump()
        assert built.positions() == alone.positions()
    finally:
        whole.close()
        alone.close()
        built.close()


def test_a_projected_log_the_index_holds_already_changes_nothing(tmp_path: Path) -> None:
    """A new log's `Projected` (`NewThreads`) for a thread a catch-up indexed meanwhile: the
    rows stay; indexed in part, it is left for the next catch-up (never applied twice)."""
    from threadlog.model.envelope import Record
    from threadlog.store.embedded.index import Index

    thread = "0190b6d0-0000-7000-8000-000000000001"
    records = [
        Record(1, "r1", thread, 1, None, "ts1", "thread.created", {"principal": "p"}, None, "h1"),
        Record(1, "r2", thread, 2, "r1", "ts2", "turn.started", {"turn_id": "t"}, "h1", "h2"),
        Record(1, "r3", thread, 3, "r2", "ts3", "custom.x", {}, "h2", "h3"),
    ]
    index = Index(str(tmp_path / "index.sqlite3"))
    try:
        index.apply([(thread, "p", records, 300)])
        rows = index.dump()
        index.apply([(thread, "p", project_log(records), 300)])
        assert index.dump() == rows
        index.reset_thread(thread)
        index.apply([(thread, "p", records[:2], 200)])
        index.apply([(thread, "p", project_log(records), 300)])
        assert index.positions()[thread][1] == 2
    finally:
        index.close()
