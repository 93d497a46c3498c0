"""The in-memory store's `Mailbox`: messages in a dict, for one process.

`MemoryStore` (`threadlog.store.inmemory`) gets `post`, `pending` and `done` from this base
class, which keeps the mailbox's own state and lock (kept apart so that the store's module
stays about the log). Messages are commands checked as on disk (a command with ill-typed
fields is refused when posted); they live as long as the store.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from threadlog._clock import new_id_after
from threadlog.errors import ThreadNotFound, UsageError
from threadlog.model.commands import command_from_data
from threadlog.model.ids import is_uuid
from threadlog.store.protocol import MailboxMessage

if TYPE_CHECKING:
    from threadlog.model.commands import Command

__all__ = ["MemoryMailbox"]


class MemoryMailbox:
    """`threadlog.store.protocol.Mailbox` in memory (see the module docstring)."""

    def __init__(self) -> None:
        self._messages: dict[str, dict[str, MailboxMessage]] = {}
        self._mailbox_lock = threading.Lock()

    def exists(self, thread_id: str) -> bool:
        """Whether the thread exists (the store says)."""
        raise NotImplementedError

    def post(self, thread_id: str, command: Command) -> str:
        """See `threadlog.store.protocol.Mailbox.post`."""
        command = command_from_data(command.to_data())  # ill-typed values are refused here
        if not is_uuid(thread_id):
            raise UsageError(f"not a thread id: {thread_id!r:.80}")
        if not self.exists(thread_id):
            raise ThreadNotFound(thread_id)
        with self._mailbox_lock:
            box = self._messages.setdefault(thread_id, {})
            message = MailboxMessage(
                id=new_id_after(max(box, default=None)), thread_id=thread_id, command=command
            )
            box[message.id] = message
        return message.id

    def pending(self, thread_id: str) -> list[MailboxMessage]:
        """See `threadlog.store.protocol.Mailbox.pending`."""
        if not is_uuid(thread_id):
            raise UsageError(f"not a thread id: {thread_id!r:.80}")
        with self._mailbox_lock:
            return sorted(self._messages.get(thread_id, {}).values(), key=lambda m: m.id)

    def addressed(self) -> set[str]:
        """See `threadlog.store.protocol.MailboxIndex.addressed`."""
        with self._mailbox_lock:
            return {thread for thread, box in self._messages.items() if box}

    def done(self, message: MailboxMessage) -> None:
        """See `threadlog.store.protocol.Mailbox.done`."""
        with self._mailbox_lock:
            self._messages.get(message.thread_id, {}).pop(message.id, None)
