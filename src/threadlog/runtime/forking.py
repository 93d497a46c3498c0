"""Where a fork starts: never inside a running turn.

A fork inherits a prefix of its source verbatim (`Store.fork`). If that prefix ends inside a
turn that is still running — the source's agent is mid-turn, or ``--at`` names a record in the
middle of a turn that had not ended by then — the child would hold a running turn that no
session drives: a step without a response, a tool call started in the *source's* process
with no result. Carrying it on would repeat the source's side effects; leaving it would leave
the child stuck.

So a fork point *snaps back to the last turn boundary*: the record just before that turn's
``turn.started``. The child holds only finished turns, and its next input starts a new turn
on a clean state (`verify` and `state` are clean). The store's own `Store.fork` stays exact
(``threadlog resume --salvage`` copies what it can, and resume repairs the rest).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from threadlog.errors import UsageError

if TYPE_CHECKING:
    from threadlog.model.state import ThreadState
    from threadlog.store.protocol import Store

__all__ = ["ForkPoint", "fork_point"]


class ForkPoint(NamedTuple):
    """Where to fork: ``ord`` (pass it to `Store.fork`), and ``requested``, the ordinal
    asked for when a running turn moved it back (None when it did not move)."""

    ord: int
    requested: int | None = None


def fork_point(
    store: Store, thread_id: str, at: int | str | None, *, live: ThreadState | None = None
) -> ForkPoint:
    """The fork point for ``at`` (an ordinal, an entry id, or None for the end), moved back to
    the last turn boundary when it falls inside a running turn (see the module docstring).

    ``live`` is the source's state when a session of this process holds it (its latest
    records may not be durable yet); otherwise the store's state is used. Raises `UsageError`
    for an ordinal or entry the thread does not have.
    """
    state = live if live is not None else store.state(thread_id, history=False)
    if at is None:
        target = state.last_ord
    elif isinstance(at, str):
        target = _ord_of_entry(store, thread_id, at)
    else:
        if isinstance(at, bool) or not 1 <= at <= state.last_ord:
            raise UsageError(f"thread {thread_id} has no ord {at!r} (it has 1–{state.last_ord})")
        target = at
    for turn in state.turns.values():
        if turn.started_ord <= target and (turn.ended_ord is None or turn.ended_ord > target):
            return ForkPoint(turn.started_ord - 1, target)
    return ForkPoint(target)


def _ord_of_entry(store: Store, thread_id: str, entry: str) -> int:
    """The ordinal of the record whose id is ``entry`` (reads the log)."""
    for record in store.read(thread_id):
        if record.id == entry:
            return record.ord
    raise UsageError(f"no entry {entry!r} in thread {thread_id}")
