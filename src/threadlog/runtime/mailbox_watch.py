"""The watcher that applies, to a live session, the commands other processes leave for it.

Theory of operation
-------------------
Only the lease holder may append to a thread, so ``threadlog approve`` beside a running agent
posts a `threadlog.model.commands.Command` to the store's mailbox (the optional
`threadlog.store.protocol.Mailbox` capability; on disk, ``<home>/inbox/<thread>/``) instead.
When a session opens, the messages already waiting are applied (`drain`) before the open
returns; then the session's watcher looks at the mailbox every 0.1 s and applies each command
through the session's public commands — the same checks as a call through the API — then
marks the message done.

*A cancel is for one turn.* `Cancel` names the turn that was running when it was sent, and
is ignored once that turn has ended: a cancel left while nothing ran never aborts a later
session's first turn.

*Once only.* The events a message leads to get an id derived from the message id, so a
session that crashed between applying a message and deleting it does not apply it twice: the
store answers the repeated append with the stored record (or `DuplicateEventConflict`).

*Nothing stops the watcher but the mailbox itself.* A command the session refuses (a call
that is not waiting, a closed session: `UsageError`, `ConflictError`), or that fails in any
other way, is logged and marked done; a malformed or untrusted message never gets here (the
mailbox refuses it and sets it aside). Only a mailbox that cannot be trusted any more
(`StorageError`, e.g. an inbox folder others may write) ends the watch, with an error in the
log.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol, assert_never

from threadlog.errors import ConflictError, StorageError, UsageError
from threadlog.model.commands import Approve, Cancel, Deny, Resolve, Submit
from threadlog.model.ids import derived_id
from threadlog.store.protocol import Mailbox

if TYPE_CHECKING:
    from threadlog.model.commands import Command
    from threadlog.model.envelope import Record
    from threadlog.store.protocol import Store

__all__ = ["CommandTarget", "apply_command", "drain", "start", "watch"]

log = logging.getLogger("threadlog.runtime")

POLL_INTERVAL = 0.1
"""Seconds between two looks at the inbox."""


class CommandTarget(Protocol):
    """What a command is applied to: a live session's public commands
    (`threadlog.runtime.session.Session`)."""

    @property
    def thread_id(self) -> str:
        """The session's thread."""
        ...

    async def submit(self, text: str, *, by: str | None = None, id: str | None = None) -> Record:
        """See `Session.submit`."""
        ...

    async def approve(
        self, call_id: str, *, by: str = ..., reason: str | None = None, id: str | None = None
    ) -> Record:
        """See `Session.approve`."""
        ...

    async def deny(
        self, call_id: str, *, by: str = ..., reason: str | None = None, id: str | None = None
    ) -> Record:
        """See `Session.deny`."""
        ...

    async def resolve(
        self,
        call_id: str,
        decision: str,
        *,
        by: str = ...,
        note: str | None = None,
        id: str | None = None,
    ) -> Record:
        """See `Session.resolve`."""
        ...

    async def cancel(self, *, turn_id: str | None = None) -> None:
        """See `Session.cancel`."""
        ...


async def apply_command(
    session: CommandTarget, command: Command, *, id: str | None = None
) -> Record | None:
    """Apply one command to a live session; its record (None for `Cancel`).

    ``id`` is the id of the event the command records (for idempotence). Raises what the
    session's command raises (`UsageError` for a command that does not fit the state).
    """
    match command:
        case Submit(text=text, by=by):
            return await session.submit(text, by=by, id=id)
        case Approve(call_id=call_id, by=by, reason=reason):
            return await session.approve(call_id, by=by, reason=reason, id=id)
        case Deny(call_id=call_id, by=by, reason=reason):
            return await session.deny(call_id, by=by, reason=reason, id=id)
        case Resolve(call_id=call_id, decision=decision, by=by, note=note):
            return await session.resolve(call_id, decision, by=by, note=note, id=id)
        case Cancel(turn_id=turn_id):
            await session.cancel(turn_id=turn_id)
            return None
        case _:
            assert_never(command)


async def drain(session: CommandTarget, mailbox: Mailbox) -> int:
    """Apply every message waiting in the session's mailbox once, oldest first; how many.

    Raises `StorageError` when the mailbox cannot be read (see the module docstring).
    """
    thread_id = session.thread_id
    messages = await asyncio.to_thread(mailbox.pending, thread_id)
    for message in messages:
        event_id = derived_id("threadlog.inbox", thread_id, message.id)
        try:
            await apply_command(session, message.command, id=event_id)
        except (UsageError, ConflictError) as exc:
            log.warning("inbox message %s not applied: %s", message.id, exc)
        except StorageError:
            raise  # the store failed: the message stays, the next session applies it
        except Exception:
            # refused, never fatal: the watcher goes on with the next message
            log.exception("inbox message %s not applied", message.id)
        await asyncio.to_thread(mailbox.done, message)
    return len(messages)


async def watch(session: CommandTarget, mailbox: Mailbox) -> None:
    """Apply the messages posted to the session's mailbox, until cancelled."""
    while True:
        try:
            await drain(session, mailbox)
        except StorageError as exc:  # e.g. an inbox folder others may write: refused
            log.error("inbox of thread %s not read any more: %s", session.thread_id, exc)
            return
        await asyncio.sleep(POLL_INTERVAL)


async def start(
    session: CommandTarget, store: Store, *, apply_waiting: bool
) -> asyncio.Task[None] | None:
    """Start watching ``store``'s mailbox for ``session`` (None: the store has none, or it
    cannot be read); with ``apply_waiting``, apply the messages already waiting first, so that they
    are applied when this returns (`Runtime.open`)."""
    if not isinstance(store, Mailbox):
        return None
    if apply_waiting:
        try:
            await drain(session, store)
        except StorageError as exc:
            log.error("inbox of thread %s not read: %s", session.thread_id, exc)
            return None
    return asyncio.create_task(watch(session, store), name=f"inbox {session.thread_id}")
