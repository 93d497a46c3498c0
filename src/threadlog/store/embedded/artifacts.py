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
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat

from threadlog.errors import IntegrityError, StorageError, UsageError
from threadlog.model.refs import ArtifactRef, is_artifact_ref
from threadlog.store._fileops import DEFAULT_FILEOPS, FileOps, remove_orphan_temps

__all__ = ["ArtifactRef", "ArtifactStore", "is_artifact_ref"]

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
