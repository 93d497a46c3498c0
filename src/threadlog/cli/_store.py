"""The store the command line works on: opened by target through `threadlog.open_store`, and
checked for the capabilities the commands use (no command imports a backend)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from threadlog.errors import UsageError
from threadlog.store.open import open_store
from threadlog.store.protocol import Catalog, LocalHome, Maintenance, Store

__all__ = ["DiskStore", "open_disk_store"]


@runtime_checkable
class DiskStore(Store, Catalog, LocalHome, Maintenance, Protocol):
    """A store on disk with an index: what the inspection commands need."""


def open_disk_store(target: str | None) -> DiskStore:
    """Open ``target`` (a directory; default ``$THREADLOG_HOME`` or ``~/.threadlog``).

    Raises `UsageError` if what it names is not a store on disk with an index."""
    store = open_store(target)
    if not isinstance(store, DiskStore):
        store.close()
        raise UsageError(f"{target!r} is not a store on disk: the command line needs one")
    return store
