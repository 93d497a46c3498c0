"""The in-memory store's `Transfer`: a copied thread adopted verbatim, in one step.

`MemoryStore` (`threadlog.store.inmemory`) gets `adopt_thread` from this base class. The
records are checked as every backend checks them (`threadlog.store.transfer.check_import`),
then put in place under the store's lock, so that the thread appears whole or not at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from threadlog.errors import ConflictError
from threadlog.model import codec
from threadlog.store.transfer import check_import, conflict_message, same_log

if TYPE_CHECKING:
    import threading
    from collections.abc import Iterable, Sequence

    from threadlog.model.envelope import Record

__all__ = ["MemoryTransfer"]


class MemoryTransfer:
    """`threadlog.store.protocol.Transfer` in memory (see the module docstring)."""

    _lock: threading.Lock
    _threads: dict[str, list[tuple[Record, bytes]]]
    _ids: dict[str, dict[str, int]]

    def _check_open(self) -> None:
        raise NotImplementedError

    def adopt_thread(self, records: Sequence[Record]) -> bool:
        """See `threadlog.store.protocol.Transfer.adopt_thread`."""
        self._check_open()
        adopted = check_import(records)
        thread_id = adopted[0].record.thread
        # a fresh decode of each record's data: the store never aliases the caller's objects
        rows = []
        for a in adopted:
            data_json = codec.kept(codec.canonical(a.record.data))  # (kept at its own size)
            rows.append((a.record._replace(data=codec.loads(data_json)), data_json))
        with self._lock:
            held = self._threads.get(thread_id)
            if held is not None:
                existing = [r for r, _ in held]
                if same_log(existing, records):
                    return False
                raise ConflictError(conflict_message(thread_id, existing, records))
            self._threads[thread_id] = rows
            self._ids[thread_id] = {r.id: r.ord for r, _ in rows}
        return True

    def adopt_pages(self, pages: Iterable[Sequence[Record]]) -> bool:
        """See `threadlog.store.protocol.Transfer.adopt_pages` (in memory, the whole thread
        is held anyway: the pages are joined)."""
        return self.adopt_thread([record for page in pages for record in page])
