"""The watcher that applies, to a live session, the commands other processes leave for it.

Theory of operation
-------------------
Only the lease holder may append to a thread, so ``threadlog approve`` beside a running agent
leaves a `threadlog.model.commands.Command` in the thread's inbox (`threadlog.runtime.inbox`)
instead. The session's watcher looks at the inbox every 0.1 s and applies each command through
the session's public commands — the same checks as a call through the API — then deletes the
message.

*Once only.* The events a message leads to get an id derived from the message id, so a
session that crashed between applying a message and deleting it does not apply it twice: the
store answers the repeated append with the stored record (or `DuplicateEventConflict`).

*Nothing stops the watcher but the inbox itself.* A command the session refuses (a call that
is not waiting, a closed session: `UsageError`, `ConflictError`) is logged and deleted; a
malformed or untrusted message never gets here (the inbox refuses it and sets it aside). Only
an inbox folder that cannot be trusted any more (`StorageError`, e.g. others may write it)
ends the watch, with an error in the log.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol, assert_never

from threadlog.errors import ConflictError, StorageError, UsageError
from threadlog.model.commands import Approve, Cancel, Deny, Resolve, Submit
from threadlog.model.ids import derived_id
from threadlog.runtime import inbox

if TYPE_CHECKING:
    from threadlog.model.commands import Command
    from threadlog.model.envelope import Record

__all__ = ["CommandTarget", "apply_command", "watch"]

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

    async def cancel(self) -> None:
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
        case Cancel():
            await session.cancel()
            return None
        case _:
            assert_never(command)


async def watch(session: CommandTarget, home: str) -> None:
    """Apply the messages left in the session's inbox under ``home``, until cancelled."""
    thread_id = session.thread_id
    while True:
        try:
            messages = await asyncio.to_thread(inbox.read_messages, home, thread_id)
        except StorageError as exc:  # e.g. an inbox folder others may write: refused
            log.error("inbox of thread %s not read any more: %s", thread_id, exc)
            return
        for message in messages:
            event_id = derived_id("threadlog.inbox", thread_id, message.id)
            try:
                await apply_command(session, message.command, id=event_id)
            except (UsageError, ConflictError) as exc:
                log.warning("inbox message %s not applied: %s", message.id, exc)
            await asyncio.to_thread(inbox.remove, message.path)
        await asyncio.sleep(POLL_INTERVAL)
