"""How the inspecting commands fetch a thread's records: a window, never more than needed.

`threadlog events --last N` and `threadlog show` read the end of a thread through
``Store.read(before=, limit=)``, which the embedded store serves from the end of the rollout
(or its sparse index) without reading the log from its start; `show` takes the state from
``Store.state`` (the embedded store starts it from its checkpoint) and the rest from the index.
Only ``show --tree`` (the whole conversation) reads every record. The rendering lives in
`threadlog.cli.showing` and `threadlog.cli.inspect`; these functions are all they ask the
store for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from threadlog.model.envelope import Record
    from threadlog.store.protocol import Store

__all__ = ["END", "SESSIONS_WINDOW", "last_records", "records_for_show"]

END = 2**62
"""A ``before`` past any ordinal: ``read(t, before=END, limit=n)`` is the last ``n`` records."""

SESSIONS_WINDOW = 10_000
"""How many of a thread's latest records `show` reads to list its sessions."""


def last_records(store: Store, thread: str, count: int, *, after: int = 0) -> list[Record]:
    """The thread's last ``count`` records with ``ord > after``, in order."""
    if count <= 0:
        store.read(thread, limit=1)  # ThreadNotFound still
        return []
    return store.read(thread, after, before=END, limit=count)


def records_for_show(
    store: Store, thread: str, last_n: int, *, whole: bool
) -> tuple[list[Record], bool]:
    """The records `show` renders (every one with ``whole``, e.g. for ``--tree``; else the
    latest `SESSIONS_WINDOW`, or ``last_n`` if more) and whether they are the whole log."""
    if whole:
        return store.read(thread), True
    records = last_records(store, thread, max(last_n, SESSIONS_WINDOW))
    return records, bool(records) and records[0].ord == 1
