"""`NamedThreads`: a framework's thread names mapped onto threadlog threads.

A framework names its threads itself (LangGraph's ``thread_id``, an Agents SDK
``session_id``). The adapter's threadlog thread for name ``n`` is
``named_thread_id(namespace, "n#g")``, created on first use (idempotent, so two processes
agree on it) with ``adapter`` and ``name`` in its ``metadata`` setting (and whatever else the
adapter lists by: ADK's app and user), which `Catalog.threads(metadata=…)` lists by. ``g`` is the name's *generation*:
deleting a thread keeps its id taken for good (`Retention`), so a name used again after a
delete gets the next generation's thread, found by skipping the deleted ones.

`records_after` is how the adapters' folds catch up with a thread cheaply.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from threadlog.errors import ThreadNotFound, UsageError
from threadlog.model.ids import named_thread_id
from threadlog.store.protocol import Catalog, Retention

if TYPE_CHECKING:
    from threadlog.model.envelope import Record
    from threadlog.store.protocol import Store

__all__ = ["NamedThreads", "records_after"]


class NamedThreads:
    """Find or create the threadlog thread of a framework's thread name."""

    def __init__(self, store: Store, adapter: str, *, principal: str = "local") -> None:
        self.store = store
        self.adapter = adapter
        self.principal = principal
        self._ids: dict[str, str] = {}
        self._lock = threading.Lock()

    def _current(self, name: str) -> str:
        retention = self.store if isinstance(self.store, Retention) else None
        generation = 0
        while True:
            thread_id = named_thread_id(self.adapter, f"{name}#{generation}")
            if retention is None or not retention.deleted(thread_id):
                return thread_id
            generation += 1

    def find(self, name: str) -> str | None:
        """The thread of ``name`` if it exists."""
        with self._lock:
            thread_id = self._ids.get(name) or self._current(name)
            if not self.store.exists(thread_id):
                return None
            self._ids[name] = thread_id
            return thread_id

    def get(self, name: str, metadata: dict[str, Any] | None = None) -> str:
        """The thread of ``name``, created if it does not exist (with ``metadata`` beside the
        adapter and the name, to list it by)."""
        with self._lock:
            thread_id = self._ids.get(name)
            if thread_id is None:
                thread_id = self._current(name)
                self.store.create_thread(
                    self.principal,
                    thread_id=thread_id,
                    title=f"{self.adapter} {name}"[:200],
                    metadata={**(metadata or {}), "adapter": self.adapter, "name": name},
                )
                self._ids[name] = thread_id
            return thread_id

    def delete(self, name: str) -> bool:
        """Delete the thread of ``name``; whether there was one. Raises `UsageError` for a
        store without the `Retention` capability."""
        if not isinstance(self.store, Retention):
            raise UsageError("this store cannot delete threads (no Retention capability)")
        with self._lock:
            thread_id = self._ids.pop(name, None) or self._current(name)
            return self.store.delete_thread(thread_id)

    def forget(self, name: str) -> None:
        """Drop the cached id of ``name`` (another process may have deleted it)."""
        with self._lock:
            self._ids.pop(name, None)

    def names(self, **where: Any) -> list[tuple[str, str]]:
        """``(name, thread id)`` of every thread of this adapter whose metadata has the
        values ``where`` gives: from the index (`Catalog.threads(metadata=…)`) when the store
        has one, else by reading every thread's first record. Not the hot path."""
        wanted = {**where, "adapter": self.adapter}
        if isinstance(self.store, Catalog):
            rows = self.store.threads(archived=None, metadata=wanted)
            candidates = [row.thread_id for row in rows]
        else:
            candidates = self.store.thread_ids()
        found: list[tuple[str, str]] = []
        for thread_id in candidates:
            try:
                head = self.store.read(thread_id, limit=1)
            except ThreadNotFound:  # deleted meanwhile
                continue
            config: Any = head[0].data.get("config") if head else None
            metadata = config.get("metadata") if isinstance(config, dict) else None
            if not isinstance(metadata, dict):
                continue
            if all(metadata.get(k) == v for k, v in wanted.items()):
                name = metadata.get("name")
                if isinstance(name, str):
                    found.append((name, thread_id))
        return found


def records_after(store: Store, thread_id: str, after: int) -> list[Record]:
    """The thread's records with ``ord > after``: what a fold at ``after`` still lacks.

    An embedded store's `Store.read` verifies the log from its start (unless a snapshot
    covers ``after``), so folds ask the index first (`Catalog.thread_info`, one query) and
    read nothing when no record came since; the adapters apply their own appends directly.
    Raises `ThreadNotFound`."""
    if isinstance(store, Catalog) and store.thread_info(thread_id).last_ord <= after:
        return []
    return store.read(thread_id, after)
