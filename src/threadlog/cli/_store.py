"""The store the command line works on: opened by target through `threadlog.open_store`, and
checked for the capabilities the commands use (no command imports a backend)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from threadlog.errors import UsageError
from threadlog.store.open import open_store
from threadlog.store.protocol import Catalog, LocalHome, Maintenance, Store

__all__ = ["DiskStore", "location", "open_disk_store"]


@runtime_checkable
class DiskStore(Store, Catalog, Maintenance, Protocol):
    """A store that keeps, beside its logs, a catalog and the means to look after them (an
    embedded store on disk, a PostgreSQL store): what the inspection commands need."""


def location(store: Store) -> str:
    """Where ``store`` is, for messages: its directory, or its description (a database)."""
    return store.home if isinstance(store, LocalHome) else repr(store)


def open_disk_store(target: str | None) -> DiskStore:
    """Open ``target`` (a directory or a ``postgresql://`` URL; default ``$THREADLOG_HOME``
    or ``~/.threadlog``).

    Raises `UsageError` if what it names is not a store with a catalog."""
    store = open_store(target)
    if not isinstance(store, DiskStore):
        store.close()
        raise UsageError(
            f"{target!r} is not a store on disk or a database: the command line needs one"
        )
    return store
