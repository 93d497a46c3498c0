"""`StoreContract`: the tests every `threadlog.store.Store` backend must pass, shipped.

A backend's test module subclasses it and says how to make a fresh store::

    from threadlog.testing import StoreContract

    class TestMyStore(StoreContract):
        def make_store(self, tmp_path):
            return MyStore(tmp_path / "home")

pytest then runs every test below against it (the ``store`` fixture makes one per test and
closes it after). The tests use the port only, plus a capability when the store has it
(`Snapshots`). Listeners of a durable backend are called once records are durable, so the
tests ``flush()`` before looking at what a listener saw.

This module imports pytest; ``import threadlog`` never imports it (pytest is no runtime
dependency).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from threadlog.errors import (
    DuplicateEventConflict,
    InvalidData,
    InvalidEventType,
    OrdinalConflict,
    ThreadNotFound,
    UsageError,
)
from threadlog.model import codec
from threadlog.model.envelope import FORMAT_VERSION, Record, record_hash
from threadlog.model.events import ThreadCreated
from threadlog.model.ids import uuid7
from threadlog.model.reducer import replay
from threadlog.model.refs import is_artifact_ref
from threadlog.store.protocol import Snapshots, Store

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["StoreContract", "check_chain"]

EVENT_ID = uuid7(1_700_000_000_000, bytes(10))
OTHER_ID = uuid7(1_700_000_000_001, bytes(10))
MISSING_THREAD = uuid7(1_700_000_000_000, b"\x01" * 10)
LOOKALIKE = {"$artifact": {"sha256": "ab" * 32, "size": 3, "media_type": "text/plain"}}
LOOKALIKES: list[Any] = [
    LOOKALIKE,  # the whole data
    {"result": LOOKALIKE},  # a top-level value
    {"$escaped": 1},  # the escape itself, whole
    {"x": {"$escaped": LOOKALIKE}},  # an escaped look-alike, as a value
    {"$escaped": {"$escaped": "deep"}},
    {"a": LOOKALIKE, "b": {"$escaped": None}, "c": 1, "d": {"$artifact": 1}},
    {"$artifact": {"sha256": "cd" * 32, "size": 3, "media_type": "text/plain", "summary": "x"}},
]
BIG = 200_000
"""Larger than any backend's artifact threshold by default (64 KiB)."""


def check_chain(records: list[Record]) -> None:
    """Ordinals from 1, each ``prev`` the previous ``hash``, each hash recomputed, and the
    whole log accepted by the reducer (for a thread that is not a fork)."""
    assert records, "a thread always has its thread.created record"
    for i, record in enumerate(records):
        assert record.ord == i + 1
        assert record.v == FORMAT_VERSION
        assert record.prev == (records[i - 1].hash if i else None)
        digest = record_hash(record, codec.canonical(record.data))
        assert digest == record.hash, f"ord {record.ord}: hash does not match the content"
    assert len({r.id for r in records}) == len(records)
    replay(records)


class StoreContract:
    """The store contract as a pytest test class; override `make_store`."""

    def make_store(self, tmp_path: Path) -> Store:
        """A new, empty store (``tmp_path`` is the test's own directory)."""
        raise NotImplementedError("a StoreContract subclass says how to make its store")

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        """A fresh store from `make_store`, closed after the test."""
        made = self.make_store(tmp_path)
        try:
            yield made
        finally:
            made.close()

    # -- create, append, read --------------------------------------------------------------------

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

    def test_only_a_fork_declares_inherited_records(self, store: Store) -> None:
        lineage = {"thread": "p", "ord": 3, "hash": "b" * 64, "copied": {"prev": "a" * 64}}
        with pytest.raises(UsageError, match="fork only"):
            store.create_thread("alice", lineage=lineage)
        assert store.thread_ids() == []

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

    def test_read_after_a_negative_ordinal_returns_everything(self, store: Store) -> None:
        # BUG (memory): MemoryStore.read slices records[after:], so after=-1 returns the last
        # record only; the embedded store returns every record with ord > after, i.e. all.
        thread = store.create_thread("a")
        store.append(thread, "custom.n", {"i": 1})
        store.append(thread, "custom.n", {"i": 2})
        assert store.read(thread, after=-1) == store.read(thread)

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

    # -- idempotency and conflicts ---------------------------------------------------------------

    def test_idempotent_append_by_id(self, store: Store) -> None:
        thread = store.create_thread("a")
        first = store.append(thread, "custom.x", {"v": 1}, id=EVENT_ID)
        assert first.id == EVENT_ID and first.ord == 2
        store.append(thread, "custom.y", {})
        again = store.append(thread, "custom.x", {"v": 1}, id=EVENT_ID)
        assert again == first
        same_parent = store.append(thread, "custom.x", {"v": 1}, id=EVENT_ID, parent=first.parent)
        assert same_parent == first
        assert len(store.read(thread)) == 3
        different: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
            ("custom.x", {"v": 2}, {}),
            ("custom.z", {"v": 1}, {}),
            ("custom.x", {"v": 1}, {"parent": None}),
            ("custom.x", {"v": 1}, {"parent": OTHER_ID}),
        ]
        for type_, data, kwargs in different:
            with pytest.raises(DuplicateEventConflict) as info:
                store.append(thread, type_, data, id=EVENT_ID, **kwargs)
            assert info.value.ord == 2
            assert info.value.event_id == EVENT_ID
            assert info.value.thread_id == thread
        records = store.read(thread)
        assert len(records) == 3
        check_chain(records)

    def test_idempotent_append_compares_canonical_content(self, store: Store) -> None:
        # BUG (memory): MemoryStore compares the stored (decoded) data with the caller's raw
        # objects, so a replay with a tuple (canonically the same list) is a false conflict; the
        # embedded store compares decoded canonical bytes.
        thread = store.create_thread("a")
        first = store.append(thread, "custom.x", {"v": (1, 2)}, id=EVENT_ID)
        assert first.data == {"v": [1, 2]}
        assert store.append(thread, "custom.x", {"v": (1, 2)}, id=EVENT_ID) == first
        assert store.append(thread, "custom.x", {"v": [1, 2]}, id=EVENT_ID) == first

    def test_id_of_another_thread_is_not_a_duplicate(self, store: Store) -> None:
        one = store.create_thread("a")
        two = store.create_thread("a")
        store.append(one, "custom.x", {"v": 1}, id=EVENT_ID)
        record = store.append(two, "custom.x", {"v": 2}, id=EVENT_ID)
        assert record.thread == two and record.ord == 2

    def test_expect_ord(self, store: Store) -> None:
        thread = store.create_thread("a")
        assert store.append(thread, "custom.x", {}, expect_ord=2).ord == 2
        for wrong in (2, 4, 1, 0):
            with pytest.raises(OrdinalConflict) as info:
                store.append(thread, "custom.x", {"wrong": wrong}, expect_ord=wrong)
            assert info.value.expected == wrong
            assert info.value.actual == 3
            assert info.value.thread_id == thread
        assert len(store.read(thread)) == 2
        assert store.append(thread, "custom.x", {}, expect_ord=3).ord == 3
        check_chain(store.read(thread))

    def test_idempotent_replay_ignores_expect_ord(self, store: Store) -> None:
        thread = store.create_thread("a")
        first = store.append(thread, "custom.x", {}, id=EVENT_ID, expect_ord=2)
        store.append(thread, "custom.y", {})
        assert store.append(thread, "custom.x", {}, id=EVENT_ID, expect_ord=2) == first

    # -- bad input -------------------------------------------------------------------------------

    @pytest.mark.parametrize(
        ("type_", "data", "error"),
        [
            ("Bad.Type", {}, InvalidEventType),
            ("nodots", {}, InvalidEventType),
            ("custom.", {}, InvalidEventType),
            ("", {}, InvalidEventType),
            ("turn.no_such_event", {}, InvalidEventType),
            ("custom.x", {"v": float("nan")}, InvalidData),
            ("custom.x", {"v": float("inf")}, InvalidData),
            ("custom.x", {1: "non-string key"}, InvalidData),
            ("custom.x", {"v": {1, 2}}, InvalidData),
            ("custom.x", {"v": object()}, InvalidData),
            ("custom.x", {"v": 2**70}, InvalidData),
            ("turn.started", {"turn_id": "t1", "input": "hi", "bogus": 1}, InvalidData),
            ("turn.started", {"input": "hi"}, InvalidData),
            ("turn.started", ["not", "an", "object"], InvalidData),
            ("thread.created", {"format": 1, "principal": "p", "config": {}}, UsageError),
        ],
    )
    def test_bad_events_write_nothing(
        self, store: Store, type_: str, data: Any, error: type[Exception]
    ) -> None:
        thread = store.create_thread("a")
        with pytest.raises(error):
            store.append(thread, type_, data)
        assert len(store.read(thread)) == 1
        assert store.append(thread, "custom.ok", {}).ord == 2  # the ordinal was not used up
        check_chain(store.read(thread))

    def test_thread_created_is_refused_as_a_typed_event(self, store: Store) -> None:
        thread = store.create_thread("a")
        event = ThreadCreated(
            format=FORMAT_VERSION, principal="p", config={}, lineage=None, title=None
        )
        with pytest.raises(UsageError, match="create_thread"):
            store.append(thread, event)
        assert len(store.read(thread)) == 1

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"id": "not-a-uuid"},
            {"id": EVENT_ID.upper()},
            {"id": ""},
            {"parent": 5},
            {"parent": b"bytes"},
        ],
    )
    def test_bad_ids_and_parents(self, store: Store, kwargs: dict[str, Any]) -> None:
        thread = store.create_thread("a")
        with pytest.raises(UsageError):
            store.append(thread, "custom.x", {}, **kwargs)
        assert len(store.read(thread)) == 1

    @pytest.mark.parametrize("principal", ["", None, 5])
    def test_bad_principal(self, store: Store, principal: Any) -> None:
        with pytest.raises(UsageError, match="principal"):
            store.create_thread(principal)

    def test_thread_not_found(self, store: Store) -> None:
        store.create_thread("a")  # another thread exists
        assert not store.exists(MISSING_THREAD)
        assert not store.exists("not-a-uuid")
        with pytest.raises(ThreadNotFound) as info:
            store.append(MISSING_THREAD, "custom.x", {})
        assert info.value.thread_id == MISSING_THREAD
        with pytest.raises(ThreadNotFound):
            store.read(MISSING_THREAD)
        with pytest.raises(ThreadNotFound):
            store.state(MISSING_THREAD)
        with pytest.raises(ThreadNotFound):
            asyncio.run(store.aappend(MISSING_THREAD, "custom.x", {}))
        assert not store.exists(MISSING_THREAD)

    def test_closed_store_refuses_writes(self, store: Store) -> None:
        # BUG (memory): MemoryStore.create_thread does not check that the store is open (append
        # does); EmbeddedStore refuses both with UsageError.
        thread = store.create_thread("a")
        store.close()
        with pytest.raises(UsageError, match="closed"):
            store.append(thread, "custom.x", {})
        with pytest.raises(UsageError, match="closed"):
            store.create_thread("a")
        store.close()  # idempotent

    # -- the check hook --------------------------------------------------------------------------

    def test_check_sees_the_finished_record(self, store: Store) -> None:
        thread = store.create_thread("a")
        seen: list[Record] = []
        record = store.append(thread, "custom.x", {"v": 1}, check=seen.append)
        assert seen == [record]
        assert record.ord == 2 and record.prev == store.read(thread)[0].hash
        check_chain(store.read(thread))

    def test_check_raising_writes_nothing(self, store: Store) -> None:
        thread = store.create_thread("a")
        listened: list[Record] = []
        store.add_listener(lambda _thread, records: listened.extend(records))
        refused: list[Record] = []

        class Refused(Exception):
            pass

        def refuse(record: Record) -> None:
            refused.append(record)
            raise Refused("no")

        with pytest.raises(Refused):
            store.append(thread, "custom.x", {"v": 1}, id=EVENT_ID, check=refuse)
        assert [r.ord for r in refused] == [2]
        store.flush()
        assert len(store.read(thread)) == 1
        assert listened == []
        # the ordinal and the id are still free
        record = store.append(thread, "custom.y", {"v": 2}, id=EVENT_ID, expect_ord=2)
        assert record.ord == 2 and record.type == "custom.y"
        assert record.prev == store.read(thread)[0].hash
        check_chain(store.read(thread))

    def test_check_is_not_called_on_an_idempotent_replay(self, store: Store) -> None:
        thread = store.create_thread("a")
        first = store.append(thread, "custom.x", {}, id=EVENT_ID)
        calls: list[Record] = []
        assert store.append(thread, "custom.x", {}, id=EVENT_ID, check=calls.append) == first
        assert calls == []

    # -- listeners -------------------------------------------------------------------------------

    def test_listeners_get_the_appended_records(self, store: Store) -> None:
        seen: list[tuple[str, Record]] = []

        def listener(thread_id: str, records: list[Record]) -> None:
            assert all(r.thread == thread_id for r in records)
            seen.extend((thread_id, r) for r in records)

        store.add_listener(listener)
        one = store.create_thread("a")
        two = store.create_thread("b")
        store.append(one, "custom.x", {"i": 1})
        store.append(two, "custom.x", {"i": 2}, durable=False)
        store.append(one, "custom.x", {"i": 3}, durable=True)
        store.append(one, "custom.x", {"i": 1}, id=EVENT_ID)
        store.append(one, "custom.x", {"i": 1}, id=EVENT_ID)  # a replay is not a new record
        store.flush()
        assert [r for t, r in seen if t == one] == store.read(one)
        assert [r for t, r in seen if t == two] == store.read(two)

        store.remove_listener(listener)
        store.append(one, "custom.x", {"i": 4})
        store.flush()
        assert len([r for t, r in seen if t == one]) == 4
        with pytest.raises(ValueError):
            store.remove_listener(listener)

    def test_every_listener_is_called(self, store: Store) -> None:
        thread = store.create_thread("a")
        first: list[Record] = []
        second: list[Record] = []
        store.add_listener(lambda _t, records: first.extend(records))
        store.add_listener(lambda _t, records: second.extend(records))
        record = store.append(thread, "custom.x", {})
        store.flush()
        assert first == second == [record]

    def test_a_failing_listener_does_not_fail_the_append(self, store: Store) -> None:
        # BUG (memory): MemoryStore calls listeners without catching their exceptions, so append
        # raises *after* the record is stored (the caller believes it failed) and later listeners
        # are skipped; EmbeddedStore logs the failure and carries on.
        thread = store.create_thread("a")
        later: list[Record] = []

        def broken(_thread: str, _records: list[Record]) -> None:
            raise RuntimeError("listener bug")

        store.add_listener(broken)
        store.add_listener(lambda _t, records: later.extend(records))
        record = store.append(thread, "custom.x", {})
        store.flush()
        assert store.read(thread)[-1] == record
        assert later == [record]

    # -- aappend ---------------------------------------------------------------------------------

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

    # -- read from the middle --------------------------------------------------------------

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

    def test_the_port_is_a_runtime_checkable_protocol(self, store: Store) -> None:
        assert isinstance(store, Store)
        with store as same:
            assert same is store

    # -- parents ---------------------------------------------------------------------------

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

    # -- thread settings -------------------------------------------------------------------

    @pytest.mark.parametrize("cwd", ["rel/dir", Path("rel/dir"), "./rel/../rel/dir"])
    def test_a_relative_cwd_is_stored_absolute(
        self, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cwd: Any
    ) -> None:
        monkeypatch.chdir(tmp_path)
        thread = store.create_thread("u", cwd=cwd)
        created = store.read(thread)[0]
        assert created.data["config"]["cwd"] == str(tmp_path / "rel" / "dir")
        assert store.state(thread).config["cwd"] == str(tmp_path / "rel" / "dir")

    def test_a_cwd_that_is_not_a_path_is_refused(self, store: Store) -> None:
        with pytest.raises(UsageError, match="cwd must be a path"):
            store.create_thread("u", cwd=42)

    # -- artifacts and look-alike references -----------------------------------------------

    def test_large_values_go_to_artifacts_and_resolve(self, store: Store) -> None:
        thread = store.create_thread("a")
        big = "z" * BIG
        record = store.append(
            thread, "tool_call.finished", {"call_id": "c", "ok": True, "result": big}
        )
        ref = record.data["result"]["$artifact"]
        assert ref["size"] == len(big) + 2 and len(ref["sha256"]) == 64
        assert store.resolve(record.data)["result"] == big
        whole = store.append(thread, "custom.blob", ["w" * BIG])
        assert is_artifact_ref(whole.data)
        assert store.resolve(whole.data) == ["w" * BIG]
        beside = {"big": big, "fake": LOOKALIKE, "small": 1}
        mixed = store.append(thread, "custom.x", beside)
        assert is_artifact_ref(mixed.data["big"]) and not is_artifact_ref(mixed.data["fake"])
        assert store.resolve(mixed.data) == beside
        for read, data in zip(
            store.read(thread, after=1),
            [{"call_id": "c", "ok": True, "result": big}, ["w" * BIG], beside],
            strict=True,
        ):
            assert store.resolve(read.data) == data
        assert store.verify(thread, check_events=False).ok  # (the call was never started)

    @pytest.mark.parametrize("data", LOOKALIKES, ids=range(len(LOOKALIKES)))
    def test_lookalike_references_round_trip(self, store: Store, data: Any) -> None:
        thread = store.create_thread("u")
        record = store.append(thread, "custom.x", data, durable=True)
        (read,) = store.read(thread, after=1)
        assert read.hash == record.hash
        assert store.resolve(read.data) == data  # nothing loaded, nothing lost
        assert store.resolve(record.data) == data
        store.state(thread)  # the log replays

    def test_a_lookalike_in_a_text_field_is_refused(self, store: Store) -> None:
        """A text field accepts a reference (the store's); an object the caller passes is not
        one, and escaped it would no longer fit the field: refused, nothing written."""
        thread = store.create_thread("u")
        with pytest.raises(InvalidData, match="only the store makes references"):
            store.append(thread, "turn.started", {"turn_id": "t1", "input": LOOKALIKE})
        assert len(store.read(thread)) == 1

    @pytest.mark.parametrize(
        "settings",
        [{"title": LOOKALIKE}, {"config": LOOKALIKE}, {"config": {"$escaped": 1}}],
        ids=["title", "config", "escape"],
    )
    def test_a_thread_cannot_be_created_with_lookalike_settings(
        self, store: Store, settings: dict[str, Any]
    ) -> None:
        """``thread.created`` is written as given (its settings are the thread's config): a
        look-alike there is refused rather than escaped or misread."""
        with pytest.raises(UsageError, match="reserved for artifact references"):
            if "config" in settings:
                store.create_thread("u", **settings["config"])
            else:
                store.create_thread("u", title=settings["title"])
        assert store.thread_ids() == []

    # -- fork ------------------------------------------------------------------------------

    def test_fork_inherits_the_prefix_verbatim(self, store: Store) -> None:
        source = store.create_thread("alice", title="src", model="m1")
        for i in range(4):
            store.append(source, "custom.n", {"i": i})
        records = store.read(source)
        child = store.fork(source, 3, title="child", changes={"model": "m2"})
        assert child != source and store.exists(child)
        got = store.read(child)
        assert [r.ord for r in got] == [1, 2, 3, 4]
        assert got[1:3] == records[1:3]  # same ids, data, hashes, writer
        head = got[0]
        assert head.type == "thread.created" and head.thread == child
        lineage = head.data["lineage"]
        assert (lineage["thread"], lineage["ord"], lineage["kind"]) == (source, 3, "fork")
        assert lineage["entry"] == records[2].id and lineage["hash"] == records[2].hash
        assert head.data["title"] == "child" and head.data["principal"] == "alice"
        assert got[3].type == "config.changed" and got[3].data == {"changes": {"model": "m2"}}
        assert got[3].prev == records[2].hash
        assert store.state(child).config["model"] == "m2"
        assert store.verify(child).ok
        # the child goes on on its own; the source is untouched
        more = store.append(child, "custom.n", {"i": 99})
        assert more.ord == 5 and more.prev == got[3].hash and more.thread == child
        assert store.read(source) == records
        assert store.verify(child).ok and store.verify(source).ok

    def test_fork_of_a_fork_and_at_the_head(self, store: Store) -> None:
        source = store.create_thread("a")
        store.append(source, "custom.n", {"i": 1})
        child = store.fork(source)
        store.append(child, "custom.n", {"i": 2})
        grandchild = store.fork(child)
        got = store.read(grandchild)
        assert [r.thread for r in got] == [grandchild, source, child]
        assert got[0].data["lineage"]["copied"]["threads"] == sorted([source, child])
        assert store.verify(grandchild).ok
        bare = store.fork(source, 1)  # only the header: nothing inherited
        assert [r.ord for r in store.read(bare)] == [1]
        assert "copied" not in store.read(bare)[0].data["lineage"]
        assert store.append(bare, "custom.n", {}).prev == store.read(bare)[0].hash
        assert store.verify(bare).ok

    def test_fork_refuses_what_the_source_does_not_have(self, store: Store) -> None:
        source = store.create_thread("a")
        store.append(source, "custom.n", {})
        before = set(store.thread_ids())
        for at in (0, 3, -1):
            with pytest.raises(UsageError):
                store.fork(source, at)
        with pytest.raises(ThreadNotFound):
            store.fork(MISSING_THREAD)
        assert set(store.thread_ids()) == before

    def test_fork_at_an_entry_id(self, store: Store) -> None:
        source = store.create_thread("a")
        # ord 2's data spells the id ord 3 is appended with: only a record's own id counts
        store.append(source, "custom.n", {"id": EVENT_ID, "ref": EVENT_ID})
        store.append(source, "custom.n", {"i": 3}, id=EVENT_ID)
        store.append(source, "custom.n", {"i": 4})
        records = store.read(source)
        child = store.fork(source, EVENT_ID, changes={"model": "m2"})
        got = store.read(child)
        assert got[1:3] == records[1:3] and got[3].type == "config.changed"
        lineage = got[0].data["lineage"]
        assert (lineage["ord"], lineage["entry"], lineage["hash"]) == (3, EVENT_ID, records[2].hash)
        assert store.verify(child).ok
        # the entry of ord 1 (thread.created): only the header is inherited
        bare = store.fork(source, records[0].id)
        assert [r.ord for r in store.read(bare)] == [1]
        # an entry the thread inherited from its own fork source
        store.append(child, "custom.n", {"i": 5})
        grandchild = store.fork(child, records[1].id)
        assert store.read(grandchild)[1:] == records[1:2]
        assert store.read(grandchild)[0].data["lineage"]["ord"] == 2
        assert store.verify(grandchild).ok

    def test_fork_refuses_an_entry_the_thread_does_not_have(self, store: Store) -> None:
        source = store.create_thread("a")
        store.append(source, "custom.n", {"i": 1})
        other = store.create_thread("b")
        elsewhere = store.append(other, "custom.n", {}).id
        before = set(store.thread_ids())
        for entry in (elsewhere, OTHER_ID, "2", "not an id"):
            with pytest.raises(UsageError, match="no entry") as info:
                store.fork(source, entry)
            assert repr(entry) in str(info.value)
        assert set(store.thread_ids()) == before

    # -- verify ----------------------------------------------------------------------------

    def test_verify_reports_a_sound_log(self, store: Store) -> None:
        thread = store.create_thread("a")
        store.append(thread, "turn.started", {"turn_id": "t1", "input": "hi"})
        store.append(thread, "custom.n", {"i": 1}, durable=False)
        store.flush()
        report = store.verify(thread)
        assert report.ok and report.error is None and report.first_bad_ord is None
        assert (report.thread_id, report.records, report.last_ord) == (thread, 3, 3)
        assert report.to_dict()["ok"] is True
        with pytest.raises(ThreadNotFound):
            store.verify(MISSING_THREAD)

    def test_verify_checks_events_against_the_reducer(self, store: Store) -> None:
        thread = store.create_thread("a")
        store.append(thread, "turn.ended", {"turn_id": "nope", "outcome": "completed"})
        assert store.verify(thread, check_events=False).ok
        report = store.verify(thread)
        assert not report.ok and report.error is not None

    # -- lifecycle, leases, repairs, snapshots ---------------------------------------------

    def test_acquire_release_flush(self, store: Store) -> None:
        thread = store.create_thread("a")
        store.acquire(thread)
        store.append(thread, "custom.n", {}, durable=False)
        store.release(thread)
        assert len(store.read(thread)) == 2
        store.append(thread, "custom.n", {})  # writable again after a release
        store.flush()
        assert store.take_repairs(thread) == []
        with pytest.raises(ThreadNotFound):
            store.acquire(MISSING_THREAD)

    def test_snapshots_when_the_store_keeps_them(self, store: Store) -> None:
        if not isinstance(store, Snapshots):
            pytest.skip("this store keeps no snapshots (an optional capability)")
        thread = store.create_thread("a")
        store.acquire(thread)
        last = store.append(thread, "custom.n", {})
        assert not store.save_snapshot(thread, b"x", ord=2, hash="0" * 64, version="v1")
        assert store.save_snapshot(thread, b"state", ord=2, hash=last.hash, version="v1")
        assert store.load_snapshot(thread, "v1") == (2, b"state")
        assert store.load_snapshot(thread, "v2") is None
        store.append(thread, "custom.n", {})
        assert store.load_snapshot(thread, "v1") == (2, b"state")

    def test_error_listeners_can_be_added_and_removed(self, store: Store) -> None:
        heard: list[Exception] = []
        store.add_error_listener(heard.append)
        thread = store.create_thread("a")
        store.append(thread, "custom.n", {})
        store.remove_error_listener(heard.append)
        assert heard == []

    def test_closed_store_still_reads(self, store: Store) -> None:
        thread = store.create_thread("a")
        record = store.append(thread, "custom.n", {"v": 1})
        store.close()
        assert store.read(thread)[-1] == record
        with pytest.raises(UsageError, match="closed"):
            store.fork(thread)
