"""threadlog: durable, resumable, forkable sessions for AI agents.

Every fact of an agent's work is an event in an append-only, hash-chained log; state and
tables are projections of it. Start with `open_store`, or `Runtime` for a live agent loop.

The store and the runtime are imported lazily, so that ``import threadlog.model`` (the pure
core) loads no I/O module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threadlog._version import __version__
from threadlog.errors import (
    ConflictError,
    DuplicateEventConflict,
    IntegrityError,
    InvalidData,
    InvalidEventType,
    InvalidTransition,
    LeaseHeld,
    LeaseLost,
    OrdinalConflict,
    RecordTooLarge,
    RunError,
    StorageError,
    ThreadlogError,
    ThreadNotFound,
    UsageError,
)
from threadlog.model.envelope import Record
from threadlog.model.state import ThreadState

if TYPE_CHECKING:
    import os

    from threadlog.runtime.runtime import Runtime
    from threadlog.runtime.session import Session
    from threadlog.store.embedded import EmbeddedStore, VerifyReport
    from threadlog.store.inmemory import MemoryStore
    from threadlog.store.protocol import Store

__all__ = [
    "ConflictError",
    "DuplicateEventConflict",
    "EmbeddedStore",
    "IntegrityError",
    "InvalidData",
    "InvalidEventType",
    "InvalidTransition",
    "LeaseHeld",
    "LeaseLost",
    "MemoryStore",
    "OrdinalConflict",
    "Record",
    "RecordTooLarge",
    "RunError",
    "Runtime",
    "Session",
    "StorageError",
    "Store",
    "ThreadNotFound",
    "ThreadState",
    "ThreadlogError",
    "UsageError",
    "VerifyReport",
    "__version__",
    "open_store",
]

_LAZY = {
    "EmbeddedStore": "threadlog.store.embedded",
    "VerifyReport": "threadlog.store.protocol",
    "Store": "threadlog.store.protocol",
    "MemoryStore": "threadlog.store.inmemory",
    "Runtime": "threadlog.runtime.runtime",
    "Session": "threadlog.runtime.session",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'threadlog' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def open_store(target: str | os.PathLike[str] | None = None, **options: Any) -> Store:
    """Open (or create) the store ``target`` names: a directory or ``file://`` URL (the
    embedded store; default ``$THREADLOG_HOME``, else ``~/.threadlog``), or ``memory://``
    (see `threadlog.store.open`). Use it as a context manager so that it is flushed and closed.

    Example::

        with threadlog.open_store("/tmp/tl") as store:
            thread = store.create_thread("alice", model="scripted")
            store.append(thread, "custom.note", {"text": "hello"})
            print(store.read(thread)[-1].data)
    """
    from threadlog.store.open import open_store as open_

    return open_(target, **options)
