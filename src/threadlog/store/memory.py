"""An in-memory store: the same records and checks as the embedded store, persisting nothing.

Used for ephemeral sessions (``Runtime(ephemeral=True)``) and as the executable reference of
the store contract. Records are encoded and hash-chained exactly as on disk.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from threadlog._clock import new_id, rfc3339, wall_ns
from threadlog.errors import DuplicateEventConflict, OrdinalConflict, ThreadNotFound, UsageError
from threadlog.model import codec
from threadlog.model.envelope import FORMAT_VERSION, Record, encode_record
from threadlog.model.events import Event, ThreadCreated, to_data
from threadlog.model.ids import is_uuid
from threadlog.model.reducer import replay
from threadlog.model.refs import ArtifactRef
from threadlog.model.refs import resolve as resolve_refs
from threadlog.store.base import (
    ErrorListener,
    Listener,
    check_new_thread,
    escape_lookalikes,
    normalize_append,
    refuse_lookalikes,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import EllipsisType

    from threadlog.model.state import ThreadState

__all__ = ["MemoryStore"]

log = logging.getLogger("threadlog.store")


def _no_artifacts(ref: ArtifactRef) -> Any:
    raise UsageError(f"no artifact {ref.sha256}: the in-memory store keeps no artifacts")


def _copy(record: Record, data_json: bytes) -> Record:
    """A record whose data is a fresh decode: handing it out never aliases the log."""
    return record._replace(data=codec.loads(data_json))


class MemoryStore:
    """Threads as lists of records in memory. Thread-safe."""

    home = ":memory:"

    def __init__(self) -> None:
        self._threads: dict[str, list[tuple[Record, bytes]]] = {}
        self._ids: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._closed = False

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def create_thread(
        self,
        principal: str = "local",
        *,
        title: str | None = None,
        lineage: dict[str, Any] | None = None,
        **config: Any,
    ) -> str:
        if self._closed:
            raise UsageError("the store is closed")
        check_new_thread(principal, lineage, config)
        event = ThreadCreated(
            format=FORMAT_VERSION, principal=principal, config=config, lineage=lineage, title=title
        )
        data = to_data(event)[1]
        refuse_lookalikes(event.type, data, codec.canonical(data))
        now = wall_ns()
        thread_id = new_id(now)
        with self._lock:
            self._threads[thread_id] = []
            self._ids[thread_id] = {}
        self._add(thread_id, event.type, data, None, None, None, None)
        return thread_id

    def append(
        self,
        thread_id: str,
        type: str | Event,
        data: Any = None,
        *,
        durable: bool | None = None,
        id: str | None = None,
        parent: str | None | EllipsisType = ...,
        expect_ord: int | None = None,
        check: Callable[[Record], object] | None = None,
    ) -> Record:
        """As `EmbeddedStore.append`; ``durable`` has no meaning here."""
        if self._closed:
            raise UsageError("the store is closed")
        type_name, data = normalize_append(type, data, id, parent)
        return self._add(thread_id, type_name, data, id, parent, expect_ord, check)

    async def aappend(
        self,
        thread_id: str,
        type: str | Event,
        data: Any = None,
        *,
        durable: bool | None = None,
        id: str | None = None,
        parent: str | None | EllipsisType = ...,
        expect_ord: int | None = None,
        check: Callable[[Record], object] | None = None,
    ) -> Record:
        return self.append(
            thread_id,
            type,
            data,
            durable=durable,
            id=id,
            parent=parent,
            expect_ord=expect_ord,
            check=check,
        )

    def _add(
        self,
        thread_id: str,
        type_name: str,
        data: Any,
        id: str | None,
        parent: str | None | EllipsisType,
        expect_ord: int | None,
        check: Callable[[Record], object] | None,
    ) -> Record:
        data, data_json = escape_lookalikes(type_name, data, codec.canonical(data))
        data = codec.loads(data_json)  # what a later read returns, and no alias of the caller's
        now = wall_ns()
        with self._lock:
            records = self._threads.get(thread_id)
            if records is None:
                raise ThreadNotFound(thread_id)
            ids = self._ids[thread_id]
            if id is not None and id in ids:
                stored = records[ids[id] - 1][0]._replace(data=codec.loads(records[ids[id] - 1][1]))
                want = stored.parent if parent is ... else parent
                if not stored.same_content(type_name, data, want):
                    raise DuplicateEventConflict(thread_id, id, stored.ord)
                return stored
            ord_ = len(records) + 1
            if expect_ord is not None and expect_ord != ord_:
                raise OrdinalConflict(thread_id, expect_ord, ord_)
            last = records[-1][0] if records else None
            event_id = id or new_id(now)
            parent_id = (last.id if last else None) if parent is ... else parent
            if parent_id is not None and parent_id not in ids:
                raise UsageError(
                    f"thread {thread_id} has no record {parent_id!r:.80} to continue: pass "
                    "the id of one of its records as parent, None for a new root, or leave "
                    "it out for the previous record"
                )
            prev = last.hash if last else None
            ts = rfc3339(now)
            _, digest = encode_record(
                id=event_id,
                thread=thread_id,
                ord=ord_,
                parent=parent_id,
                ts=ts,
                type=type_name,
                data_json=data_json,
                prev=prev,
            )
            record = Record(
                1, event_id, thread_id, ord_, parent_id, ts, type_name, data, prev, digest
            )
            if check is not None:
                check(record)
            records.append((record, data_json))
            ids[event_id] = ord_
            # under the lock: listeners see each thread's records in order
            for listener in self._listeners:
                try:
                    listener(thread_id, [_copy(record, data_json)])
                except Exception:
                    log.exception("a store listener failed")
        return _copy(record, data_json)

    def read(self, thread_id: str, after: int = 0, *, limit: int | None = None) -> list[Record]:
        with self._lock:
            records = self._threads.get(thread_id)
            if records is None:
                raise ThreadNotFound(thread_id)
            out = records[max(after, 0) :]
        if limit is not None:
            out = out[:limit]
        return [_copy(r, js) for r, js in out]

    def state(self, thread_id: str) -> ThreadState:
        return replay(self.read(thread_id))

    def exists(self, thread_id: str) -> bool:
        return is_uuid(thread_id) and thread_id in self._threads

    def thread_ids(self) -> list[str]:
        return list(self._threads)

    def resolve(self, data: Any) -> Any:
        """Record data as it was appended: escaped look-alike references unwrapped. This
        store makes no references (nothing is offloaded), so there is nothing to load."""
        return resolve_refs(data, _no_artifacts)

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    def add_error_listener(self, listener: ErrorListener) -> None:
        """As `EmbeddedStore.add_error_listener`; this store never fails, so never calls it."""

    def remove_error_listener(self, listener: ErrorListener) -> None:
        pass

    def release(self, thread_id: str) -> None:
        pass

    def take_repairs(self, thread_id: str) -> list[dict[str, Any]]:
        return []

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self._closed = True
