"""Whether a record may join a thread's log: the reducer's verdict, phrased for the store.

The store checks every record it is about to write against the thread's reduced state, so
that an event the reducer refuses (a second ``turn.ended``, a result before its start) is
never written: a log that holds one can no longer be reduced, and with it ``state``,
``show`` and resuming all fail. The decision is the reducer's (`threadlog.model.reducer`);
this module only says it in the two ways the store needs:

* `admit`: a record about to be appended. A refusal is the caller's mistake
  (`InvalidTransition`, a `UsageError`), and the state is unchanged: the reducer checks
  everything before its first change.
* `reduce_log`: records already stored. A refusal there means the log itself is damaged (an
  older threadlog wrote the record): `IntegrityError` with the record's ordinal, so that
  ``threadlog resume --salvage`` can keep the valid prefix before it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from threadlog.errors import IntegrityError, InvalidTransition, UsageError
from threadlog.model.reducer import apply

if TYPE_CHECKING:
    from collections.abc import Iterable

    from threadlog.model.envelope import Record
    from threadlog.model.state import ThreadState

__all__ = ["admit", "reduce_log", "replay_log"]


def admit(thread_id: str, state: ThreadState | None, record: Record) -> ThreadState:
    """Apply ``record``, about to be appended, to ``state`` (None: an empty log).

    Returns the state (changed in place, unless ``state`` was None). Raises
    `InvalidTransition` naming the thread, the event type and what is wrong, and leaves
    ``state`` as it was, if the reducer refuses the event.
    """
    try:
        return apply(state, record)
    except InvalidTransition as exc:
        raise InvalidTransition(
            f"thread {thread_id}: refused {_what(record, exc)}; nothing was written"
        ) from None


def reduce_log(
    thread_id: str, records: Iterable[Record], state: ThreadState | None = None
) -> ThreadState | None:
    """Reduce stored records onto ``state`` (None: from the start of the log).

    Returns None only for no records on no state. Raises `IntegrityError` (thread, ordinal,
    reason) at the first record the reducer refuses: the log holds an illegal event.
    """
    record: Record | None = None
    try:
        for record in records:
            state = apply(state, record)
    except UsageError as exc:  # InvalidTransition, or data that does not fit its type
        assert record is not None
        raise IntegrityError(thread_id, record.ord, f"illegal event {_what(record, exc)}") from exc
    return state


def _what(record: Record, exc: UsageError) -> str:
    """The event type and the reducer's reason, the type named once."""
    reason = exc.reason if isinstance(exc, InvalidTransition) else str(exc)
    return reason if reason.startswith(record.type) else f"{record.type}: {reason}"


def replay_log(
    thread_id: str, records: Iterable[Record], state: ThreadState | None = None
) -> ThreadState:
    """`reduce_log` for a log that must have a state: an empty one is damage too."""
    reduced = reduce_log(thread_id, records, state)
    if reduced is None:
        raise IntegrityError(thread_id, 1, "the log is empty: ord 1 must be thread.created")
    return reduced
