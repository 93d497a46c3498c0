"""What a copied or imported log holds in memory while it is checked and built.

orjson's output keeps a buffer of ~4 KiB whatever its length, so a list of a log's canonical
data JSON held 4 KiB a record (a 50,000-record copy peaked at 385 MB). `check_import` and
`NewLog` keep each record's line (right-sized: joined) and not that JSON.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from threadlog.importers._bulk import NewLog
from threadlog.store.embedded import EmbeddedStore
from threadlog.store.transfer import check_import

RECORDS = 2000
DATA = {"text": "x" * 480, "n": 0}


def _held(build: object) -> tuple[object, float]:
    """What ``build()`` returns, and the bytes it left allocated per record."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = build()  # type: ignore[operator]
        return result, (tracemalloc.get_traced_memory()[0] - before) / RECORDS
    finally:
        tracemalloc.stop()


def test_a_checked_log_holds_its_lines_not_orjsons_buffers(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path / "s") as store:
        thread = store.create_thread()
        for n in range(RECORDS - 1):
            store.append(thread, "custom.note", dict(DATA, n=n), durable=False)
        store.flush()
        records = store.read(thread)
    assert len(records) == RECORDS
    adopted, per_record = _held(lambda: check_import(records))
    line = sum(len(a.line) for a in adopted) / RECORDS  # type: ignore[attr-defined]
    assert per_record < line + 600, (per_record, line)  # not line + 4 KiB


def test_a_new_log_holds_its_lines_not_orjsons_buffers(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path / "s") as store:
        batch = store.new_threads()

        def build() -> NewLog:
            log = NewLog(batch, "local", title=None, lineage=None, config={})
            for n in range(RECORDS - 1):
                log.append(log.thread_id, "custom.note", dict(DATA, n=n))
            return log

        log, per_record = _held(build)
        line = sum(len(x) for x in log.lines) / RECORDS  # type: ignore[attr-defined]
        # its line, its record (the data as given, ids, timestamp) and the state's bookkeeping
        assert per_record < line + 1500, (per_record, line)
        again = log.append(log.thread_id, "custom.note", dict(DATA, n=5), id=log.records[6].id)  # type: ignore[attr-defined]
        assert again is log.records[6]  # type: ignore[attr-defined]  # a replay: the stored record
        batch.discard()


def test_the_memory_store_keeps_each_records_json_at_its_own_size() -> None:
    from threadlog.store.inmemory import MemoryStore

    store = MemoryStore()
    thread = store.create_thread()

    def build() -> None:
        for n in range(RECORDS):
            store.append(thread, "custom.note", dict(DATA, n=n))

    _, per_record = _held(build)
    assert per_record < 3000, per_record  # was ~4 KiB of orjson's buffer more
    assert [r.data["n"] for r in store.read(thread)[1:4]] == [0, 1, 2]
