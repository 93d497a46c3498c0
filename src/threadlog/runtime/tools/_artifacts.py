"""A tool's view of the store's `Artifacts`: every blob it stores is remembered.

The runner (`threadlog.runtime.tool_runner`) gives each call a `CallArtifacts` over the store
(when the store has the capability) and, once the tool is done, records an ``artifact.stored``
for every blob the call stored, before its result: so the log names every blob its records
reference, and ``verify`` can check them (000 §17.2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    from types import TracebackType
    from typing import BinaryIO

    from threadlog.model.refs import ArtifactRef
    from threadlog.store.protocol import Artifacts, ArtifactWriter

__all__ = ["CallArtifacts"]


class CallArtifacts:
    """`Artifacts` for one tool call: delegates to the store, remembers what is stored."""

    def __init__(self, store: Artifacts) -> None:
        self._store = store
        self.stored: list[ArtifactRef] = []
        """The blobs stored through this object, in order."""

    def put_artifact(
        self,
        content: bytes,
        *,
        media_type: str = "application/octet-stream",
        summary: str | None = None,
    ) -> ArtifactRef:
        ref = self._store.put_artifact(content, media_type=media_type, summary=summary)
        self.stored.append(ref)
        return ref

    def artifact_writer(self, *, media_type: str = "application/octet-stream") -> _Writer:
        return _Writer(self, self._store.artifact_writer(media_type=media_type))

    def get_artifact(self, sha256: str) -> bytes:
        return self._store.get_artifact(sha256)

    def open_artifact(self, sha256: str) -> BinaryIO:
        return self._store.open_artifact(sha256)

    def check_artifact(self, ref: ArtifactRef) -> str | None:
        return self._store.check_artifact(ref)


class _Writer:
    def __init__(self, owner: CallArtifacts, inner: ArtifactWriter) -> None:
        self._owner = owner
        self._inner = inner

    def write(self, data: bytes) -> None:
        self._inner.write(data)

    def commit(self, *, summary: str | None = None) -> ArtifactRef:
        ref = self._inner.commit(summary=summary)
        self._owner.stored.append(ref)
        return ref

    def abort(self) -> None:
        self._inner.abort()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._inner.abort()
