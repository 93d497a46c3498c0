"""The group commit's hand-offs: who waits, who leads, when an append may return.

Every test gates or counts the ``fdatasync`` calls (a `FileOps` subclass) and checks that an
append returns only after the sync that covers its record, whichever thread or event loop led
that commit, and that a failed sync reaches every waiter.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import threading
from typing import TYPE_CHECKING

import pytest

from threadlog import EmbeddedStore, StorageError
from threadlog.store._fileops import FileOps
from threadlog.store.embedded import aio

if TYPE_CHECKING:
    from pathlib import Path
from typing import Any

COMMIT_INTERVAL = 3600.0
"""The background committer never runs on its own: every commit comes from the test."""


@pytest.fixture(autouse=True)
def _quiet() -> None:
    logging.getLogger("threadlog.store").setLevel(logging.CRITICAL)


class Syncs(FileOps):
    """Counts finished ``fdatasync`` calls; the first one after ``hold()`` blocks until
    ``release()``; ``fail`` makes the next one raise EIO."""

    def __init__(self) -> None:
        self.done = 0
        self.fail = False
        self._gate: threading.Event | None = None
        self._held = threading.Event()
        self.entered = threading.Event()

    def hold(self) -> None:
        self._gate = self._held = threading.Event()
        self.entered.clear()

    def release(self) -> None:
        self._held.set()

    def fdatasync(self, fd: int) -> None:
        gate, self._gate = self._gate, None
        if gate is not None:
            self.entered.set()
            assert gate.wait(30), "the test never released the held fdatasync"
        if self.fail:
            self.fail = False
            raise OSError(errno.EIO, "injected EIO")
        super().fdatasync(fd)
        self.done += 1


def test_a_record_queued_during_a_commit_waits_for_the_next_one(tmp_path: Path) -> None:
    syncs = Syncs()
    with EmbeddedStore(str(tmp_path), commit_interval=COMMIT_INTERVAL, fops=syncs) as store:
        t, u = store.create_thread("p"), store.create_thread("p")
        returned: dict[str, int] = {}

        def append(thread: str) -> None:
            store.append(thread, "custom.x", {}, durable=True)
            returned[thread] = syncs.done  # syncs finished when the append returned

        syncs.hold()
        first = threading.Thread(target=append, args=(t,))
        first.start()
        assert syncs.entered.wait(30)  # t's commit is in its fdatasync
        before = syncs.done
        second = threading.Thread(target=append, args=(u,))
        second.start()
        second.join(0.2)
        assert second.is_alive()  # u's record came in during t's commit: not covered by it
        syncs.release()
        first.join(30)
        second.join(30)
        assert not first.is_alive() and not second.is_alive()
        assert returned[t] >= before + 1
        assert returned[u] >= before + 2  # u led (or waited for) a commit of its own
        assert [r.ord for r in store.read(u)] == [1, 2]


def test_64_threads_each_return_after_the_sync_covering_their_record(tmp_path: Path) -> None:
    syncs = Syncs()
    with EmbeddedStore(str(tmp_path), commit_interval=COMMIT_INTERVAL, fops=syncs) as store:
        threads = [store.create_thread("p") for _ in range(64)]
        errors: list[BaseException] = []

        def work(thread: str) -> None:
            try:
                for i in range(20):
                    before = syncs.done
                    store.append(thread, "custom.x", {"i": i}, durable=True)
                    assert syncs.done > before  # a sync finished after the record was queued
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=work, args=(t,)) for t in threads]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
        assert not any(w.is_alive() for w in workers)
        assert errors == []
        assert syncs.done < 64 * 20  # records shared syncs
    with EmbeddedStore(str(tmp_path)) as store:
        for thread in threads:
            assert [r.data for r in store.read(thread)][1:] == [{"i": i} for i in range(20)]


def test_every_waiter_a_commit_covers_is_woken_in_the_relay(tmp_path: Path) -> None:
    """The waiters a commit covers are woken one after another, each by the one before it
    (`Journal._pass_relay`): none is left asleep, and the relay ends empty."""
    syncs = Syncs()
    with EmbeddedStore(str(tmp_path), commit_interval=COMMIT_INTERVAL, fops=syncs) as store:
        lead, *others = [store.create_thread("p") for _ in range(9)]
        returned: list[str] = []

        def append(thread: str) -> None:
            store.append(thread, "custom.x", {}, durable=True)
            returned.append(thread)

        before = syncs.done
        syncs.hold()
        first = threading.Thread(target=append, args=(lead,))
        first.start()
        assert syncs.entered.wait(30)  # the lead's commit is in its fdatasync
        waiters = [threading.Thread(target=append, args=(t,)) for t in others]
        for w in waiters:
            w.start()
        journal = store._journal
        for _ in range(3000):  # until all eight sleep on their gates
            with journal._mutex:
                if len(journal._sleepers) == len(others):
                    break
            threading.Event().wait(0.01)
        assert len(journal._sleepers) == len(others)
        syncs.release()  # the oldest is woken to lead their commit, which covers the rest
        for w in [first, *waiters]:
            w.join(30)
            assert not w.is_alive()
        assert sorted(returned) == sorted([lead, *others])
        assert not journal._relay and not journal._sleepers
        assert syncs.done == before + 2  # the lead's commit, then the eight's


def commit_thread(store: EmbeddedStore, thread: str) -> tuple[int, int]:
    """``(the loop's thread, the thread that committed)`` for one lone ``aappend``."""
    committers: list[int] = []

    def listener(_thread: str, _records: object) -> None:
        committers.append(threading.get_ident())

    store.add_listener(listener)

    async def main() -> int:
        await store.aappend(thread, "custom.x", {}, durable=True)
        return threading.get_ident()

    try:
        ident = asyncio.run(main())
    finally:
        store.remove_listener(listener)
    (committer,) = committers
    return ident, committer


def test_a_lone_aappend_commits_on_the_loop_while_syncs_are_fast(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aio, "LOOP_SYNC_SECONDS", 3600.0)  # every sync counts as fast
    with EmbeddedStore(str(tmp_path), commit_interval=COMMIT_INTERVAL) as store:
        loop_thread, committer = commit_thread(store, store.create_thread("p"))
        assert committer == loop_thread  # no hop to a worker thread


def test_a_lone_aappend_takes_no_extra_turn_of_the_loop_and_ready_ones_share_a_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first waiter of a loop's turn lets the tasks that are ready queue their records
    first (one ``sleep(0)``), but only when there are some: a lone ``aappend`` commits at
    once; eight at once still share one commit."""
    monkeypatch.setattr(aio, "LOOP_SYNC_SECONDS", 3600.0)
    turns: list[float] = []
    real_sleep = asyncio.sleep

    async def counted(delay: float, *args: Any) -> Any:
        if delay == 0:
            turns.append(delay)
        return await real_sleep(delay, *args)

    monkeypatch.setattr(aio.asyncio, "sleep", counted)
    syncs = Syncs()
    with EmbeddedStore(str(tmp_path), commit_interval=COMMIT_INTERVAL, fops=syncs) as store:
        threads = [store.create_thread("p") for _ in range(8)]

        async def lone() -> None:
            await store.aappend(threads[0], "custom.x", {}, durable=True)

        asyncio.run(lone())
        assert turns == []
        before = syncs.done

        async def together() -> None:
            await asyncio.gather(
                *(store.aappend(t, "custom.x", {"n": 1}, durable=True) for t in threads)
            )

        asyncio.run(together())
        assert turns and syncs.done == before + 1  # one commit for the eight
        assert [len(store.read(t)) for t in threads] == [3] + [2] * 7


def test_a_slow_disk_keeps_the_commit_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aio, "LOOP_SYNC_SECONDS", 0.0)  # every sync counts as slow
    with EmbeddedStore(str(tmp_path), commit_interval=COMMIT_INTERVAL) as store:
        loop_thread, committer = commit_thread(store, store.create_thread("p"))
        assert committer != loop_thread


def test_aappend_waits_out_another_threads_commit_then_commits_its_own(tmp_path: Path) -> None:
    syncs = Syncs()
    with EmbeddedStore(str(tmp_path), commit_interval=COMMIT_INTERVAL, fops=syncs) as store:
        t, u = store.create_thread("p"), store.create_thread("p")
        syncs.hold()
        other = threading.Thread(
            target=store.append, args=(t, "custom.x", {}), kwargs={"durable": True}
        )
        other.start()
        assert syncs.entered.wait(30)
        before = syncs.done

        async def main() -> int:
            task = asyncio.ensure_future(store.aappend(u, "custom.x", {}, durable=True))
            await asyncio.sleep(0.1)
            assert not task.done()  # the loop runs on, the task waits for t's commit
            syncs.release()
            await task
            return syncs.done

        assert asyncio.run(main()) >= before + 2
        other.join(30)
        assert [r.ord for r in store.read(u)] == [1, 2]


@pytest.mark.parametrize("on_loop", [True, False])
def test_a_failed_commit_fails_every_waiting_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, on_loop: bool
) -> None:
    monkeypatch.setattr(aio, "LOOP_SYNC_SECONDS", 3600.0 if on_loop else 0.0)
    syncs = Syncs()
    store = EmbeddedStore(str(tmp_path), commit_interval=COMMIT_INTERVAL, fops=syncs)
    threads = [store.create_thread("p") for _ in range(8)]
    syncs.fail = True

    async def main() -> list[BaseException | None]:
        results = await asyncio.gather(
            *(store.aappend(t, "custom.x", {}, durable=True) for t in threads),
            return_exceptions=True,
        )
        return [r if isinstance(r, BaseException) else None for r in results]

    outcomes = asyncio.run(main())
    assert all(isinstance(o, StorageError) for o in outcomes)
    with pytest.raises(StorageError):
        asyncio.run(store.aappend(threads[0], "custom.x", {}, durable=True))  # fail-stop
    store.close()


def test_a_cancelled_first_waiter_leaves_the_others_committed(tmp_path: Path) -> None:
    syncs = Syncs()
    with EmbeddedStore(str(tmp_path), commit_interval=COMMIT_INTERVAL, fops=syncs) as store:
        threads = [store.create_thread("p") for _ in range(4)]

        async def main() -> None:
            before = syncs.done
            tasks = [
                asyncio.ensure_future(store.aappend(t, "custom.x", {}, durable=True))
                for t in threads
            ]
            await asyncio.sleep(0)  # each queued its record; the first leads this turn's commit
            assert syncs.done == before  # nothing committed yet
            tasks[0].cancel()  # before its turn comes
            records = await asyncio.wait_for(asyncio.gather(*tasks[1:]), 30)
            assert syncs.done > before  # committed all the same, by the handed-on job
            assert [r.ord for r in records] == [2, 2, 2]
            with contextlib.suppress(asyncio.CancelledError):
                await tasks[0]
            assert tasks[0].cancelled()

        asyncio.run(main())
        assert [len(store.read(t)) for t in threads] == [2, 2, 2, 2]  # first's was queued


def test_aappend_keeps_no_event_loop_alive(tmp_path: Path) -> None:
    """A process that runs ``asyncio.run`` again and again (a CLI, a test suite) must not
    keep every loop it made: the store's per-loop commit state is held weakly."""
    import gc

    with EmbeddedStore(str(tmp_path / "home")) as store:
        thread = store.create_thread("tester")

        async def one(n: int) -> None:
            await store.aappend(thread, "custom.n", {"n": n}, durable=True)

        for n in range(5):
            asyncio.run(one(n))
        gc.collect()
        assert len(store._async._turns) == 0
        assert [r.data["n"] for r in store.read(thread)[1:]] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("change", ["garbage", "cut"])
def test_a_rollout_changed_behind_the_writer_is_never_appended_to(
    tmp_path: Path, change: str
) -> None:
    """Another process wrote to (or cut) a rollout this store holds: the next commit refuses
    to acknowledge anything on top of it, and the records acknowledged before stay readable."""
    home = str(tmp_path / "home")
    store = EmbeddedStore(home)
    thread = store.create_thread("alice")
    for n in range(3):
        store.append(thread, "custom.note", {"n": n})
    path = store.path_of(thread)
    if change == "garbage":
        with open(path, "ab") as f:
            f.write(b"garbage\n")
    else:
        os.truncate(path, os.path.getsize(path) - 5)
    with pytest.raises(StorageError, match="another process changed it"):
        store.append(thread, "custom.note", {"n": 3})
    with pytest.raises(StorageError):
        store.append(thread, "custom.note", {"n": 4})  # fail-stop: nothing more
    store.close()
    with EmbeddedStore(home) as again:
        report = again.verify(thread)
        if change == "garbage":
            # the damage is the other process's, where it made it: nothing was written after it
            assert not report.ok and report.first_bad_ord == 5 and report.last_ord == 4
        else:
            # the cut record was acknowledged through the journal, which the stopped store
            # left behind: the open restores it from there, and nothing was written after it
            assert report.ok and report.last_ord == 4
            assert [r.data for r in again.read(thread, after=1)] == [{"n": n} for n in range(3)]
