"""The contract of refusals: what a store must turn away, and that a refusal writes nothing.

Malformed event types and data, a typed ``thread.created`` appended by hand, bad ids, parents
and principals, unknown threads, a closed store, and thread settings that are not what they
claim to be (a ``cwd`` that is not a path; a relative one is stored absolute). Each refusal is
the documented error and leaves the log and the next ordinal as they were.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from threadlog.errors import InvalidData, InvalidEventType, ThreadNotFound, UsageError
from threadlog.model.envelope import FORMAT_VERSION
from threadlog.model.events import ThreadCreated
from threadlog.testing.contract._common import EVENT_ID, MISSING_THREAD, check_chain

if TYPE_CHECKING:
    from threadlog.store.protocol import Store

__all__ = ["RefusalTests"]


class RefusalTests:
    """Bad input is refused with the documented error, and nothing is written."""

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
