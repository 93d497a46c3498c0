"""Finding the work a dead process left, and taking it over: shared by the server and workers.

Theory of operation
-------------------
A process that drives threads (``threadlog serve``, ``threadlog worker``) can die mid-turn: its
threads keep a running turn and a ``session.opened`` that never closed. Another such process
finds them (`interrupted_threads`) and resumes each (`take_over` → `Runtime.resume`: the
recovery of `threadlog.runtime.resume`: unfinished tool calls classified, the turn ended
``interrupted``, a new turn carrying on with the task). A process that died in the middle of
such a takeover, after the turn's ``turn.ended`` and before the new turn's ``turn.started``,
leaves no turn running: its thread (status ``interrupted`` in the catalog, its session never
closed) is found and resumed the same way, and the resume starts the missing continuation.

Whether the dead process is really dead is the **lease's** to say, never a guess from the
log: resuming takes the thread's single-writer lease first (`Store.acquire`), and a live
holder refuses it (`LeaseHeld`), so its own session carries on. On the embedded store the
lease is an ``flock`` that the kernel drops when its holder dies; on PostgreSQL it is a row
with an expiry on the database's clock that its holder renews, and with fencing tokens
a holder that was only paused past its expiry can no longer write once another has taken
over. The same code is therefore right on both.

Only threads whose unclosed session was opened by a service (source ``api``: the server and
workers) are taken over: a thread a user's own program (``sdk``) or the command line was
driving is left for that program to resume.

`waiting_threads` finds new work: input queued while nobody drove the thread (``threadlog
send``), commands waiting in the store's `Mailbox`, and turns a service left parked on a
human when its session closed that a decision recorded since lets go on (`undriven`);
`Runtime.open` applies them (a turn starts with the oldest such input; a decided turn is
driven on as it is, nothing of it interrupted). Steering an aborted or failed turn left
untaken is not new work (`threadlog.model.turns.startable_input`): a worker never starts it
as a turn of its own after a user cancelled.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from threadlog.errors import IntegrityError, LeaseHeld, UsageError
from threadlog.model.recovery import continuation_cut_short, left_by_a_clean_close
from threadlog.model.turns import is_parked, startable_input
from threadlog.store.protocol import Catalog, LocalHome, Mailbox, MailboxIndex, Maintenance

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from threadlog.model.state import ThreadState
    from threadlog.runtime.runtime import Runtime
    from threadlog.runtime.session import Session
    from threadlog.store.protocol import Store

__all__ = ["interrupted_threads", "take_over", "undriven", "waiting_threads"]

log = logging.getLogger("threadlog.runtime")

_UNFINISHED = ("running", "interrupted")
"""The statuses of the threads `interrupted_threads` looks at (`threadlog.model.projection`)."""

SERVICE_SOURCES = ("api",)
"""The sources of the sessions a service may take over (`threadlog.model.events`)."""


def interrupted_threads(
    store: Store,
    *,
    sources: Iterable[str] = SERVICE_SOURCES,
    skip: Iterable[str] = (),
    checked: dict[str, int] | None = None,
) -> list[str]:
    """Threads whose last session was opened by one of ``sources`` and never closed, and
    which that session left with a turn running, or with a turn it ended ``interrupted``
    and no continuation started (it died between the two: `continuation_cut_short`).
    Candidates: whether their process is gone is the lease's to say. A thread that cannot
    be read is skipped and logged, never fatal.

    ``checked``, as for `waiting_threads` (a dict of its own): a thread found to be no
    candidate is not read again until its log grows (a thread left ``interrupted`` by a
    resume that chose not to go on stays so in the catalog, and used to be read at every
    poll). Only such threads are remembered: a candidate whose holder is alive becomes
    one to take over when that holder dies, which adds nothing to its log."""
    wanted, skipped = set(sources), set(skip)
    if isinstance(store, Catalog):
        candidates = [row.thread_id for row in store.threads() if row.status in _UNFINISHED]
    else:
        candidates = store.thread_ids()
    memory = _Memory(store, checked)
    found = []
    for thread_id in candidates:
        if thread_id in skipped:
            continue
        try:
            end = memory.end(thread_id)
            if memory.unchanged(thread_id, end):
                continue  # no record since it was found to be no candidate
            state = store.state(thread_id, history=False)
            if (
                state.session is not None
                and state.session_source in wanted
                and (state.active_turn is not None or continuation_cut_short(state) is not None)
            ):
                found.append(thread_id)
            else:
                memory.remember(thread_id, end)
        except Exception as exc:  # a damaged thread is skipped, never fatal to the caller
            log.warning("thread %s not checked for resumption: %s", thread_id, exc)
    return found


def waiting_threads(
    store: Store,
    *,
    sources: Iterable[str] = SERVICE_SOURCES,
    skip: Iterable[str] = (),
    checked: dict[str, int] | None = None,
) -> list[str]:
    """Threads with new work: input queued while nobody drove them, commands waiting in the
    store's mailbox, or a turn that a service started, left waiting for a human when its
    session closed cleanly, and that a decision recorded since (``threadlog approve`` while
    no session was live) lets go on (`undriven`).

    ``checked`` (a caller that polls keeps it from call to call: `Worker`) remembers where
    each thread's log ended when it was found with no work (`_ends`); a thread whose log
    still ends there is not read again: new work in a log is a new record, and the mailbox
    is looked at every time. Without it, every thread's state is read (~0.25 ms a thread
    here: 0.5 s a poll for 2,000 threads; with it, 0.05 s). The mailbox is asked once which
    threads have mail where the store can say (`MailboxIndex`), instead of once a thread."""
    wanted, skipped = set(sources), set(skip)
    memory = _Memory(store, checked)
    mailbox = store if isinstance(store, Mailbox) else None
    # which threads have mail, in one call where the store can say (a query, not one a thread)
    addressed = store.addressed() if isinstance(store, MailboxIndex) else None
    found = []
    for thread_id in store.thread_ids():
        if thread_id in skipped:
            continue
        try:
            if (
                mailbox is not None
                and (addressed is None or thread_id in addressed)
                and mailbox.pending(thread_id)
            ):
                found.append(thread_id)
                continue
            end = memory.end(thread_id)
            if memory.unchanged(thread_id, end):
                continue  # no record since it was found with nothing to do
            state = store.state(thread_id, history=False)
            if startable_input(state) is not None or undriven(state, wanted):
                found.append(thread_id)
            else:
                memory.remember(thread_id, end)
        except Exception as exc:
            log.warning("thread %s not checked for work: %s", thread_id, exc)
    return found


class _Memory:
    """A poller's ``checked``: threads found with nothing to do, and where each one's log
    ended then (`_ends`). Without ``checked``, or on a store that cannot say where a log
    ends, it remembers nothing and every thread is read."""

    def __init__(self, store: Store, checked: dict[str, int] | None) -> None:
        self._checked = checked
        self._end_of = _ends(store) if checked is not None else None

    def end(self, thread_id: str) -> int | None:
        """Where the thread's log ends now (None: not known), taken before its state is
        read, so that a record appended meanwhile makes it read again next time."""
        return self._end_of(thread_id) if self._end_of is not None else None

    def unchanged(self, thread_id: str, end: int | None) -> bool:
        """Whether the thread was found with nothing to do when its log ended at ``end``."""
        return end is not None and self._checked is not None and self._checked.get(thread_id) == end

    def remember(self, thread_id: str, end: int | None) -> None:
        """The thread, its log ending at ``end``, has nothing to do."""
        if end is not None and self._checked is not None:
            self._checked[thread_id] = end


def _ends(store: Store) -> Callable[[str], int | None] | None:
    """What says a thread's log has grown since it was last looked at: its file's size on a
    store on disk (the file is the truth: the index lags a writer that was killed before it
    indexed), its catalog row's last ordinal on a database (the row changes in the
    transaction that appends); None for a store with neither."""
    if isinstance(store, LocalHome) and isinstance(store, Maintenance):

        def size(thread_id: str) -> int | None:
            try:
                return os.stat(store.path_of(thread_id)).st_size
            except OSError:
                return None

        return size
    if isinstance(store, Catalog):
        return {row.thread_id: row.last_ord for row in store.threads(archived=None)}.get
    return None


def undriven(state: ThreadState, sources: Iterable[str] = SERVICE_SOURCES) -> bool:
    """Whether ``state``'s running turn, started by a session of one of ``sources``, is left
    with no session and can go on: its session closed cleanly while it waited for a human (a
    worker that stopped, or that gave the thread back), and it no longer waits (a decision
    was recorded since, with no session live). `Runtime.open` then drives it on as it is."""
    turn_id = state.active_turn
    return (
        turn_id is not None
        and left_by_a_clean_close(state)
        and state.turns[turn_id].source in set(sources)
        and not is_parked(state)
    )


async def take_over(runtime: Runtime, thread_id: str, *, resume: bool = True) -> Session | None:
    """Open ``thread_id`` in ``runtime`` to drive it: `Runtime.resume` (an interrupted turn)
    or, without ``resume``, `Runtime.open` (queued work). None when a live process holds
    the thread (`LeaseHeld`: it carries on itself) or the thread cannot be opened (logged)."""
    try:
        if resume:
            return await runtime.resume(thread_id)
        return await runtime.open(thread_id)
    except LeaseHeld:
        return None
    except (UsageError, IntegrityError) as exc:
        log.warning("thread %s not taken over: %s", thread_id, exc)
        return None
