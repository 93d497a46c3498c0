"""A cancelled ``aappend`` waiter must not cancel the group commit's shared future.

One future serves every append of a PostgreSQL group commit (`threadlog.store.postgres
.writer.Batch`). If an awaiting task is cancelled (a turn cancelled mid-append, a session
closing), cancelling that shared future would fail every other waiter of the commit with
`CancelledError` though their records were written, and kill the committer thread when it
then sets the result (seen in the worker tests: the store never closed).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("psycopg")


def test_a_cancelled_waiter_leaves_the_batch_future_alone() -> None:
    from threadlog.store.postgres.writer import Batch, Pending

    async def main() -> None:
        batch = Batch()
        stub: Any = None
        mine, other = Pending(stub, b"", stub), Pending(stub, b"", stub)
        mine.batch = other.batch = batch
        cancelled = asyncio.create_task(mine.wait_async())
        waiting = asyncio.create_task(other.wait_async())
        await asyncio.sleep(0)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert not batch.future.cancelled()
        batch.future.set_result(None)  # what the committer does after the commit
        assert await waiting is None  # the other waiter gets its (stub) record

    asyncio.run(main())
