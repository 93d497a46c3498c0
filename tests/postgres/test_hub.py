"""The service's stream hub on PostgreSQL: records another store (another worker) commits to a
thread are streamed live, woken by LISTEN/NOTIFY, with no gap (the hub watches the thread)."""

from __future__ import annotations

import asyncio
import time

from tests.postgres.server import Schemas
from tests.server.test_hub import consume
from threadlog.server.hub import StreamHub
from threadlog.store.postgres import PostgresStore


def test_the_hub_streams_what_another_worker_commits(pg_schemas: Schemas) -> None:
    url = pg_schemas.new()
    with PostgresStore(url) as replica, PostgresStore(url) as worker:
        thread = worker.create_thread("alice")

        async def main() -> list[int]:
            hub = StreamHub(replica, poll=30.0)  # no poll in time: only a notification wakes it
            await hub.start()
            try:
                client = asyncio.create_task(consume(hub.stream(thread, 0), until_ord=41))
                await asyncio.sleep(0.1)
                notifier = replica._notifier  # watching started the LISTEN thread
                assert notifier is not None
                assert await asyncio.to_thread(notifier.wait_ready, 10)
                started = time.monotonic()
                for i in range(40):
                    await asyncio.to_thread(
                        worker.append, thread, "custom.n", {"i": i}, durable=i % 3 == 0
                    )
                worker.flush()
                parsed = await client
                assert time.monotonic() - started < 10
                assert replica._watched == {}  # the client left: unwatched
                return parsed.ids
            finally:
                await hub.close()

        assert asyncio.run(main()) == list(range(1, 42))
