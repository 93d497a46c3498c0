"""The embedded store's `Mailbox`: a durable file drop per thread, ``<home>/inbox/<thread>/``.

Only the lease holder may append to a thread, so ``threadlog approve`` or ``threadlog send``
running beside a live agent cannot write the decision itself. Instead it posts a message
file into the thread's inbox folder (written atomically and durably: temp file, fsync,
rename, fsync the directory), and the live session, which watches the mailbox
(`threadlog.runtime.mailbox_watch`), applies it through its normal pipeline and then marks it
done (the file is deleted).

The file format is the one the inbox has always had: ``<message id>.json`` holding the
command's JSON object (`threadlog.model.commands.Command.to_data`) plus the message ``id``,
so a message an older CLI left is still applied.

A message is an instruction to a live agent (approve this call, say this), so only the home's
owner may leave one: the inbox folders must be ours and not writable by others (else
`InsecureHome`, on posting and on reading), and a message file that is not ours, or that
others may write, is refused: logged, renamed ``*.refused`` and never returned. So is a file
that is not a well-formed command (bad JSON, an unknown kind, a missing or ill-typed field):
it is kept as evidence, never applied, and never stops the messages after it.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import orjson

from threadlog._clock import new_id_after
from threadlog.errors import InsecureHome, ThreadNotFound, UsageError
from threadlog.model.commands import command_from_data
from threadlog.model.ids import is_uuid
from threadlog.store._perms import check_dir, check_fd
from threadlog.store.protocol import MailboxMessage

if TYPE_CHECKING:
    from collections.abc import Callable

    from threadlog.model.commands import Command
    from threadlog.store._fileops import FileOps

__all__ = ["INBOX_DIR", "MailboxDir"]

log = logging.getLogger("threadlog.store")

INBOX_DIR = "inbox"
"""The home's folder holding one inbox folder per thread."""


class MailboxDir:
    """The inboxes under ``home`` (see the module docstring).

    Args:
        home: the store's directory.
        fops: the file-operation layer (atomic, durable writes).
        exists: whether a thread exists (a message for no thread is refused).
    """

    def __init__(self, home: str, fops: FileOps, exists: Callable[[str], bool]) -> None:
        self._home = home
        self._fops = fops
        self._exists = exists

    def folder(self, thread_id: str) -> str:
        """The thread's inbox folder (`UsageError` for something that is not a thread id)."""
        if not is_uuid(thread_id):
            raise UsageError(f"not a thread id: {thread_id!r:.80}")
        return os.path.join(self._home, INBOX_DIR, thread_id)

    def post(self, thread_id: str, command: Command) -> str:
        """Durably leave a command for the thread's live session; returns the message id."""
        body = command.to_data()
        command_from_data(body)  # a command built with ill-typed values is refused here
        directory = self.folder(thread_id)
        if not self._exists(thread_id):
            raise ThreadNotFound(thread_id)
        self._fops.makedirs(directory)
        self._check_folders(directory)
        # ids sort in posting order (`pending` reads them sorted), across processes too
        names = [n[:-5] for n in os.listdir(directory) if is_uuid(n[:-5])]
        message_id = new_id_after(max(names, default=None))
        self._fops.write_atomic(
            os.path.join(directory, f"{message_id}.json"),
            orjson.dumps({**body, "id": message_id}),
        )
        return message_id

    def pending(self, thread_id: str) -> list[MailboxMessage]:
        """The thread's pending messages, oldest first. Unreadable ones are logged and removed
        (a message is a request, not a record); untrusted and malformed ones are refused
        (logged and renamed ``*.refused``)."""
        directory = self.folder(thread_id)
        try:
            names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
        except FileNotFoundError:
            return []
        self._check_folders(directory)
        messages: list[MailboxMessage] = []
        for name in names:
            path = os.path.join(directory, name)
            flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC
            try:
                fd = os.open(path, flags)
                try:
                    check_fd(fd, path, "the inbox message")
                    with os.fdopen(os.dup(fd), "rb") as f:
                        body = orjson.loads(f.read())
                finally:
                    os.close(fd)
            except FileNotFoundError:
                continue
            except InsecureHome as exc:
                log.error("inbox: refusing message %s: %s", path, exc)
                self._set_aside(path)
                continue
            except orjson.JSONDecodeError as exc:
                log.error("inbox: refusing malformed message %s: not JSON: %s", path, exc)
                self._set_aside(path)
                continue
            except OSError as exc:
                log.warning("inbox: dropping unreadable message %s: %s", path, exc)
                self._remove(path)
                continue
            try:
                if not isinstance(body, dict):
                    raise UsageError(f"a message is a JSON object, not {type(body).__name__}")
                # the message id the poster added is not part of the command
                command = command_from_data({k: v for k, v in body.items() if k != "id"})
            except UsageError as exc:
                log.error("inbox: refusing malformed message %s: %s", path, exc)
                self._set_aside(path)
                continue
            messages.append(MailboxMessage(id=name[:-5], thread_id=thread_id, command=command))
        return messages

    def addressed(self) -> set[str]:
        """The threads whose inbox folder holds a message (one listing of the inbox, and one
        of each thread folder in it: those of threads that were ever sent a command)."""
        root = os.path.join(self._home, INBOX_DIR)
        try:
            folders = [n for n in os.listdir(root) if is_uuid(n)]
        except FileNotFoundError:
            return set()
        out = set()
        for thread_id in folders:
            try:
                if any(n.endswith(".json") for n in os.listdir(os.path.join(root, thread_id))):
                    out.add(thread_id)
            except (FileNotFoundError, NotADirectoryError):
                continue
        return out

    def done(self, message: MailboxMessage) -> None:
        """Delete a message that was handled (idempotent)."""
        if os.path.basename(message.id) != message.id or message.id in ("", ".", ".."):
            raise UsageError(f"not a message id: {message.id!r:.80}")
        self._remove(os.path.join(self.folder(message.thread_id), f"{message.id}.json"))

    def _check_folders(self, directory: str) -> None:
        """The inbox folders must be ours and not writable by others (`InsecureHome`)."""
        check_dir(os.path.join(self._home, INBOX_DIR), "the inbox folder")
        check_dir(directory, "the inbox folder")

    def _set_aside(self, path: str) -> None:
        """Rename a refused message so that it is never read again (kept as evidence)."""
        try:
            os.replace(path, path + ".refused")
        except OSError as exc:
            log.error("inbox: cannot set the refused message %s aside: %s", path, exc)
            return
        self._fops.fsync_dir(os.path.dirname(path))

    def _remove(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        self._fops.fsync_dir(os.path.dirname(path))
