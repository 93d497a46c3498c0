"""Content-addressed blob store: ``<root>/sha256/<ab>/<hex>``.

Writes are atomic and durable before they return (temp file in the same directory, fsync,
rename, fsync the directory), so a record that references a blob is only ever appended after
the blob is safe (RELIABILITY B4). Reads check the digest's form before touching the file
system, refuse symlinks and verify the content's hash.

A blob that is already there is not taken on trust: another process may have renamed it into
place and died before it synced the directory, or a power cut may have left only its name.
The first `put` of it in a process reads it back, checks its hash (rewriting it if it does
not match), and fsyncs it and its directories; only then is it remembered, for the rest of
the process, as durable (`_DURABLE`), so later puts of the same content cost one ``stat``.

A blob too large to hold in memory (a command's full output, 000 §17.2) is streamed in by a
`BlobWriter`: the bytes go to a temporary file under ``sha256/tmp/`` as they come, hashed on
the way; `BlobWriter.commit` fsyncs it and renames it to its hash's name (or drops it, if
that blob is already there and sound), then fsyncs the directory.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import stat
from typing import TYPE_CHECKING, BinaryIO, Self

from threadlog.errors import IntegrityError, StorageError, UsageError
from threadlog.model.refs import ArtifactRef, is_artifact_ref
from threadlog.store._fileops import (
    DEFAULT_FILEOPS,
    FileOps,
    remove_orphan_temps,
    temporary_path,
)

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["ArtifactRef", "ArtifactStore", "BlobWriter", "is_artifact_ref"]

_DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")

_DURABLE: set[str] = set()
"""Blob files (absolute paths) this process has written or synced: known durable. Durability
is a property of the disk, so the set is shared by every store of the process (and inherited
by a forked child, whose parent synced them)."""
_DURABLE_DIRS: set[str] = set()
"""Directories whose own entry this process has made durable (by syncing their parent)."""


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
"""Blobs are opened without blocking: a FIFO planted at a blob's path must not hang a read."""


class ArtifactStore:
    """Blobs on disk, named by their SHA-256."""

    def __init__(self, root: str, fops: FileOps = DEFAULT_FILEOPS) -> None:
        self.root = os.path.abspath(root)
        self._fops = fops

    def path(self, digest: str) -> str:
        """The file of a digest; refuses anything but 64 lower-case hex characters."""
        if not isinstance(digest, str) or _DIGEST_RE.fullmatch(digest) is None:
            raise UsageError(f"not a sha256 digest: {digest!r:.80}")
        return os.path.join(self.root, "sha256", digest[:2], digest)

    def exists(self, digest: str) -> bool:
        return os.path.isfile(self.path(digest))

    def put(
        self,
        content: bytes,
        *,
        media_type: str = "application/octet-stream",
        summary: str | None = None,
    ) -> ArtifactRef:
        """Store ``content`` durably (a no-op if it is already there) and return its reference."""
        digest = hashlib.sha256(content).hexdigest()
        ref = ArtifactRef(digest, len(content), media_type, summary)
        final = self.path(digest)
        if final in _DURABLE and os.path.isfile(final):
            return ref
        directory = os.path.dirname(final)
        fops = self._fops
        try:
            if self._sync_existing(final, digest):
                _DURABLE.add(final)
                return ref
            # directories made here are durable in their parents once makedirs returns
            made = [p for p in self._ancestors(directory) if not os.path.isdir(p)]
            fops.makedirs(directory)
            _DURABLE_DIRS.update(made)
            fops.write_atomic(final, content)
            self._sync_parents(directory)
        except OSError as exc:
            raise StorageError(f"could not store artifact {digest}: {exc}") from exc
        _DURABLE.add(final)
        return ref

    def _sync_existing(self, final: str, digest: str) -> bool:
        """Make a blob that is already on disk durable: True if it is there, holds ``digest``'s
        content and is now synced (file, its directory, their parents); False if it must be
        written (missing, a symlink, or not matching its hash: the write replaces it)."""
        fops = self._fops
        try:
            fd = fops.open(final, os.O_RDONLY | _NOFOLLOW | _NONBLOCK)
        except FileNotFoundError:
            return False
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return False  # a symlink: the rename of a real copy replaces it
            raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False  # a FIFO or device planted there: the rename replaces it
            hasher = hashlib.sha256()
            while chunk := os.read(fd, 1 << 20):
                hasher.update(chunk)
            if hasher.hexdigest() != digest:
                return False  # damaged: rewritten atomically
            fops.fsync(fd)
        finally:
            fops.close(fd)
        directory = os.path.dirname(final)
        fops.fsync_dir(directory)
        self._sync_parents(directory)
        return True

    def _ancestors(self, directory: str) -> tuple[str, str, str]:
        """A blob's directory, ``sha256/`` and the root: the entries a blob's path goes through."""
        base = os.path.dirname(directory)
        return directory, base, os.path.dirname(base)

    def _sync_parents(self, directory: str) -> None:
        """Make the entries of a blob's directories durable in their parents, once per process:
        a crashed writer may have created them without syncing their parent."""
        for path in self._ancestors(directory):
            if path not in _DURABLE_DIRS:
                self._fops.fsync_dir(os.path.dirname(path))
                _DURABLE_DIRS.add(path)

    def get(self, digest: str) -> bytes:
        """The blob's bytes, verified against its digest.

        Raises:
            UsageError: malformed digest, or no such blob.
            IntegrityError: the blob on disk does not match its digest (ord 0: not a record).
        """
        path = self.path(digest)
        try:
            fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise UsageError(f"no artifact {digest}") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise IntegrityError(
                    "artifacts", 0, f"artifact {digest} is a symlink; refused"
                ) from None
            raise StorageError(f"could not read artifact {digest}: {exc}") from exc
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise IntegrityError("artifacts", 0, f"artifact {digest} is not a regular file")
            content = f.read()
        if hashlib.sha256(content).hexdigest() != digest:
            raise IntegrityError("artifacts", 0, f"artifact {digest} does not match its hash")
        return content

    def writer(self, media_type: str = "application/octet-stream") -> BlobWriter:
        """A `BlobWriter` that streams a blob into this store."""
        return BlobWriter(self, media_type)

    def open(self, digest: str) -> BinaryIO:
        """The blob's file, opened for reading (no symlink, a regular file); not hashed."""
        path = self.path(digest)
        try:
            fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise UsageError(f"no artifact {digest}") from None
        except OSError as exc:
            raise StorageError(f"could not open artifact {digest}: {exc}") from exc
        f = os.fdopen(fd, "rb")
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            f.close()
            raise IntegrityError("artifacts", 0, f"artifact {digest} is not a regular file")
        return f

    def check(self, ref: ArtifactRef) -> str | None:
        """What is wrong with a referenced blob, or None if it is there, of its size and
        matching its hash (read in chunks: a large blob is never held in memory)."""
        try:
            with self.open(ref.sha256) as f:
                hasher = hashlib.sha256()
                size = 0
                while chunk := f.read(1 << 20):
                    hasher.update(chunk)
                    size += len(chunk)
        except UsageError:
            return f"artifact {ref.sha256} is missing"
        except (IntegrityError, StorageError, OSError) as exc:
            return f"artifact {ref.sha256} cannot be read: {exc}"
        if hasher.hexdigest() != ref.sha256:
            return f"artifact {ref.sha256} does not match its hash"
        if size != ref.size:
            return f"artifact {ref.sha256} holds {size} bytes, not the {ref.size} referenced"
        return None

    def sweep_temp_files(self) -> int:
        """Delete the temporary files of writes interrupted by a dead process (B3)."""
        removed = 0
        base = os.path.join(self.root, "sha256")
        if not os.path.isdir(base):
            return 0
        for sub in os.scandir(base):
            if not sub.is_dir(follow_symlinks=False):
                continue
            removed += remove_orphan_temps(sub.path)
        return removed


class BlobWriter:
    """A blob streamed to a temporary file and committed by its hash (module docstring)."""

    def __init__(self, store: ArtifactStore, media_type: str) -> None:
        self._store = store
        self._fops = store._fops
        self.media_type = media_type
        spool = os.path.join(store.root, "sha256", "tmp")
        self._hasher = hashlib.sha256()
        self.size = 0
        self._done = False
        try:
            self._fops.makedirs(spool)
            self._tmp = temporary_path(spool, f"blob.{secrets.token_hex(8)}")
            self._fd: int | None = self._fops.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except OSError as exc:
            raise StorageError(f"could not start an artifact: {exc}") from exc

    def write(self, data: bytes) -> None:
        """Append bytes to the blob (written through to the temporary file)."""
        if self._fd is None:
            raise UsageError("this artifact writer is closed")
        try:
            self._fops.write_all(self._fd, data)
        except OSError as exc:
            raise StorageError(f"could not write an artifact: {exc}") from exc
        self._hasher.update(data)
        self.size += len(data)

    def commit(self, *, summary: str | None = None) -> ArtifactRef:
        """fsync, rename to the hash's name (or drop it: the blob is there and sound), fsync
        the directory; the blob's reference."""
        if self._fd is None:
            raise UsageError("this artifact writer is closed")
        digest = self._hasher.hexdigest()
        store, fops = self._store, self._fops
        final = store.path(digest)
        directory = os.path.dirname(final)
        try:
            fd, self._fd = self._fd, None
            try:
                fops.fsync(fd)
            finally:
                fops.close(fd)
            if (final in _DURABLE and os.path.isfile(final)) or store._sync_existing(final, digest):
                os.unlink(self._tmp)
            else:
                made = [p for p in store._ancestors(directory) if not os.path.isdir(p)]
                fops.makedirs(directory)
                _DURABLE_DIRS.update(made)
                fops.rename(self._tmp, final)
                fops.fsync_dir(directory)
                store._sync_parents(directory)
        except OSError as exc:
            self.abort()
            raise StorageError(f"could not store artifact {digest}: {exc}") from exc
        self._done = True
        _DURABLE.add(final)
        return ArtifactRef(digest, self.size, self.media_type, summary)

    def abort(self) -> None:
        """Drop the temporary file (a no-op once committed)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                self._fops.close(self._fd)
            self._fd = None
        if not self._done:
            self._done = True
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.abort()
