"""A running session's snapshots on PostgreSQL: an anchor its writer has not committed yet is
refused, the session flushes and saves it; a new runtime resumes from it."""

from __future__ import annotations

import asyncio

from tests.postgres.server import Schemas
from threadlog.model import snapshot
from threadlog.runtime import Runtime, SnapshotPolicy
from threadlog.store.postgres import PostgresStore


def test_a_session_saves_snapshots_while_it_runs_on_postgres(pg_schemas: Schemas) -> None:
    dsn = pg_schemas.new()
    policy = SnapshotPolicy(every_records=10, every_seconds=None, max_share=1.0)

    async def write() -> tuple[str, int]:
        # buffered records wait 30 s for their commit: the anchor is not there when saved
        with PostgresStore(dsn, commit_interval=30.0) as store:
            runtime = Runtime(store, snapshots=policy)
            session = await runtime.create("u")
            for i in range(25):
                await session.append("custom.n", {"i": i}, durable=False)
                await session.snapshots.wait()
            saved = session.snapshots.saved_ord
            assert session.snapshots.saved == 2 and saved == 20
            got = store.load_snapshot(session.thread_id, snapshot.SNAPSHOT_VERSION)
            assert got is not None and got[0] == saved
            await runtime.close()
            return session.thread_id, saved

    thread, saved = asyncio.run(write())

    async def resume() -> None:
        with PostgresStore(dsn) as store:
            async with Runtime(store) as runtime:
                session = await runtime.resume(thread, continue_work=False)
                assert session.base_ord >= saved
                assert session.state.last_ord > session.base_ord

    asyncio.run(resume())
