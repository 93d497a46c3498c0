"""A cancelled ``aappend`` waiter must leave the group commit and its other waiters alone.

Each asyncio append awaits a future of its own event loop (`threadlog.store.postgres.writer
.Pending.waiter`); the committer resolves all of a commit's futures of one loop with a single
``call_soon_threadsafe`` (`resolve_waiters`). If an awaiting task is cancelled (a turn
cancelled mid-append, a session closing), only its own future may be cancelled: the others
of the commit must still get their records, and the committer must not die setting a result
on a cancelled future (seen in the worker tests once: the store never closed). An append of
the same id replayed while the first is on its way waits on the append's lock, in a worker
thread: neither its cancellation nor the owner's touches the other.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("psycopg")


def test_a_cancelled_waiter_leaves_the_other_waiters_alone() -> None:
    from threadlog.store.postgres.writer import Pending, resolve_waiters

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stub: Any = None
        mine, other = Pending(stub, b"", stub), Pending(stub, b"", stub)
        mine.waiter, other.waiter = loop.create_future(), loop.create_future()
        cancelled = asyncio.create_task(mine.own_wait())
        waiting = asyncio.create_task(other.own_wait())
        await asyncio.sleep(0)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert not other.waiter.cancelled()
        resolve_waiters([mine.waiter, other.waiter])  # what the committer schedules
        assert await waiting is None  # the other waiter gets its (stub) record

    asyncio.run(main())


def test_a_replayed_waiter_and_its_owner_do_not_cancel_each_other() -> None:
    from threadlog.store.postgres.writer import Pending, resolve_waiters

    async def main() -> None:
        stub: Any = None
        pending = Pending(stub, b"", stub)
        pending.waiter = asyncio.get_running_loop().create_future()
        owner = asyncio.create_task(pending.own_wait())
        replayed = asyncio.create_task(pending.wait_async())
        again = asyncio.create_task(pending.wait_async())
        await asyncio.sleep(0.01)
        replayed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await replayed
        assert not pending.waiter.cancelled()
        owner.cancel()  # the owner's future goes with it: the other replay still waits
        with pytest.raises(asyncio.CancelledError):
            await owner
        assert not again.done()
        pending.done()  # the commit is over
        resolve_waiters([pending.waiter])  # skips the cancelled future
        assert await again is None

    asyncio.run(main())


def test_a_replayed_waiter_of_another_loop_waits_for_the_commit() -> None:
    from threadlog.store.postgres.writer import Pending

    stub: Any = None
    pending = Pending(stub, b"", stub)

    async def owner_loop() -> asyncio.Future[None]:
        return asyncio.get_running_loop().create_future()

    pending.waiter = asyncio.run(owner_loop())  # a loop that is gone now

    async def main() -> object:
        task = asyncio.create_task(pending.wait_async())
        await asyncio.sleep(0.01)
        assert not task.done()  # the commit is not over yet
        pending.done()
        return await task

    assert asyncio.run(main()) is None
