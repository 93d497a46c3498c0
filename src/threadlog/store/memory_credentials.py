"""The in-memory store's `Credentials`: the service's token digests in a dict, for one process.

`MemoryStore` (`threadlog.store.inmemory`) gets `add_credential`, `credentials` and
`remove_credential` from this base class, which keeps their own state and lock (apart, so
that the store's module stays about the log). Credentials are checked as on disk
(`threadlog.store._credentials`); they live as long as the store.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from threadlog.errors import UsageError
from threadlog.store._credentials import check_credential

if TYPE_CHECKING:
    from threadlog.store.protocol import Credential

__all__ = ["MemoryCredentials"]


class MemoryCredentials:
    """`threadlog.store.protocol.Credentials` in memory (see the module docstring)."""

    _closed: bool
    """The store's own flag (`MemoryStore.close`): changes are refused once it is set."""

    def __init__(self) -> None:
        self._credentials: dict[str, Credential] = {}  # by token id, oldest first
        self._credentials_lock = threading.Lock()

    def add_credential(self, credential: Credential) -> None:
        """See `threadlog.store.protocol.Credentials.add_credential`."""
        check_credential(credential)
        with self._credentials_lock:
            if self._closed:
                raise UsageError("the store is closed")
            if credential.token_id in self._credentials:
                raise UsageError(f"a credential with token id {credential.token_id} exists")
            if any(c.digest == credential.digest for c in self._credentials.values()):
                raise UsageError("a credential with this digest exists (the same token)")
            self._credentials[credential.token_id] = credential

    def credentials(self) -> list[Credential]:
        """See `threadlog.store.protocol.Credentials.credentials`."""
        with self._credentials_lock:
            return list(self._credentials.values())

    def remove_credential(self, token_id: str) -> bool:
        """See `threadlog.store.protocol.Credentials.remove_credential`."""
        with self._credentials_lock:
            if self._closed:
                raise UsageError("the store is closed")
            return self._credentials.pop(token_id, None) is not None
