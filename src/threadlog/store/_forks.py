"""What a fork's ``thread.created`` says: one definition for every backend, so none can drift.

A fork's lineage names its source: the thread, the ordinal, entry id and hash of the last
record it inherits, and the kind of fork (``fork``, ``salvage``…). When it inherits records
(``at > 1``) it also says which hash its ord 2 follows and which threads wrote the inherited
records: the source, for those it wrote itself, and whatever the source had inherited in
turn. `threadlog.model.lineage.copied_prefix` reads that back, and the chain of a fork
verifies with it. The rest of the header is the source's, but for the principal and title a
fork may set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threadlog.model.envelope import FORMAT_VERSION
from threadlog.model.events import ThreadCreated

if TYPE_CHECKING:
    from threadlog.model.envelope import Record
    from threadlog.model.lineage import Copied

__all__ = ["child_created"]


def child_created(
    source: str,
    created: ThreadCreated,
    first: Record,
    inherited: Copied | None,
    at: int,
    last: Record,
    *,
    principal: str | None,
    title: str | None,
    kind: str,
) -> ThreadCreated:
    """The ``thread.created`` of a fork of thread ``source`` at ord ``at`` (whose record is
    ``last``): ``created`` and ``first`` are the source's ord 1, ``inherited`` the prefix the
    source itself inherited, if any."""
    lineage: dict[str, Any] = {
        "thread": source,
        "ord": at,
        "entry": last.id,
        "hash": last.hash,
        "kind": kind,
    }
    if at > 1:
        # The child inherits ords 2..at; the source may have inherited some of them itself.
        own = 2 if inherited is None else inherited.until + 1  # the first ord it wrote
        threads = set() if inherited is None else set(inherited.threads)
        if at >= own:
            threads.add(source)
        chain = first.hash if inherited is None else inherited.prev  # what ord 2 follows
        lineage["copied"] = {"prev": chain, "threads": sorted(threads)}
    return ThreadCreated(
        format=FORMAT_VERSION,
        principal=principal or created.principal,
        config=dict(created.config),
        lineage=lineage,
        title=title or created.title,
    )
