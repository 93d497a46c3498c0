"""The embedded store's `Credentials`: the service's token digests in ``<home>/credentials.json``.

The file is small and changes rarely (``threadlog token add``/``rm``), while the server
reads it often (`threadlog.server.tokens.Authenticator`, with a cache). So it is one JSON
document, ``{"version": 1, "credentials": [...]}`` (`threadlog.store._credentials` says what
a credential holds), rewritten whole:

* **Atomic and durable.** Every change writes a temp file, fsyncs it, renames it over the
  old one and fsyncs the home (`FileOps.write_atomic`): a reader sees the old list or the
  new one, never half of either, and a change is on disk when the call returns.
* **No lost update.** A change reads, modifies and writes the file under an exclusive
  ``flock`` of ``<home>/credentials.lock`` (never deleted, so that every process locks the
  same inode), so two ``token add`` at once both land. Readers take no lock: the rename
  makes every read whole.
* **Never silently reset.** A file that is not a well-formed document (bad JSON, an
  unknown version, a malformed credential, two with one id or one digest) is a
  `StorageError` naming the file, on reading and before any change: a blank list would be
  the server running in open mode, or every token revoked, because of a damaged file.
* **Private.** The file and the lock are 0600 and must be ours and not writable by others
  (`InsecureHome` otherwise): whoever can write the file can add a token. The file holds
  digests only; a reader of it cannot use them to act as a principal.
"""

from __future__ import annotations

import fcntl
import os
import threading
from typing import TYPE_CHECKING, Any

import orjson

from threadlog.errors import StorageError, UsageError
from threadlog.store._credentials import (
    check_credential,
    credential_from_data,
    credential_to_data,
)
from threadlog.store._perms import check_fd

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from threadlog.store._fileops import FileOps
    from threadlog.store.protocol import Credential

__all__ = ["CREDENTIALS_FILE", "CREDENTIALS_LOCK", "CredentialFile"]

CREDENTIALS_FILE = "credentials.json"
"""The file in the home holding the credentials."""
CREDENTIALS_LOCK = "credentials.lock"
"""The file in the home whose ``flock`` serializes changes (empty, never deleted)."""

_VERSION = 1
# no symlink followed; a FIFO planted there is refused (`check_fd`), not waited on
_OPEN_FLAGS = getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK | os.O_CLOEXEC


class CredentialFile:
    """The credentials of one home (see the module docstring).

    Args:
        home: the store's directory (it exists: the store prepared it).
        fops: the file-operation layer (atomic, durable writes; tests inject faults).
    """

    def __init__(self, home: str, fops: FileOps) -> None:
        self.path = os.path.join(home, CREDENTIALS_FILE)
        self._lock_path = os.path.join(home, CREDENTIALS_LOCK)
        self._fops = fops
        # flock excludes other processes (and other descriptors of this one); the mutex
        # keeps this process's threads from queueing on the kernel lock one by one
        self._mutex = threading.Lock()

    def read(self) -> list[Credential]:
        """Every credential, oldest first (`StorageError` for a damaged file)."""
        return self._read()

    def add(self, credential: Credential) -> None:
        """Keep ``credential``; `UsageError` when its token id or digest is taken."""
        check_credential(credential)

        def change(stored: list[Credential]) -> list[Credential] | None:
            for other in stored:
                if other.token_id == credential.token_id:
                    raise UsageError(f"a credential with token id {other.token_id} exists")
                if other.digest == credential.digest:
                    raise UsageError("a credential with this digest exists (the same token)")
            return [*stored, credential]

        self._change(change)

    def remove(self, token_id: str) -> bool:
        """Forget the credential ``token_id``; whether there was one."""
        found = False

        def change(stored: list[Credential]) -> list[Credential] | None:
            nonlocal found
            kept = [c for c in stored if c.token_id != token_id]
            found = len(kept) != len(stored)
            return kept if found else None

        self._change(change)
        return found

    def _change(self, change: Callable[[list[Credential]], list[Credential] | None]) -> None:
        """Read, ``change`` (None: nothing to write) and write back, under the lock."""
        with self._mutex, self._locked():
            new = change(self._read())
            if new is None:
                return
            document = {"version": _VERSION, "credentials": [credential_to_data(c) for c in new]}
            data = orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"
            try:
                self._fops.write_atomic(self.path, data)
            except OSError as exc:
                raise StorageError(f"cannot write the credentials file {self.path}: {exc}") from exc

    def _locked(self) -> _FileLock:
        return _FileLock(self._lock_path, self._fops)

    def _read(self) -> list[Credential]:
        """The stored credentials; [] when there is no file yet."""
        try:
            fd = os.open(self.path, os.O_RDONLY | _OPEN_FLAGS)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageError(f"cannot read the credentials file {self.path}: {exc}") from exc
        try:
            check_fd(fd, self.path, "the credentials file")
            with os.fdopen(os.dup(fd), "rb") as f:
                raw = f.read()
        except OSError as exc:
            raise StorageError(f"cannot read the credentials file {self.path}: {exc}") from exc
        finally:
            os.close(fd)
        try:
            return list(_parse(orjson.loads(raw)))
        except (orjson.JSONDecodeError, ValueError) as exc:
            raise StorageError(
                f"the credentials file {self.path} is damaged ({exc}); nothing was changed. "
                "Restore it from a backup, or move it away to start with no tokens (the "
                "server then runs in open mode, on loopback only)"
            ) from None


def _parse(document: Any) -> Iterator[Credential]:
    """The credentials of a parsed file, checked; `ValueError` saying what is wrong."""
    if not isinstance(document, dict) or document.get("version") != _VERSION:
        raise ValueError(f'not a {{"version": {_VERSION}, "credentials": [...]}} document')
    items = document.get("credentials")
    if not isinstance(items, list):
        raise ValueError('"credentials" is not a list')
    ids: set[str] = set()
    digests: set[str] = set()
    for number, item in enumerate(items, 1):
        try:
            credential = credential_from_data(item)
        except ValueError as exc:
            raise ValueError(f"credential {number}: {exc}") from None
        if credential.token_id in ids or credential.digest in digests:
            raise ValueError(f"credential {number}: its token id or digest is there twice")
        ids.add(credential.token_id)
        digests.add(credential.digest)
        yield credential


class _FileLock:
    """An exclusive ``flock`` of the lock file, held for a ``with`` block."""

    def __init__(self, path: str, fops: FileOps) -> None:
        self._path = path
        self._fops = fops
        self._fd = -1

    def __enter__(self) -> None:
        try:
            fd = self._fops.open(self._path, os.O_RDWR | os.O_CREAT | _OPEN_FLAGS, 0o600)
        except OSError as exc:
            raise StorageError(f"cannot open the credentials lock {self._path}: {exc}") from exc
        try:
            check_fd(fd, self._path, "the credentials lock")
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)  # closing the descriptor releases the lock
        self._fd = -1
