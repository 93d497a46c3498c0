"""The embedded store's `Artifacts` capability: blobs by hash, stored and fetched directly.

A base class of `EmbeddedStore` (like `Queries`), so that the facade's module keeps to wiring;
each method is one call to the `ArtifactStore` (`threadlog.store.embedded.artifacts`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import BinaryIO

    from threadlog.model.refs import ArtifactRef
    from threadlog.store.embedded.artifacts import ArtifactStore, BlobWriter

__all__ = ["Blobs"]


class Blobs:
    """`threadlog.store.protocol.Artifacts` over the store's `ArtifactStore`."""

    artifacts: ArtifactStore

    def put_artifact(
        self,
        content: bytes,
        *,
        media_type: str = "application/octet-stream",
        summary: str | None = None,
    ) -> ArtifactRef:
        """Store ``content`` durably; its reference."""
        return self.artifacts.put(content, media_type=media_type, summary=summary)

    def artifact_writer(self, *, media_type: str = "application/octet-stream") -> BlobWriter:
        """A writer streaming a blob to a temporary file, committed by its hash."""
        return self.artifacts.writer(media_type)

    def get_artifact(self, sha256: str) -> bytes:
        """A blob's bytes, checked against its hash."""
        return self.artifacts.get(sha256)

    def open_artifact(self, sha256: str) -> BinaryIO:
        """A blob's file, opened for reading."""
        return self.artifacts.open(sha256)

    def check_artifact(self, ref: ArtifactRef) -> str | None:
        """What is wrong with a referenced blob, or None."""
        return self.artifacts.check(ref)
