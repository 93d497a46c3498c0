"""MemoryStore against EmbeddedStore: the shared store contract, run on both backends.

Every contract test takes the ``any_store`` fixture, parametrized over ``memory`` and
``embedded`` (in a fresh home). Listeners of the embedded store are called once records are
durable, so the tests ``flush()`` before looking at what a listener saw (a no-op in memory).
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import TYPE_CHECKING, Any

import pytest

from threadlog import (
    DuplicateEventConflict,
    InvalidData,
    InvalidEventType,
    MemoryStore,
    OrdinalConflict,
    ThreadNotFound,
    UsageError,
    open_store,
)
from threadlog.model import codec
from threadlog.model.envelope import FORMAT_VERSION, Record, encode_record
from threadlog.model.events import ThreadCreated
from threadlog.model.ids import uuid7
from threadlog.model.reducer import replay

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from threadlog.store.base import Store

EVENT_ID = uuid7(1_700_000_000_000, bytes(10))
OTHER_ID = uuid7(1_700_000_000_001, bytes(10))
MISSING_THREAD = uuid7(1_700_000_000_000, b"\x01" * 10)


@pytest.fixture(params=["memory", "embedded"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        with MemoryStore() as memory:
            yield memory
    else:
        with open_store(tmp_path / "store-home") as embedded:
            yield embedded


def check_chain(records: list[Record]) -> None:
    """Ordinals from 1, each ``prev`` the previous ``hash``, each hash recomputed, and the
    whole log accepted by the reducer."""
    assert records, "a thread always has its thread.created record"
    for i, record in enumerate(records):
        assert record.ord == i + 1
        assert record.v == FORMAT_VERSION
        assert record.prev == (records[i - 1].hash if i else None)
        _, digest = encode_record(
            id=record.id,
            thread=record.thread,
            ord=record.ord,
            parent=record.parent,
            ts=record.ts,
            type=record.type,
            data_json=codec.canonical(record.data),
            prev=record.prev,
            v=record.v,
        )
        assert digest == record.hash, f"ord {record.ord}: hash does not match the content"
    assert len({r.id for r in records}) == len(records)
    replay(records)


# -- create, append, read --------------------------------------------------------------------


def test_only_a_fork_declares_inherited_records(any_store: Store) -> None:
    lineage = {"thread": "p", "ord": 3, "hash": "b" * 64, "copied": {"prev": "a" * 64}}
    with pytest.raises(UsageError, match="fork only"):
        any_store.create_thread("alice", lineage=lineage)
    assert any_store.thread_ids() == []


def test_create_append_read(any_store: Store) -> None:
    store = any_store
    thread = store.create_thread("alice", title="T", model="m1", cwd="/w")
    assert store.exists(thread)
    r2 = store.append(thread, "turn.started", {"turn_id": "t1", "input": "hi"})
    r3 = store.append(thread, "custom.note", {"x": [1, 2.5, None, "é"], "nested": {"b": 1, "a": 2}})
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


def test_read_after_and_limit(any_store: Store) -> None:
    store = any_store
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


def test_read_after_a_negative_ordinal_returns_everything(any_store: Store) -> None:
    # BUG (memory): MemoryStore.read slices records[after:], so after=-1 returns the last
    # record only; the embedded store returns every record with ord > after, i.e. all.
    store = any_store
    thread = store.create_thread("a")
    store.append(thread, "custom.n", {"i": 1})
    store.append(thread, "custom.n", {"i": 2})
    assert store.read(thread, after=-1) == store.read(thread)


def test_explicit_parents(any_store: Store) -> None:
    store = any_store
    thread = store.create_thread("a")
    root = store.append(thread, "custom.a", {}, parent=None)
    first = store.read(thread)[0]
    branch = store.append(thread, "custom.b", {}, parent=first.id)
    after = store.append(thread, "custom.c", {})
    assert root.parent is None
    assert branch.parent == first.id
    assert after.parent == branch.id  # "the previous record", whatever the tree looks like
    check_chain(store.read(thread))


def test_threads_are_independent(any_store: Store) -> None:
    store = any_store
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


def test_caller_data_is_copied(any_store: Store) -> None:
    store = any_store
    thread = store.create_thread("a")
    data: dict[str, Any] = {"items": [1, 2]}
    record = store.append(thread, "custom.x", data)
    data["items"].append(3)
    data["new"] = True
    assert record.data == {"items": [1, 2]}
    assert store.read(thread)[1].data == {"items": [1, 2]}


def test_records_handed_out_do_not_alias_the_log(any_store: Store) -> None:
    # BUG (memory): MemoryStore hands out the very Record objects (and data dicts) it keeps,
    # so a caller mutating a returned record's data rewrites the log (and breaks the hash
    # chain and idempotent replays); the embedded store re-reads each time.
    store = any_store
    thread = store.create_thread("a")
    returned = store.append(thread, "custom.x", {"v": 1})
    returned.data["v"] = 2
    store.read(thread)[1].data["w"] = 3
    assert store.read(thread)[1].data == {"v": 1}
    check_chain(store.read(thread))


def test_concurrent_appends_from_threads(any_store: Store) -> None:
    store = any_store
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


def test_idempotent_append_by_id(any_store: Store) -> None:
    store = any_store
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


def test_idempotent_append_compares_canonical_content(any_store: Store) -> None:
    # BUG (memory): MemoryStore compares the stored (decoded) data with the caller's raw
    # objects, so a replay with a tuple (canonically the same list) is a false conflict; the
    # embedded store compares decoded canonical bytes.
    store = any_store
    thread = store.create_thread("a")
    first = store.append(thread, "custom.x", {"v": (1, 2)}, id=EVENT_ID)
    assert first.data == {"v": [1, 2]}
    assert store.append(thread, "custom.x", {"v": (1, 2)}, id=EVENT_ID) == first
    assert store.append(thread, "custom.x", {"v": [1, 2]}, id=EVENT_ID) == first


def test_id_of_another_thread_is_not_a_duplicate(any_store: Store) -> None:
    store = any_store
    one = store.create_thread("a")
    two = store.create_thread("a")
    store.append(one, "custom.x", {"v": 1}, id=EVENT_ID)
    record = store.append(two, "custom.x", {"v": 2}, id=EVENT_ID)
    assert record.thread == two and record.ord == 2


def test_expect_ord(any_store: Store) -> None:
    store = any_store
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


def test_idempotent_replay_ignores_expect_ord(any_store: Store) -> None:
    store = any_store
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
    any_store: Store, type_: str, data: Any, error: type[Exception]
) -> None:
    store = any_store
    thread = store.create_thread("a")
    with pytest.raises(error):
        store.append(thread, type_, data)
    assert len(store.read(thread)) == 1
    assert store.append(thread, "custom.ok", {}).ord == 2  # the ordinal was not used up
    check_chain(store.read(thread))


def test_thread_created_is_refused_as_a_typed_event(any_store: Store) -> None:
    store = any_store
    thread = store.create_thread("a")
    event = ThreadCreated(format=FORMAT_VERSION, principal="p", config={}, lineage=None, title=None)
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
def test_bad_ids_and_parents(any_store: Store, kwargs: dict[str, Any]) -> None:
    store = any_store
    thread = store.create_thread("a")
    with pytest.raises(UsageError):
        store.append(thread, "custom.x", {}, **kwargs)
    assert len(store.read(thread)) == 1


@pytest.mark.parametrize("principal", ["", None, 5])
def test_bad_principal(any_store: Store, principal: Any) -> None:
    with pytest.raises(UsageError, match="principal"):
        any_store.create_thread(principal)


def test_thread_not_found(any_store: Store) -> None:
    store = any_store
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


def test_closed_store_refuses_writes(any_store: Store) -> None:
    # BUG (memory): MemoryStore.create_thread does not check that the store is open (append
    # does); EmbeddedStore refuses both with UsageError.
    store = any_store
    thread = store.create_thread("a")
    store.close()
    with pytest.raises(UsageError, match="closed"):
        store.append(thread, "custom.x", {})
    with pytest.raises(UsageError, match="closed"):
        store.create_thread("a")
    store.close()  # idempotent


# -- the check hook --------------------------------------------------------------------------


def test_check_sees_the_finished_record(any_store: Store) -> None:
    store = any_store
    thread = store.create_thread("a")
    seen: list[Record] = []
    record = store.append(thread, "custom.x", {"v": 1}, check=seen.append)
    assert seen == [record]
    assert record.ord == 2 and record.prev == store.read(thread)[0].hash
    check_chain(store.read(thread))


def test_check_raising_writes_nothing(any_store: Store) -> None:
    store = any_store
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


def test_check_is_not_called_on_an_idempotent_replay(any_store: Store) -> None:
    store = any_store
    thread = store.create_thread("a")
    first = store.append(thread, "custom.x", {}, id=EVENT_ID)
    calls: list[Record] = []
    assert store.append(thread, "custom.x", {}, id=EVENT_ID, check=calls.append) == first
    assert calls == []


# -- listeners -------------------------------------------------------------------------------


def test_listeners_get_the_appended_records(any_store: Store) -> None:
    store = any_store
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


def test_every_listener_is_called(any_store: Store) -> None:
    store = any_store
    thread = store.create_thread("a")
    first: list[Record] = []
    second: list[Record] = []
    store.add_listener(lambda _t, records: first.extend(records))
    store.add_listener(lambda _t, records: second.extend(records))
    record = store.append(thread, "custom.x", {})
    store.flush()
    assert first == second == [record]


def test_a_failing_listener_does_not_fail_the_append(any_store: Store) -> None:
    # BUG (memory): MemoryStore calls listeners without catching their exceptions, so append
    # raises *after* the record is stored (the caller believes it failed) and later listeners
    # are skipped; EmbeddedStore logs the failure and carries on.
    store = any_store
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


def test_aappend(any_store: Store) -> None:
    store = any_store
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


def test_aappend_check_hook(any_store: Store) -> None:
    store = any_store
    thread = store.create_thread("a")

    def refuse(record: Record) -> None:
        raise ValueError(f"refused ord {record.ord}")

    async def main() -> None:
        with pytest.raises(ValueError, match="refused ord 2"):
            await store.aappend(thread, "custom.x", {}, check=refuse)
        assert (await store.aappend(thread, "custom.y", {})).ord == 2

    asyncio.run(main())
    assert [r.type for r in store.read(thread)] == ["thread.created", "custom.y"]


# -- MemoryStore on its own ------------------------------------------------------------------


def test_memory_store_writes_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    home = cwd / "home"
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("THREADLOG_HOME", os.fspath(home))
    before = sorted(p.name for p in tmp_path.iterdir())

    with MemoryStore() as store:
        assert store.home == ":memory:"
        thread = store.create_thread("alice", title="t", cwd=os.fspath(cwd))
        store.append(thread, "turn.started", {"turn_id": "t1", "input": "hi"})
        store.append(thread, "custom.big", {"blob": "x" * 200_000}, durable=True)
        store.append(thread, "custom.x", {}, id=EVENT_ID)
        asyncio.run(store.aappend(thread, "custom.y", {"v": 1}))
        store.flush()
        store.release(thread)
        assert store.state(thread).active_turn == "t1"
        assert store.resolve({"a": 1}) == {"a": 1}
        assert store.thread_ids() == [thread]
        check_chain(store.read(thread))

    assert os.listdir(cwd) == []
    assert not home.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == before
