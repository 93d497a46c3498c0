"""The seam through which a store refuses the events its thread's state refuses.

Every backend keeps one `Admission` per thread it writes, beside the writer (the embedded
store's `RolloutLog`, the in-memory store's record list), and calls `Admission.admit` with
each record once its ordinal is assigned and before it is queued, under the same lock: the
legality check and the ordinal assignment happen together, so concurrent appends to one
thread (group commit) are each checked against the state their predecessors left. The
decision is the pure reducer's (`threadlog.model.legality`); the store knows nothing of
payloads beyond handing the record over.

The state is built lazily, the first time a record is checked, by the backend's ``load``
(the embedded store starts from the thread's latest snapshot and the tail after it, so a
writer's first append to a long thread costs its tail, not its length); after that each
check costs one reducer step. A record that was admitted but then not queued (the caller's
``check`` refused it, or the journal failed) would leave the state ahead of the log:
`Admission.forget` drops it, and the next check builds it again from the log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from threadlog.errors import UsageError
from threadlog.model.legality import admit

if TYPE_CHECKING:
    from collections.abc import Callable

    from threadlog.model.envelope import Record
    from threadlog.model.state import ThreadState

__all__ = ["Admission"]


class Admission:
    """One thread's reduced state, kept to check the records about to be appended to it.

    Args:
        thread_id: the thread.
        load: its state as the log holds it now (None for an empty log); raises
            `IntegrityError` if the log already holds an event the reducer refuses.
        first: how to build the state the first time, if cheaper than ``load`` (e.g. from
            what opening the thread read); used once, then dropped with what it holds.
    """

    __slots__ = ("_first", "_load", "_ready", "_state", "thread_id")

    def __init__(
        self,
        thread_id: str,
        load: Callable[[], ThreadState | None],
        first: Callable[[], ThreadState | None] | None = None,
    ) -> None:
        self.thread_id = thread_id
        self._load = load
        self._first = first
        self._state: ThreadState | None = None
        self._ready = False

    def admit(self, record: Record, then: Callable[[Record], object] | None = None) -> None:
        """Check ``record`` (its ordinal assigned, not yet queued) and apply it to the state,
        then call ``then(record)`` (the caller's own check) if given.

        Raises `InvalidTransition` (a `UsageError`) if the reducer refuses it: the state is
        unchanged and the caller writes nothing. If ``then`` raises, the state is forgotten
        (the record will not be written) and the error propagates. The caller holds the
        thread's writer lock.
        """
        if not self._ready:
            first, self._first = self._first, None
            self._state = (first or self._load)()
            self._ready = True
        try:
            self._state = admit(self.thread_id, self._state, record)
        except UsageError:
            raise  # refused before any change (the reducer's guarantee)
        except BaseException:
            self.forget()
            raise
        if then is not None:
            try:
                then(record)
            except BaseException:
                self.forget()
                raise

    def peek(self) -> ThreadState | None:
        """The state as it stands (the caller holds the writer lock), None if not built."""
        return self._state if self._ready else None

    def forget(self) -> None:
        """Drop the state (a record it holds was not written after all); the next `admit`
        builds it again from the log."""
        self._state = None
        self._ready = False
        self._first = None
