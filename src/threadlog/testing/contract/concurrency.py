"""The contract under concurrency: threads, ``aappend`` and ``follow``.

Appends from several OS threads interleave but never break the chain or one writer's order;
``aappend`` from asyncio gives the same guarantees and errors as ``append``; ``follow``
yields the log after a cursor, then each new record as it becomes durable, to a reader in
another thread.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING

import pytest

from threadlog.errors import (
    DuplicateEventConflict,
    InvalidEventType,
    OrdinalConflict,
    ThreadNotFound,
)
from threadlog.testing.contract._common import MISSING_THREAD, check_chain

if TYPE_CHECKING:
    from threadlog.model.envelope import Record
    from threadlog.store.protocol import Store

__all__ = ["ConcurrencyTests"]


class ConcurrencyTests:
    """Concurrent writers and a live reader see one consistent log."""

    def test_concurrent_appends_from_threads(self, store: Store) -> None:
        thread = store.create_thread("a")
        errors: list[BaseException] = []

        def writer(n: int) -> None:
            try:
                for i in range(20):
                    store.append(thread, "custom.w", {"writer": n, "i": i}, durable=False)
            except BaseException as exc:
                errors.append(exc)

        writers = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in writers:
            t.start()
        for t in writers:
            t.join()
        store.flush()
        assert errors == []
        records = store.read(thread)
        assert len(records) == 81
        check_chain(records)
        for n in range(4):  # each writer's records in its own order
            mine = [r.data["i"] for r in records[1:] if r.data["writer"] == n]
            assert mine == list(range(20))

    def test_aappend(self, store: Store) -> None:
        thread = store.create_thread("a")

        async def main() -> list[Record]:
            first = await store.aappend(thread, "custom.x", {"i": 0}, expect_ord=2)
            rest = await asyncio.gather(
                *(store.aappend(thread, "custom.x", {"i": i}) for i in range(1, 11))
            )
            replayed = await store.aappend(thread, "custom.x", {"i": 0}, id=first.id)
            assert replayed == first
            with pytest.raises(OrdinalConflict):
                await store.aappend(thread, "custom.x", {}, expect_ord=2)
            with pytest.raises(DuplicateEventConflict):
                await store.aappend(thread, "custom.x", {"i": 99}, id=first.id)
            with pytest.raises(InvalidEventType):
                await store.aappend(thread, "Not Valid", {})
            return [first, *rest]

        appended = asyncio.run(main())
        records = store.read(thread)
        check_chain(records)
        assert records[1:] == sorted(appended, key=lambda r: r.ord)
        assert sorted(r.data["i"] for r in records[1:]) == list(range(11))

    def test_aappend_check_hook(self, store: Store) -> None:
        thread = store.create_thread("a")

        def refuse(record: Record) -> None:
            raise ValueError(f"refused ord {record.ord}")

        async def main() -> None:
            with pytest.raises(ValueError, match="refused ord 2"):
                await store.aappend(thread, "custom.x", {}, check=refuse)
            assert (await store.aappend(thread, "custom.y", {})).ord == 2

        asyncio.run(main())
        assert [r.type for r in store.read(thread)] == ["thread.created", "custom.y"]

    def test_follow_yields_the_log_then_each_new_record(self, store: Store) -> None:
        thread = store.create_thread("alice")
        store.append(thread, "custom.note", {"n": 0})
        seen: list[int] = []
        done = threading.Event()

        def consume() -> None:
            for record in store.follow(thread, 1, interval=0.01):
                seen.append(record.ord)
                if len(seen) == 3:
                    break
            done.set()

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        for n in (1, 2):
            store.append(thread, "custom.note", {"n": n}, durable=True)
        assert done.wait(10), seen
        assert seen == [2, 3, 4]
        with pytest.raises(ThreadNotFound):
            next(iter(store.follow(MISSING_THREAD)))
