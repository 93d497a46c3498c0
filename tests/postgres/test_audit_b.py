"""Regressions found by an audit: NUL in projected text, a URL with a bad port, verify and
follow reading a page at a time."""

from __future__ import annotations

import pytest

from tests.postgres.server import Schemas
from threadlog import open_store
from threadlog.errors import UsageError
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
