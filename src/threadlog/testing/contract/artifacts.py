"""The contract of large values and look-alike references.

A value over the store's threshold is stored as an artifact and the record holds a reference;
`Store.resolve` brings the data back. Data that merely *looks* like a reference (or like the
escape) round-trips unchanged and loads nothing; a look-alike where only text may go, or in a
thread's settings, is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from threadlog.errors import InvalidData, UsageError
from threadlog.model.refs import is_artifact_ref
from threadlog.testing.contract._common import BIG, LOOKALIKE, LOOKALIKES, start_call

if TYPE_CHECKING:
    from threadlog.store.protocol import Store

__all__ = ["ArtifactTests"]


class ArtifactTests:
    """Large values become artifacts; look-alikes round-trip or are refused."""

    def test_large_values_go_to_artifacts_and_resolve(self, store: Store) -> None:
        thread = store.create_thread("a")
        started = start_call(store, thread)
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
            store.read(thread, after=started),
            [{"call_id": "c", "ok": True, "result": big}, ["w" * BIG], beside],
            strict=True,
        ):
            assert store.resolve(read.data) == data
        assert store.verify(thread).ok

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
