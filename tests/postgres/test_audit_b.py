"""Regressions found by an audit: NUL in projected text, a URL with a bad port, verify and
follow reading a page at a time, a writer's first append starting from the snapshot."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.postgres.server import Schemas
from threadlog import open_store
from threadlog.errors import UsageError
from threadlog.model.reducer import replay
from threadlog.runtime import Runtime
from threadlog.store.postgres import PostgresStore, live, logs


def test_nul_in_projected_text_is_stored_and_the_log_keeps_it(pg_schemas: Schemas) -> None:
    with open_store(pg_schemas.new()) as store:
        assert isinstance(store, PostgresStore)
        thread = store.create_thread("a\x00b", title="t\x00x")
        store.append(thread, "turn.started", {"turn_id": "t1", "input": "in\x00put"})
        store.append(thread, "turn.ended", {"turn_id": "t1", "outcome": "completed"})
        assert store.read(thread)[1].data["input"] == "in\x00put"  # the log: exact
        assert store.turns(thread)[0]["input"] == "in\ufffdput"  # the catalog: as text allows
        assert store.verify(thread).ok


def test_a_port_that_is_not_a_number_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="port"):
        open_store("postgresql://postgres@localhost:notaport/db")


def test_verify_and_follow_read_a_page_at_a_time(
    pg_schemas: Schemas, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs, "VERIFY_PAGE", 3)
    monkeypatch.setattr(live, "FOLLOW_PAGE", 3)
    with open_store(pg_schemas.new()) as store:
        thread = store.create_thread("a")
        for i in range(10):
            store.append(thread, "custom.n", {"i": i})
        report = store.verify(thread)
        assert (report.ok, report.records, report.last_ord) == (True, 11, 11)
        ords = []
        for record in store.follow(thread, 0, interval=0.01):
            ords.append(record.ord)
            if record.ord == 11:
                break
        assert ords == list(range(1, 12))


def _count_reads(store: PostgresStore) -> list[tuple[int, Any]]:
    """Note ``(after, limit)`` of every `read` the store makes from now on."""
    reads: list[tuple[int, Any]] = []
    read = store.read

    def counted(thread_id: str, after: int = 0, **kw: Any) -> Any:
        reads.append((after, kw.get("limit")))
        return read(thread_id, after, **kw)

    store.read = counted  # type: ignore[method-assign]
    return reads


def test_the_first_append_and_state_start_from_the_runtime_snapshot(
    pg_schemas: Schemas,
) -> None:
    """A thread a runtime session closed (its snapshot saved) is not read whole by the next
    writer's first append, nor by `state`: the snapshot's state and the records after it."""
    url = pg_schemas.new()
    with open_store(url) as store:
        thread = store.create_thread("a")
        for i in range(2_100):  # past the snapshot a closing session saves (2,000 records)
            store.append(thread, "custom.n", {"i": i}, durable=False)
        store.flush()

        async def session() -> None:
            async with Runtime(store=store) as runtime:
                await (await runtime.open(thread)).close()

        asyncio.run(session())
    with open_store(url) as store:
        assert isinstance(store, PostgresStore)
        read, reads = store.read, _count_reads(store)
        store.append(thread, "custom.n", {"i": "after"})
        assert store.state(thread) == replay(read(thread))
        assert reads and all(after > 2_000 or limit is not None for after, limit in reads)
        store.read = read  # type: ignore[method-assign]
        with pytest.raises(Exception, match="refused"):
            store.append(thread, "turn.ended", {"turn_id": "nope", "outcome": "completed"})


def test_a_thread_written_by_append_alone_is_checkpointed_at_release(
    pg_schemas: Schemas, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No runtime snapshot (a framework adapter's thread): the store keeps its own trimmed
    checkpoint when its writer lets the thread go, and the next writer starts there."""
    from threadlog.store.postgres import store as store_module

    monkeypatch.setattr(store_module, "CHECKPOINT_FROM", 50)
    url = pg_schemas.new()
    with open_store(url) as store:
        thread = store.create_thread("a")
        for n in range(30):
            store.append(thread, "turn.started", {"turn_id": f"t{n}", "input": "x" * 500})
            store.append(thread, "turn.ended", {"turn_id": f"t{n}", "outcome": "completed"})
    with open_store(url) as store:
        assert isinstance(store, PostgresStore)
        read, reads = store.read, _count_reads(store)
        now = store.state(thread, history=False)
        assert now.trimmed and now.turns["t0"].input == "" and now.last_ord == 61
        store.append(thread, "turn.started", {"turn_id": "t99", "input": "again"})
        assert all(after == 61 for after, _ in reads)  # only the records after the checkpoint
        store.read = read  # type: ignore[method-assign]
        whole = store.state(thread)
        assert whole == replay(store.read(thread)) and whole.turns["t0"].input == "x" * 500
        with pytest.raises(Exception, match="refused"):
            store.append(thread, "turn.started", {"turn_id": "t3", "input": "an old id"})
