"""The PostgreSQL store's `Transfer`: a copied thread adopted verbatim, in one transaction.

`adopt_pages` (and `adopt_thread`, its one-page case) checks the records a page at a time as
every backend does (`threadlog.store.transfer.ImportCheck`: hashes recomputed, chain,
ordinals, lineage, unique ids, legality), which yields each record's canonical line: rebuilt
from the record's fields and hashed, it must give the hash the record carries, so the
``events`` rows hold exactly the bytes the source's hashes are over (what an embedded rollout
holds, line for line).

The writing is `_insert_pages` (`threadlog.store.postgres.logs`): the thread's row and its
records with their projections, a page of statements at a time, in one transaction that
commits only once the whole log is checked, so the thread appears whole or not at all and is
durable on return; its ``threads`` row (``ON CONFLICT DO NOTHING``) decides who wins against
a concurrent import or create. A long thread is kept with a checkpoint of its state. What this
module adds is the capability's answer for a thread that is there already (or appears
meanwhile): the held log is compared by hash a page at a time (`compare_pages`), the same
records are a re-run (False, nothing written), anything else is refused with
`ConflictError`.

Kept apart from the PostgreSQL store's own modules by whoever wrote ``threadlog copy``; a base
class of `PostgresStore`.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from threadlog.errors import ConflictError, UsageError
from threadlog.model import snapshot
from threadlog.store.transfer import (
    END,
    ImportCheck,
    compare_pages,
    first_page,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from threadlog.model.envelope import Record
    from threadlog.store.transfer import Adopted

__all__ = ["Transfers"]


class Transfers:
    """`threadlog.store.protocol.Transfer` on PostgreSQL (module docstring)."""

    if TYPE_CHECKING:
        _checkpoint_from: int

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

        def _keep_checkpoint(
            self, thread_id: str, ord_: int, digest: str, payload: bytes
        ) -> None: ...

        def _insert_pages(
            self,
            thread_id: str,
            pages: Iterable[Sequence[Adopted]],
            finish: Callable[[], object],
        ) -> int: ...

    def adopt_thread(self, records: Sequence[Record]) -> bool:
        """See `threadlog.store.protocol.Transfer.adopt_thread`: `adopt_pages` of one page.
        A thread of `threadlog.store.postgres.store.CHECKPOINT_FROM` records or more is kept
        with a checkpoint of its state (trimmed), as a writer letting it go would leave it:
        its first writer starts there."""
        return self.adopt_pages([records])

    def adopt_pages(self, pages: Iterable[Sequence[Record]]) -> bool:
        """See `threadlog.store.protocol.Transfer.adopt_pages`: each page checked and sent
        as it comes, in one transaction (`_insert_pages`), one page held at a time."""
        self._check_open()
        first, stream = first_page(pages)
        thread_id = first[0].thread
        check = ImportCheck()
        if self.exists(thread_id):
            return self._held_pages(thread_id, check, itertools.chain([first], stream))
        adopted = check.feed(first)  # (checked before anything is sent)
        pulled = [False]  # whether a page after the first was taken

        def checked() -> Iterator[list[Adopted]]:
            yield adopted
            pulled[0] = True
            for page in stream:
                yield check.feed(page)

        try:
            count = self._insert_pages(thread_id, checked(), check.finish)
        except UsageError:
            if not self.exists(thread_id):  # not a thread that appeared meanwhile
                raise
            if not pulled[0]:  # (the INSERT refused it: only the first page was taken)
                # as `adopt_thread`: the same records are a re-run (False), else ConflictError
                pages_ = itertools.chain([first], stream)
                return self._held_pages(thread_id, ImportCheck(), pages_)
            raise ConflictError(
                f"thread {thread_id} appeared here while it was copied; nothing was written"
            ) from None
        last = check.last
        if count >= self._checkpoint_from and last is not None:
            payload = snapshot.dump_trimmed(check.finish())  # (the state after ``last``)
            self._keep_checkpoint(thread_id, last.ord, last.hash, payload)
        return True

    def _held_pages(
        self, thread_id: str, check: ImportCheck, pages: Iterable[Sequence[Record]]
    ) -> bool:
        """`compare_pages` against the held thread: False if the same records, else
        `ConflictError`."""
        tail = self.read(thread_id, before=END, limit=1)

        def held(after: int, limit: int) -> Sequence[Record]:
            return self.read(thread_id, after, limit=limit)

        compare_pages(thread_id, held, tail[0].ord if tail else 0, pages, check)
        return False
