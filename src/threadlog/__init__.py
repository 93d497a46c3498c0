"""threadlog: durable, resumable, forkable sessions for AI agents.

Every fact of an agent's work is an event in an append-only, hash-chained log; state and
tables are projections of it. Start with `open_store`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from threadlog._version import __version__
from threadlog.errors import (
    ConflictError,
    DuplicateEventConflict,
    IntegrityError,
    InvalidData,
    InvalidEventType,
    InvalidTransition,
    LeaseHeld,
    OrdinalConflict,
    RecordTooLarge,
    StorageError,
    ThreadlogError,
    ThreadNotFound,
    UsageError,
)
from threadlog.model.envelope import Record
from threadlog.model.state import ThreadState
from threadlog.store.embedded import EmbeddedStore, VerifyReport

if TYPE_CHECKING:
    import os

__all__ = [
    "ConflictError",
    "DuplicateEventConflict",
    "EmbeddedStore",
    "IntegrityError",
    "InvalidData",
    "InvalidEventType",
    "InvalidTransition",
    "LeaseHeld",
    "OrdinalConflict",
    "Record",
    "RecordTooLarge",
    "StorageError",
    "ThreadNotFound",
    "ThreadState",
    "ThreadlogError",
    "UsageError",
    "VerifyReport",
    "__version__",
    "open_store",
]

Store = EmbeddedStore


def open_store(home: str | os.PathLike[str] | None = None, **options: object) -> EmbeddedStore:
    """Open (or create) the embedded store at ``home`` (default ``$THREADLOG_HOME`` or
    ``~/.threadlog``). Use it as a context manager so that it is flushed and closed.

    Example::

        with threadlog.open_store("/tmp/tl") as store:
            thread = store.create_thread("alice", model="scripted")
            store.append(thread, "custom.note", {"text": "hello"})
            print(store.read(thread)[-1].data)
    """
    return EmbeddedStore(home, **options)  # type: ignore[arg-type]
