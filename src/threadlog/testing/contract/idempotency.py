"""The contract of idempotent appends and optimistic concurrency.

An append with an ``id`` the thread already holds is a replay: the same content returns the
stored record and writes nothing (compared canonically, so a tuple replays a list), different
content is a `DuplicateEventConflict`. ``expect_ord`` makes an append conditional on the next
ordinal (`OrdinalConflict` otherwise), and a replay ignores it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from threadlog.errors import DuplicateEventConflict, OrdinalConflict
from threadlog.testing.contract._common import EVENT_ID, OTHER_ID, check_chain

if TYPE_CHECKING:
    from threadlog.store.protocol import Store

__all__ = ["IdempotencyTests"]


class IdempotencyTests:
    """Appends by id replay; ``expect_ord`` is checked."""

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
