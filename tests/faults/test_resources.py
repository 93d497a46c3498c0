"""Resources and refusals under adversarial conditions (issue 9, point 13).

13a: any number of threads can be written under a small open-files limit. 13b: when the store
fails, whoever waits for records hears of it instead of hanging. 13c: a thread written by a
newer threadlog is never appended to. 13d: a ``parent`` that names no record is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import subprocess
import sys
import textwrap
import threading
from typing import TYPE_CHECKING

import pytest

from threadlog import EmbeddedStore, StorageError, UsageError
from threadlog._clock import new_id, rfc3339, wall_ns
from threadlog.model import codec
from threadlog.model.envelope import FORMAT_VERSION, encode_record
from threadlog.runtime import Runtime
from threadlog.store._fileops import FileOps
from threadlog.store.inmemory import MemoryStore

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from threadlog.store.protocol import Store

COMMIT_INTERVAL = 3600.0
"""The background committer never runs on its own: every commit comes from the test."""


@pytest.fixture(autouse=True)
def _quiet() -> None:
    logging.getLogger("threadlog.store").setLevel(logging.CRITICAL)


@pytest.fixture(params=["embedded", "memory"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
    else:
        with EmbeddedStore(str(tmp_path / "home")) as store:
            yield store


class FailingSync(FileOps):
    """fdatasync and fsync fail with EIO once armed (a disk that went away)."""

    armed = False

    def fdatasync(self, fd: int) -> None:
        if self.armed:
            raise OSError(errno.EIO, "injected EIO")
        super().fdatasync(fd)

    def fsync(self, fd: int) -> None:
        if self.armed:
            raise OSError(errno.EIO, "injected EIO")
        super().fsync(fd)


# -- 13a: a bounded number of open files ----------------------------------------------------


def test_many_threads_are_written_under_a_small_open_files_limit(tmp_path: Path) -> None:
    """600 threads under ``ulimit -n 64`` (scripts/fd_limit.py: 10,000 under 1024)."""
    home = str(tmp_path / "home")
    code = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        from threadlog import open_store
        with open_store({home!r}) as store:
            threads = [store.create_thread("p") for _ in range(600)]
            for thread in threads:
                store.append(thread, "custom.x", {{"i": 1}}, durable=False)
            for thread in threads[:20]:  # reopened after their eviction
                store.append(thread, "custom.x", {{"i": 2}}, durable=True)
            print(store.max_open_threads)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) == 16  # 64 // 4
    with EmbeddedStore(home) as store:
        threads = store.thread_ids()
        assert len(threads) == 600
        lengths = sorted(len(store.read(t)) for t in threads)
        assert lengths == [2] * 580 + [3] * 20


def test_the_default_open_threads_follow_the_open_files_limit(tmp_path: Path) -> None:
    import resource

    with EmbeddedStore(str(tmp_path / "home")) as store:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        assert store.max_open_threads == min(1000, soft // 4)
    with EmbeddedStore(str(tmp_path / "home"), max_open_threads=7) as store:
        assert store.max_open_threads == 7


# -- 13b: the store's failure wakes whoever waits for records ---------------------------------


def test_error_listeners_hear_of_a_failed_commit(tmp_path: Path) -> None:
    fops = FailingSync()
    store = EmbeddedStore(str(tmp_path / "home"), commit_interval=COMMIT_INTERVAL, fops=fops)
    try:
        heard: list[StorageError] = []
        store.add_error_listener(heard.append)
        thread = store.create_thread("u")
        fops.armed = True
        with pytest.raises(StorageError):
            store.append(thread, "custom.x", {"i": 1}, durable=True)
        assert len(heard) == 1 and "stopped acknowledging" in str(heard[0])
        late: list[StorageError] = []
        store.add_error_listener(late.append)  # after the failure: told at once
        assert late == heard
    finally:
        fops.armed = False
        with contextlib.suppress(StorageError):
            store.close()


def test_a_waiter_blocked_on_a_failing_commit_gets_the_error(tmp_path: Path) -> None:
    """A durable append that waits while another thread leads a commit that fails."""
    gate = threading.Event()
    release = threading.Event()

    class Stalled(FileOps):
        armed = False

        def fdatasync(self, fd: int) -> None:
            if self.armed:
                gate.set()
                release.wait(10)
                raise OSError(errno.EIO, "injected EIO")
            super().fdatasync(fd)

    fops = Stalled()
    store = EmbeddedStore(str(tmp_path / "home"), commit_interval=COMMIT_INTERVAL, fops=fops)
    try:
        t, u = store.create_thread("u"), store.create_thread("u")
        fops.armed = True
        errors: list[BaseException] = []

        def append(thread: str) -> None:
            try:
                store.append(thread, "custom.x", {"i": 1}, durable=True)
            except BaseException as exc:
                errors.append(exc)

        leader = threading.Thread(target=append, args=(t,))
        leader.start()
        assert gate.wait(10)
        follower = threading.Thread(target=append, args=(u,))
        follower.start()  # queued behind the stalled commit: it waits for the next one
        release.set()
        leader.join(10)
        follower.join(10)
        assert not leader.is_alive() and not follower.is_alive()
        assert len(errors) == 2 and all(isinstance(e, StorageError) for e in errors)
    finally:
        release.set()
        fops.armed = False
        with contextlib.suppress(StorageError):
            store.close()


def test_a_subscriber_is_woken_with_the_error_when_the_store_fails(tmp_path: Path) -> None:
    fops = FailingSync()
    store = EmbeddedStore(str(tmp_path / "home"), commit_interval=COMMIT_INTERVAL, fops=fops)

    async def main() -> tuple[list[int], BaseException | None]:
        runtime = Runtime(store=store)
        session = await runtime.create("u")
        seen: list[int] = []
        reading = asyncio.Event()

        async def tail() -> None:
            async for item in session.subscribe():
                seen.append(item.ord)  # type: ignore[union-attr]
                reading.set()

        task = asyncio.create_task(tail())
        await asyncio.wait_for(reading.wait(), 10)  # it read the log; now it waits
        await session.append("custom.x", {"i": 1}, durable=True)
        fops.armed = True
        with pytest.raises(StorageError):
            await session.append("custom.x", {"i": 2}, durable=True)
        # promptly, not at close: the wait is only a guard against a hang
        done, _ = await asyncio.wait({task}, timeout=10)
        error = task.exception() if task in done else None
        if task not in done:
            task.cancel()
        fops.armed = False
        with contextlib.suppress(Exception):
            await runtime.close()
        return seen, error

    try:
        seen, error = asyncio.run(main())
    finally:
        with contextlib.suppress(StorageError):
            store.close()
    assert seen == [1, 2, 3]  # what was durable before the failure (2: session.opened)
    assert isinstance(error, StorageError), f"the subscriber was not woken: {error!r}"


# -- 13c: a thread of a newer format is never appended to --------------------------------------


def write_thread(store: EmbeddedStore, *, fmt: int, versions: list[int]) -> str:
    """A rollout as a newer threadlog might write it: ``thread.created`` declaring ``fmt``,
    then one record per entry of ``versions`` with that envelope version ``v``."""
    now = wall_ns()
    thread = new_id(now)
    created = {"format": fmt, "principal": "u", "config": {}, "lineage": None, "title": None}
    line, prev = encode_record(
        id=new_id(now),
        thread=thread,
        ord=1,
        parent=None,
        ts=rfc3339(now),
        type="thread.created",
        data_json=codec.canonical(created),
        prev=None,
    )
    lines = [line]
    for n, v in enumerate(versions, start=2):
        line, prev = encode_record(
            id=new_id(now),
            thread=thread,
            ord=n,
            parent=None,
            ts=rfc3339(now),
            type="custom.x",
            data_json=codec.canonical({"n": n}),
            prev=prev,
            v=v,
        )
        lines.append(line)
    path = store.path_of(thread)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"".join(lines))
    return thread


@pytest.mark.parametrize(
    ("fmt", "versions"),
    [(FORMAT_VERSION + 1, [1, 1]), (FORMAT_VERSION, [1, FORMAT_VERSION + 1])],
    ids=["newer thread.created format", "newer record v"],
)
def test_a_thread_of_a_newer_format_is_never_appended_to(
    store: EmbeddedStore, fmt: int, versions: list[int]
) -> None:
    thread = write_thread(store, fmt=fmt, versions=versions)
    path = store.path_of(thread)
    with open(path, "rb") as f:
        before = f.read()
    with pytest.raises(UsageError, match="newer threadlog"):
        store.append(thread, "custom.x", {"n": 9}, durable=True)
    with pytest.raises(UsageError, match="newer threadlog"):
        store.acquire(thread)
    assert [r.ord for r in store.read(thread)] == [1, 2, 3]  # reading still works
    with open(path, "rb") as f:
        assert f.read() == before  # not a byte changed
    # the lease was given back: the refusal leaves nothing held
    assert thread not in store._writers.leases


# -- 13d: a parent that names no record is refused ---------------------------------------------


# test_a_parent_that_names_no_record_is_refused: now in StoreContract


def test_a_parent_before_a_snapshot_anchor_is_found(tmp_path: Path) -> None:
    """A thread opened from a snapshot knows only the ids after its anchor at first: a
    parent before it is looked up in the file (without scanning the whole prefix), and data
    that merely spells an id is not taken for that record."""
    home = str(tmp_path / "home")
    ghost = new_id()
    with EmbeddedStore(home) as store:
        thread = store.create_thread("u")
        early = store.append(thread, "custom.x", {"i": 1}, durable=True)
        store.append(thread, "custom.x", {"id": ghost, "s": f'"id":"{ghost}"'}, durable=True)
        anchor = store.append(thread, "custom.x", {"i": 2}, durable=True)
        store.append(thread, "custom.x", {"i": 3}, durable=True)
        assert store.save_snapshot(thread, b"{}", ord=anchor.ord, hash=anchor.hash, version="t")
    with EmbeddedStore(home) as store:
        store.acquire(thread)
        assert store._logs[thread]._first_ord > 1  # opened from the anchor
        for missing in (new_id(), ghost):
            with pytest.raises(UsageError, match="no record"):
                store.append(thread, "custom.x", {"i": 4}, parent=missing, durable=True)
        record = store.append(thread, "custom.x", {"i": 4}, parent=early.id, durable=True)
        assert record.parent == early.id and record.ord == 6
        assert store._logs[thread]._first_ord > 1  # the prefix was not loaded for it
