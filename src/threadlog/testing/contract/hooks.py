"""The contract of the append hooks: ``check`` and the listeners.

``check(record)`` sees the finished record before it is written, and raising from it writes
nothing (the ordinal and the id stay free); a replay does not call it. Listeners are called
with every new record once it is durable (the tests ``flush()`` first), each one, even when
another raises; error listeners can be added and removed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from threadlog.testing.contract._common import EVENT_ID, check_chain

if TYPE_CHECKING:
    from threadlog.model.envelope import Record
    from threadlog.store.protocol import Store

__all__ = ["HookTests"]


class HookTests:
    """``check`` vetoes before the write; listeners hear every durable record."""

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

    def test_error_listeners_can_be_added_and_removed(self, store: Store) -> None:
        heard: list[Exception] = []
        store.add_error_listener(heard.append)
        thread = store.create_thread("a")
        store.append(thread, "custom.n", {})
        store.remove_error_listener(heard.append)
        assert heard == []
