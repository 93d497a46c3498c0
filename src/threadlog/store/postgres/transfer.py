"""The PostgreSQL store's `Transfer`: a copied thread adopted verbatim, in one transaction.

`adopt_thread` checks the records as every backend does
(`threadlog.store.transfer.check_import`: hashes recomputed, chain, ordinals, lineage,
legality), which yields each record's canonical line: rebuilt from the record's fields and
hashed, it must give the hash the record carries, so the ``events`` rows hold exactly the bytes
the source's hashes are over (what an embedded rollout holds, line for line).

The writing is the store's own `import_thread`'s (`threadlog.store.postgres.logs`,
`_insert_new_thread`, given the checked records so that their lines are not decoded again):
the thread's row and all its records with their projections in one transaction, so the
thread appears whole or not at all and is durable on return; its ``threads`` row (``ON CONFLICT DO NOTHING``)
decides who wins against a concurrent import or create. What this module adds is the
capability's answer for a thread that is there already: the held log is compared by hash, the
same records are a re-run (False, nothing written), anything else is refused with
`ConflictError`.

Kept apart from the PostgreSQL store's own modules by whoever wrote ``threadlog copy``; a base
class of `PostgresStore`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from threadlog.errors import ConflictError, UsageError
from threadlog.model import snapshot
from threadlog.model.context import Context
from threadlog.model.state import trim
from threadlog.store.transfer import check_import_state, conflict_message, same_log

if TYPE_CHECKING:
    from collections.abc import Sequence

    from threadlog.model.envelope import Record

__all__ = ["Transfers"]


class Transfers:
    """`threadlog.store.protocol.Transfer` on PostgreSQL (module docstring)."""

    if TYPE_CHECKING:

        def _check_open(self) -> None: ...

        def exists(self, thread_id: str) -> bool: ...

        def read(
            self,
            thread_id: str,
            after: int = 0,
            *,
            limit: int | None = None,
            before: int | None = None,
        ) -> list[Record]: ...

        def _insert_new_thread(
            self, thread_id: str, records: list[Record], lines: Sequence[bytes]
        ) -> str: ...

        def _keep_checkpoint(
            self, thread_id: str, ord_: int, digest: str, payload: bytes
        ) -> None: ...

    def adopt_thread(self, records: Sequence[Record]) -> bool:
        """See `threadlog.store.protocol.Transfer.adopt_thread`. A thread of
        `threadlog.store.postgres.store.CHECKPOINT_FROM` records or more is kept with a checkpoint of its state (trimmed),
        as a writer letting it go would leave it: its first writer starts there."""
        self._check_open()
        adopted, state = check_import_state(records)
        thread_id = adopted[0].record.thread
        if not self.exists(thread_id):
            try:
                # (checked: the records as they are, not their lines decoded again)
                records_, lines = [a.record for a in adopted], [a.line for a in adopted]
                self._insert_new_thread(thread_id, records_, lines)
                from threadlog.store.postgres import store  # (its base class: imported late)

                if len(records_) >= store.CHECKPOINT_FROM:
                    last = records_[-1]
                    trim(state)
                    payload = snapshot.dump(state, Context())
                    self._keep_checkpoint(thread_id, last.ord, last.hash, payload)
                return True
            except UsageError:
                if not self.exists(thread_id):  # not a thread that appeared meanwhile
                    raise
        held = self.read(thread_id)
        if same_log(held, records):
            return False
        raise ConflictError(conflict_message(thread_id, held, records))
