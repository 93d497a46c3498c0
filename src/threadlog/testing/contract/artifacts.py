"""The contract of large values and look-alike references.

A value over the store's threshold is stored as an artifact and the record holds a reference;
`Store.resolve` brings the data back. Data that merely *looks* like a reference (or like the
escape) round-trips unchanged and loads nothing; a look-alike where only text may go, or in a
thread's settings, is refused.

A store with the `Artifacts` capability stores and fetches blobs directly (whole, or streamed
in by a writer), and its `Store.verify` reports a referenced blob that is missing, naming the
record (000 §17.2). A store without the capability skips those tests.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import pytest

from threadlog.errors import InvalidData, UsageError
from threadlog.model.refs import ArtifactRef, is_artifact_ref
from threadlog.store.protocol import Artifacts
from threadlog.testing.contract._common import BIG, LOOKALIKE, LOOKALIKES, start_call

if TYPE_CHECKING:
    from threadlog.store.protocol import Store

__all__ = ["ArtifactTests", "BlobTests"]


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


def _blobs(store: Store) -> Artifacts:
    if not isinstance(store, Artifacts):
        pytest.skip("the store has no Artifacts capability")
    return store


class BlobTests:
    """The `Artifacts` capability: blobs put, streamed, fetched, checked; verify checks them."""

    def test_a_blob_put_is_fetched_opened_and_checked(self, store: Store) -> None:
        blobs = _blobs(store)
        content = bytes(range(256)) * 100
        ref = blobs.put_artifact(content, media_type="text/plain", summary="s")
        assert ref == ArtifactRef(
            hashlib.sha256(content).hexdigest(), len(content), "text/plain", "s"
        )
        assert blobs.get_artifact(ref.sha256) == content
        with blobs.open_artifact(ref.sha256) as f:
            f.seek(25_000)
            assert f.read(10) == content[25_000:25_010]
        assert blobs.check_artifact(ref) is None
        assert blobs.put_artifact(content).sha256 == ref.sha256  # stored once, by content

    def test_a_missing_blob_is_refused_and_reported(self, store: Store) -> None:
        blobs = _blobs(store)
        missing = ArtifactRef("0" * 64, 3)
        with pytest.raises(UsageError):
            blobs.get_artifact(missing.sha256)
        with pytest.raises(UsageError):
            blobs.open_artifact(missing.sha256)
        assert "missing" in (blobs.check_artifact(missing) or "")
        sound = blobs.put_artifact(b"abc")
        wrong_size = ArtifactRef(sound.sha256, 4)
        assert blobs.check_artifact(wrong_size) is not None

    def test_a_streamed_blob_keeps_every_byte(self, store: Store) -> None:
        blobs = _blobs(store)
        chunks = [bytes([i % 251]) * 65_536 for i in range(48)]  # 3 MiB
        with blobs.artifact_writer(media_type="text/plain") as writer:
            for chunk in chunks:
                writer.write(chunk)
            ref = writer.commit(summary="head")
        whole = b"".join(chunks)
        assert (ref.sha256, ref.size, ref.media_type, ref.summary) == (
            hashlib.sha256(whole).hexdigest(),
            len(whole),
            "text/plain",
            "head",
        )
        assert blobs.get_artifact(ref.sha256) == whole
        with blobs.artifact_writer() as dropped:
            dropped.write(b"never committed")
        assert blobs.check_artifact(ArtifactRef(hashlib.sha256(b"never committed").hexdigest(), 15))

    def test_verify_reports_a_referenced_blob_that_is_missing(self, store: Store) -> None:
        blobs = _blobs(store)
        thread = store.create_thread("u")
        ref = blobs.put_artifact(b"kept")
        store.append(thread, "artifact.stored", {"sha256": ref.sha256, "size": ref.size})
        assert store.verify(thread).ok
        gone = store.append(thread, "artifact.stored", {"sha256": "ab" * 32, "size": 5})
        store.append(thread, "custom.after", {"n": 1})
        report = store.verify(thread)
        assert not report.ok
        assert report.first_bad_ord == gone.ord
        assert "ab" * 32 in str(report.error)
