"""The contract of create, append and read: ordinals, the chain, parents, copies.

A new thread's first record is its ``thread.created``; each append gets the next ordinal,
links to the previous record's hash, and (by default) takes the previous record as its
parent. ``read(after=, limit=)`` pages through the log by ordinal; ``read(before=, limit=)``
pages backwards (the records nearest ``before``, ascending: the last N of a thread). Data is copied on the way in
and out: neither the caller's objects nor a record handed out alias the log.
"""

from __future__ import annotations

from typing import Any

import pytest

from threadlog.errors import ThreadNotFound, UsageError
from threadlog.model.envelope import FORMAT_VERSION, Record
from threadlog.model.reducer import replay
from threadlog.store.protocol import Store
from threadlog.testing.contract._common import MISSING_THREAD, OTHER_ID, check_chain

__all__ = ["AppendReadTests"]


class AppendReadTests:
    """The log grows by one ordinal per append and reads back exactly as written."""

    def test_create_append_read(self, store: Store) -> None:
        thread = store.create_thread("alice", title="T", model="m1", cwd="/w")
        assert store.exists(thread)
        r2 = store.append(thread, "turn.started", {"turn_id": "t1", "input": "hi"})
        r3 = store.append(
            thread, "custom.note", {"x": [1, 2.5, None, "é"], "nested": {"b": 1, "a": 2}}
        )
        r4 = store.append(thread, "custom.scalar", "just a string")
        records = store.read(thread)
        check_chain(records)
        assert [r.ord for r in records] == [1, 2, 3, 4]
        assert records[1:] == [r2, r3, r4]
        created = records[0]
        assert created.type == "thread.created" and created.parent is None
        assert created.thread == thread
        assert created.data["principal"] == "alice"
        assert created.data["title"] == "T"
        assert created.data["config"] == {"model": "m1", "cwd": "/w"}
        assert created.data["format"] == FORMAT_VERSION
        assert all(r.thread == thread for r in records)
        # the default parent is the previous record
        assert [r.parent for r in records] == [None, records[0].id, r2.id, r3.id]
        assert r3.data == {"x": [1, 2.5, None, "é"], "nested": {"a": 2, "b": 1}}
        assert r4.data == "just a string"
        assert store.state(thread) == replay(records)
        assert store.state(thread).active_turn == "t1"

    def test_read_after_and_limit(self, store: Store) -> None:
        thread = store.create_thread("a")
        for i in range(5):
            store.append(thread, "custom.n", {"i": i})
        everything = store.read(thread)
        assert len(everything) == 6
        assert store.read(thread, 0) == everything
        assert store.read(thread, after=2) == everything[2:]
        assert [r.ord for r in store.read(thread, after=2)] == [3, 4, 5, 6]
        assert store.read(thread, after=6) == []
        assert store.read(thread, after=100) == []
        assert store.read(thread, limit=2) == everything[:2]
        assert store.read(thread, after=1, limit=2) == everything[1:3]
        assert store.read(thread, limit=0) == []

    def test_read_before_keeps_the_records_nearest_it(self, store: Store) -> None:
        thread = store.create_thread("a")
        for i in range(7):
            store.append(thread, "custom.n", {"i": i})
        everything = store.read(thread)  # ords 1..8
        assert store.read(thread, before=9) == everything
        assert store.read(thread, before=2**62) == everything
        assert store.read(thread, before=5) == everything[:4]
        assert store.read(thread, before=9, limit=3) == everything[5:]  # the last three
        assert store.read(thread, before=2**62, limit=3) == everything[5:]
        assert store.read(thread, before=6, limit=2) == everything[3:5]
        assert store.read(thread, after=3, before=6) == everything[3:5]
        assert store.read(thread, after=3, before=6, limit=10) == everything[3:5]
        assert store.read(thread, after=4, before=6, limit=1) == everything[4:5]
        assert store.read(thread, before=3, limit=100) == everything[:2]
        assert store.read(thread, before=2, limit=1) == everything[:1]
        assert store.read(thread, before=1) == []
        assert store.read(thread, after=5, before=6) == []
        assert store.read(thread, after=6, before=3) == []
        assert store.read(thread, before=9, limit=0) == []
        assert store.read(thread, before=100, limit=8) == everything

    def test_read_before_a_thread_that_does_not_exist(self, store: Store) -> None:
        with pytest.raises(ThreadNotFound):
            store.read(MISSING_THREAD, before=5, limit=2)

    def test_read_after_a_negative_ordinal_returns_everything(self, store: Store) -> None:
        # BUG (memory): MemoryStore.read slices records[after:], so after=-1 returns the last
        # record only; the embedded store returns every record with ord > after, i.e. all.
        thread = store.create_thread("a")
        store.append(thread, "custom.n", {"i": 1})
        store.append(thread, "custom.n", {"i": 2})
        assert store.read(thread, after=-1) == store.read(thread)

    def test_read_pages_through_a_long_log(self, store: Store) -> None:
        thread = store.create_thread("a")
        for i in range(30):
            store.append(thread, "custom.n", {"i": i}, durable=False)
        store.flush()
        everything = store.read(thread)
        pages: list[Record] = []
        while True:
            page = store.read(thread, after=pages[-1].ord if pages else 0, limit=7)
            if not page:
                break
            pages.extend(page)
        assert pages == everything
        assert [r.ord for r in store.read(thread, after=29, limit=5)] == [30, 31]

    def test_explicit_parents(self, store: Store) -> None:
        thread = store.create_thread("a")
        root = store.append(thread, "custom.a", {}, parent=None)
        first = store.read(thread)[0]
        branch = store.append(thread, "custom.b", {}, parent=first.id)
        after = store.append(thread, "custom.c", {})
        assert root.parent is None
        assert branch.parent == first.id
        assert after.parent == branch.id  # "the previous record", whatever the tree looks like
        check_chain(store.read(thread))

    def test_a_parent_that_names_no_record_is_refused(self, store: Store) -> None:
        thread = store.create_thread("u")
        first = store.append(thread, "custom.x", {"i": 1}, durable=True)
        other = store.create_thread("u")
        foreign = store.read(other)[0].id
        for parent in (OTHER_ID, foreign):
            with pytest.raises(UsageError, match="no record"):
                store.append(thread, "custom.x", {"i": 2}, parent=parent, durable=True)
        assert len(store.read(thread)) == 2  # nothing written
        # a real parent, a new root, and the default still work
        store.append(thread, "custom.x", {"i": 3}, parent=store.read(thread)[0].id)
        store.append(thread, "custom.x", {"i": 4}, parent=first.id)
        store.append(thread, "custom.x", {"i": 5}, parent=None)
        last = store.append(thread, "custom.x", {"i": 6}, durable=True)
        assert [r.ord for r in store.read(thread)] == [1, 2, 3, 4, 5, 6]
        assert last.parent == store.read(thread)[4].id

    def test_threads_are_independent(self, store: Store) -> None:
        one = store.create_thread("a")
        two = store.create_thread("b")
        assert one != two
        store.append(one, "custom.x", {"in": "one"})
        store.append(two, "custom.x", {"in": "two"})
        store.append(one, "custom.x", {"in": "one again"})
        assert [r.ord for r in store.read(one)] == [1, 2, 3]
        assert [r.ord for r in store.read(two)] == [1, 2]
        check_chain(store.read(one))
        check_chain(store.read(two))
        assert store.read(two)[1].data == {"in": "two"}

    def test_caller_data_is_copied(self, store: Store) -> None:
        thread = store.create_thread("a")
        data: dict[str, Any] = {"items": [1, 2]}
        record = store.append(thread, "custom.x", data)
        data["items"].append(3)
        data["new"] = True
        assert record.data == {"items": [1, 2]}
        assert store.read(thread)[1].data == {"items": [1, 2]}

    def test_records_handed_out_do_not_alias_the_log(self, store: Store) -> None:
        # BUG (memory): MemoryStore hands out the very Record objects (and data dicts) it keeps,
        # so a caller mutating a returned record's data rewrites the log (and breaks the hash
        # chain and idempotent replays); the embedded store re-reads each time.
        thread = store.create_thread("a")
        returned = store.append(thread, "custom.x", {"v": 1})
        returned.data["v"] = 2
        store.read(thread)[1].data["w"] = 3
        assert store.read(thread)[1].data == {"v": 1}
        check_chain(store.read(thread))

    def test_the_port_is_a_runtime_checkable_protocol(self, store: Store) -> None:
        assert isinstance(store, Store)
        with store as same:
            assert same is store
