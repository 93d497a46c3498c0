"""The in-memory store's `Artifacts` capability: blobs in a dict, by hash.

A base class of `MemoryStore`, kept apart so that the store's module keeps to its log. A
memory store holds every blob in memory by nature; its writer still takes the bytes a chunk
at a time, as the port says, so that callers are written for a durable backend.
"""

from __future__ import annotations

import hashlib
import io
from typing import TYPE_CHECKING, Self

from threadlog.errors import IntegrityError, UsageError
from threadlog.model.refs import ArtifactRef

if TYPE_CHECKING:
    import threading
    from types import TracebackType
    from typing import BinaryIO

__all__ = ["MemoryBlobs"]


class MemoryBlobs:
    """`threadlog.store.protocol.Artifacts` over ``_artifacts`` (hash → bytes)."""

    _artifacts: dict[str, bytes]
    _lock: threading.Lock

    def put_artifact(
        self,
        content: bytes,
        *,
        media_type: str = "application/octet-stream",
        summary: str | None = None,
    ) -> ArtifactRef:
        """Keep ``content``; its reference."""
        digest = hashlib.sha256(content).hexdigest()
        with self._lock:
            self._artifacts[digest] = bytes(content)
        return ArtifactRef(digest, len(content), media_type, summary)

    def artifact_writer(self, *, media_type: str = "application/octet-stream") -> _Writer:
        """A writer collecting a blob, kept by its hash on commit."""
        return _Writer(self, media_type)

    def get_artifact(self, sha256: str) -> bytes:
        """A blob's bytes, checked against its hash."""
        with self._lock:
            content = self._artifacts.get(sha256)
        if content is None:
            raise UsageError(f"no artifact {sha256!r:.80}")
        if hashlib.sha256(content).hexdigest() != sha256:
            raise IntegrityError("artifacts", 0, f"artifact {sha256} does not match its hash")
        return content

    def open_artifact(self, sha256: str) -> BinaryIO:
        """A blob opened for reading."""
        with self._lock:
            content = self._artifacts.get(sha256)
        if content is None:
            raise UsageError(f"no artifact {sha256!r:.80}")
        return io.BytesIO(content)

    def check_artifact(self, ref: ArtifactRef) -> str | None:
        """What is wrong with a referenced blob, or None."""
        with self._lock:
            content = self._artifacts.get(ref.sha256)
        if content is None:
            return f"artifact {ref.sha256} is missing"
        if hashlib.sha256(content).hexdigest() != ref.sha256:
            return f"artifact {ref.sha256} does not match its hash"
        if len(content) != ref.size:
            return (
                f"artifact {ref.sha256} holds {len(content)} bytes, not the {ref.size} referenced"
            )
        return None


class _Writer:
    def __init__(self, store: MemoryBlobs, media_type: str) -> None:
        self._store = store
        self._media_type = media_type
        self._buffer: io.BytesIO | None = io.BytesIO()

    def write(self, data: bytes) -> None:
        if self._buffer is None:
            raise UsageError("this artifact writer is closed")
        self._buffer.write(data)

    def commit(self, *, summary: str | None = None) -> ArtifactRef:
        if self._buffer is None:
            raise UsageError("this artifact writer is closed")
        content, self._buffer = self._buffer.getvalue(), None
        return self._store.put_artifact(content, media_type=self._media_type, summary=summary)

    def abort(self) -> None:
        self._buffer = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.abort()
