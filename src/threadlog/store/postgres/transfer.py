"""The PostgreSQL store's `Transfer`: a copied thread adopted verbatim, in one transaction.

`import_thread` checks the records as every backend does
(`threadlog.store.transfer.check_import`: hashes recomputed, chain, ordinals, lineage,
legality), which yields each record's canonical line: rebuilt from the record's fields and
hashed, it must give the hash the record carries, so the ``events`` rows hold exactly the bytes
the source's hashes are over (what an embedded rollout holds, line for line).

Then one transaction inserts the thread's row and all its records with their projections
(`insert_records`, as a fork does; a ``NOTIFY`` rides along): the thread appears whole or not
at all, and is durable on return. The thread's row is inserted with ``ON CONFLICT DO
NOTHING``: when it is there already (or a concurrent import or create holds it: the insert
waits for that transaction), nothing is written and the held log is compared by hash: the same
records are a re-run (False), anything else is refused with `ConflictError`. No lease is
taken: nobody can hold the lease of a thread that does not exist yet, and the threads row is
what makes one writer win.

Written as a base class of `PostgresStore` (kept apart from the PostgreSQL store's own
modules by whoever wrote ``threadlog copy``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threadlog.errors import ConflictError
from threadlog.store.postgres.projections import insert_records
from threadlog.store.transfer import check_import, conflict_message, same_log

if TYPE_CHECKING:
    from collections.abc import Sequence
    from contextlib import AbstractContextManager

    import psycopg

    from threadlog.model.envelope import Record
    from threadlog.store.postgres.projections import Row
    from threadlog.store.postgres.schema import Target

__all__ = ["Transfers"]


class Transfers:
    """`threadlog.store.protocol.Transfer` on PostgreSQL (module docstring)."""

    _target: Target
    _origin: str

    def _conn(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        raise NotImplementedError

    def _check_open(self) -> None:
        raise NotImplementedError

    def _on_durable(self, thread_id: str, records: list[Record]) -> None:
        raise NotImplementedError

    def read(self, thread_id: str, after: int = 0, *, limit: int | None = None) -> list[Record]:
        raise NotImplementedError

    def import_thread(self, records: Sequence[Record]) -> bool:
        """See `threadlog.store.protocol.Transfer.import_thread`."""
        self._check_open()
        adopted = check_import(records)
        thread_id = adopted[0].record.thread
        rows: list[Row] = [(a.record, a.line, None) for a in adopted]
        with self._conn() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute(
                "INSERT INTO threads (thread_id) VALUES (%s) ON CONFLICT DO NOTHING", (thread_id,)
            )
            fresh = cur.rowcount == 1
            if fresh:
                insert_records(
                    cur, {thread_id: rows}, channel=self._target.channel, origin=self._origin
                )
        if not fresh:
            held = self.read(thread_id)
            if same_log(held, records):
                return False
            raise ConflictError(conflict_message(thread_id, held, records))
        self._on_durable(thread_id, [a.record for a in adopted])
        return True
