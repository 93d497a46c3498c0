"""The `Artifacts` capability on PostgreSQL: blobs by SHA-256, in chunks of ``bytea``.

A blob is a row of ``artifacts`` (hash, size, media type) and its bytes in ``artifact_chunks``
rows of at most `CHUNK` bytes, all inserted in one transaction that commits before the
reference is handed out (so a record that references a blob is never durable before it). A
blob already stored is not written again. The streaming writer (`PgArtifactWriter`) hashes as
it goes and spools to a temporary file (bounded memory), then copies the spool into chunks;
`open_artifact` reads chunks on demand, so a reader pages through a large blob without
loading it whole. Reads are checked against the hash (`get_artifact`) or by size and hash in
a chunked pass (`check_artifact`).
"""

from __future__ import annotations

import hashlib
import io
import tempfile
from typing import TYPE_CHECKING, Any, Self

from threadlog.errors import IntegrityError, UsageError
from threadlog.model.refs import ArtifactRef

if TYPE_CHECKING:
    from collections.abc import Iterator
    from contextlib import AbstractContextManager
    from types import TracebackType
    from typing import BinaryIO

    import psycopg

__all__ = ["CHUNK", "Blobs", "PgArtifactWriter"]

CHUNK = 1024 * 1024
"""Bytes per ``artifact_chunks`` row."""

_HEX = frozenset("0123456789abcdef")


def _check_hash(sha256: str) -> None:
    if not isinstance(sha256, str) or len(sha256) != 64 or not set(sha256) <= _HEX:
        raise UsageError(f"not a SHA-256 hex digest: {sha256!r:.80}")


class Blobs:
    """`threadlog.store.protocol.Artifacts` over two tables (module docstring)."""

    def _conn(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        raise NotImplementedError

    def put_artifact(
        self,
        content: bytes,
        *,
        media_type: str = "application/octet-stream",
        summary: str | None = None,
    ) -> ArtifactRef:
        """Store ``content`` durably (once); its reference."""
        digest = hashlib.sha256(content).hexdigest()
        self._store(digest, len(content), media_type, _chunks_of(content))
        return ArtifactRef(digest, len(content), media_type, summary)

    def artifact_writer(self, *, media_type: str = "application/octet-stream") -> PgArtifactWriter:
        """A writer streaming a blob in (spooled to a temporary file), committed by hash."""
        return PgArtifactWriter(self, media_type)

    def get_artifact(self, sha256: str) -> bytes:
        """A blob's bytes, checked against its hash."""
        _check_hash(sha256)
        content = b"".join(self._read_chunks(sha256))
        if hashlib.sha256(content).hexdigest() != sha256:
            raise IntegrityError("artifacts", 0, f"artifact {sha256} does not match its hash")
        return content

    def open_artifact(self, sha256: str) -> BinaryIO:
        """A blob opened for reading (seekable; chunks are fetched as they are read)."""
        _check_hash(sha256)
        size = self._size(sha256)
        if size is None:
            raise UsageError(f"no artifact {sha256!r:.80}")
        return io.BufferedReader(_ChunkReader(self, sha256, size), CHUNK)

    def check_artifact(self, ref: ArtifactRef) -> str | None:
        """What is wrong with a referenced blob (missing, another size, not its hash)."""
        try:
            _check_hash(ref.sha256)
        except UsageError as exc:
            return str(exc)
        size = self._size(ref.sha256)
        if size is None:
            return f"artifact {ref.sha256} is missing"
        digest = hashlib.sha256()
        got = 0
        for chunk in self._read_chunks(ref.sha256):
            digest.update(chunk)
            got += len(chunk)
        if digest.hexdigest() != ref.sha256 or got != size:
            return f"artifact {ref.sha256} does not match its hash"
        if got != ref.size:
            return f"artifact {ref.sha256} holds {got} bytes, not the {ref.size} referenced"
        return None

    # -- the tables ------------------------------------------------------------------------

    def _store(self, digest: str, size: int, media_type: str, chunks: Iterator[bytes]) -> None:
        with self._conn() as conn, conn.transaction():
            cur = conn.execute(
                "INSERT INTO artifacts (sha256, size, media_type) VALUES (%s, %s, %s) "
                "ON CONFLICT DO NOTHING",
                (digest, size, media_type),
            )
            if cur.rowcount == 0:
                return  # stored already (content-addressed: the same bytes)
            for seq, chunk in enumerate(chunks):
                conn.execute(
                    "INSERT INTO artifact_chunks (sha256, seq, data) VALUES (%s, %s, %s)",
                    (digest, seq, chunk),
                )

    def _size(self, sha256: str) -> int | None:
        with self._conn() as conn:
            row = conn.execute("SELECT size FROM artifacts WHERE sha256 = %s", (sha256,)).fetchone()
        return int(row[0]) if row else None

    def _read_chunks(self, sha256: str, first: int = 0) -> Iterator[bytes]:
        with self._conn() as conn:
            found = conn.execute("SELECT 1 FROM artifacts WHERE sha256 = %s", (sha256,)).fetchone()
            if found is None:
                raise UsageError(f"no artifact {sha256!r:.80}")
            rows = conn.execute(
                "SELECT data FROM artifact_chunks WHERE sha256 = %s AND seq >= %s ORDER BY seq",
                (sha256, first),
            ).fetchall()
        for (data,) in rows:
            yield bytes(data)

    def _chunk(self, sha256: str, seq: int) -> bytes:
        with self._conn() as conn:
            row = conn.execute(
                "SELECT data FROM artifact_chunks WHERE sha256 = %s AND seq = %s", (sha256, seq)
            ).fetchone()
        return bytes(row[0]) if row else b""


def _chunks_of(content: bytes) -> Iterator[bytes]:
    view = memoryview(content)
    for start in range(0, max(len(content), 1), CHUNK):
        yield bytes(view[start : start + CHUNK])


class _ChunkReader(io.RawIOBase):
    """A seekable raw reader over a blob's chunks (one query per chunk touched)."""

    def __init__(self, blobs: Blobs, sha256: str, size: int) -> None:
        self._blobs = blobs
        self._sha256 = sha256
        self._size = size
        self._pos = 0
        self._cached: tuple[int, bytes] | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        if self._pos >= self._size:
            return 0
        seq, offset = divmod(self._pos, CHUNK)
        if self._cached is None or self._cached[0] != seq:
            self._cached = (seq, self._blobs._chunk(self._sha256, seq))
        data = self._cached[1][offset : offset + len(buffer)]
        n = len(data)
        buffer[:n] = data
        self._pos += n
        return n


class PgArtifactWriter:
    """A blob streamed in: hashed as written, spooled to a temporary file, stored on commit."""

    def __init__(self, blobs: Blobs, media_type: str) -> None:
        self._blobs = blobs
        self._media_type = media_type
        self._spool: Any = tempfile.SpooledTemporaryFile(max_size=CHUNK)
        self._digest = hashlib.sha256()
        self._size = 0
        self._done = False

    def write(self, data: bytes) -> None:
        """Add bytes to the blob."""
        if self._done:
            raise UsageError("this artifact writer is closed")
        self._spool.write(data)
        self._digest.update(data)
        self._size += len(data)

    def commit(self, *, summary: str | None = None) -> ArtifactRef:
        """Store the blob (in one transaction) and return its reference."""
        if self._done:
            raise UsageError("this artifact writer is closed")
        self._done = True
        digest = self._digest.hexdigest()
        try:
            self._spool.seek(0)
            chunks = iter(lambda: self._spool.read(CHUNK), b"")
            self._blobs._store(digest, self._size, self._media_type, chunks)
        finally:
            self._spool.close()
        return ArtifactRef(digest, self._size, self._media_type, summary)

    def abort(self) -> None:
        """Drop what was written (a no-op after `commit`)."""
        if not self._done:
            self._done = True
            self._spool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.abort()
