"""The inbox: how another process (the CLI) reaches a live session that holds a thread's lease.

Only the lease holder may append to a thread, so ``threadlog approve`` or ``threadlog send``
running beside a live agent cannot write the decision itself. Instead it drops a message file
into ``<home>/inbox/<thread>/`` (written atomically and durably: temp file, fsync, rename,
fsync the directory), and the live session, which watches that directory, applies it through
its normal pipeline and then deletes the file.

A message is applied with an event id derived from the message id, so a session that crashes
between applying a message and deleting it does not apply it twice when it reads it again.

A message is a `threadlog.model.commands.Command` (its JSON object, plus the message ``id``):
the file format is the one the inbox has always had, so a message an older CLI left is still
applied. `read_messages` parses every message into its command; the session's watcher
(`threadlog.runtime.mailbox_watch`) applies them.

A message is an instruction to a live agent (approve this call, say this), so only the home's
owner may leave one: the inbox folders must be ours and not writable by others (else
`InsecureHome`, on posting and on reading), and a message file that is not ours, or that
others may write, is refused: logged, renamed ``*.refused`` and never applied. So is a file
that is not a well-formed command (bad JSON, an unknown kind, a missing or ill-typed field):
it is kept as evidence, never applied, and never stops the messages after it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from threadlog._clock import new_id
from threadlog.errors import InsecureHome, UsageError
from threadlog.model.commands import command_from_data
from threadlog.model.ids import is_uuid
from threadlog.store._fileops import DEFAULT_FILEOPS, FileOps
from threadlog.store._perms import check_dir, check_fd

if TYPE_CHECKING:
    from threadlog.model.commands import Command

__all__ = ["Message", "inbox_dir", "post", "read_messages", "remove"]

log = logging.getLogger("threadlog.runtime")


@dataclass(frozen=True, slots=True)
class Message:
    """A pending message: its id (the file name), its path, and the command it carries."""

    id: str
    path: str
    command: Command


def inbox_dir(home: str, thread_id: str) -> str:
    """The thread's inbox folder (`UsageError` for something that is not a thread id)."""
    if not is_uuid(thread_id):
        raise UsageError(f"not a thread id: {thread_id!r:.80}")
    return os.path.join(home, "inbox", thread_id)


def post(home: str, thread_id: str, command: Command, fops: FileOps = DEFAULT_FILEOPS) -> str:
    """Durably leave a command for the thread's live session; returns the message id."""
    body = command.to_data()
    command_from_data(body)  # a command built with ill-typed values is refused here
    directory = inbox_dir(home, thread_id)
    fops.makedirs(directory)
    _check_folders(home, directory)
    message_id = new_id()
    fops.write_atomic(
        os.path.join(directory, f"{message_id}.json"), orjson.dumps({**body, "id": message_id})
    )
    return message_id


def read_messages(home: str, thread_id: str) -> list[Message]:
    """The thread's pending messages, oldest first. Unreadable ones are logged and removed
    (a message is a request, not a record); untrusted and malformed ones are refused (logged
    and renamed ``*.refused``)."""
    directory = inbox_dir(home, thread_id)
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
    except FileNotFoundError:
        return []
    _check_folders(home, directory)
    messages: list[Message] = []
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
            _set_aside(path)
            continue
        except orjson.JSONDecodeError as exc:
            log.error("inbox: refusing malformed message %s: not JSON: %s", path, exc)
            _set_aside(path)
            continue
        except OSError as exc:
            log.warning("inbox: dropping unreadable message %s: %s", path, exc)
            remove(path)
            continue
        try:
            if not isinstance(body, dict):
                raise UsageError(f"a message is a JSON object, not {type(body).__name__}")
            # the message id the poster added is not part of the command
            command = command_from_data({k: v for k, v in body.items() if k != "id"})
        except UsageError as exc:
            log.error("inbox: refusing malformed message %s: %s", path, exc)
            _set_aside(path)
            continue
        messages.append(Message(name[:-5], path, command))
    return messages


def _check_folders(home: str, directory: str) -> None:
    """The inbox folders must be ours and not writable by others (`InsecureHome`)."""
    check_dir(os.path.join(home, "inbox"), "the inbox folder")
    check_dir(directory, "the inbox folder")


def _set_aside(path: str) -> None:
    """Rename a refused message so that it is never read again (it is kept as evidence)."""
    try:
        os.replace(path, path + ".refused")
    except OSError as exc:
        log.error("inbox: cannot set the refused message %s aside: %s", path, exc)
        return
    DEFAULT_FILEOPS.fsync_dir(os.path.dirname(path))


def remove(path: str) -> None:
    """Delete a message that was applied (or could not be read)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    DEFAULT_FILEOPS.fsync_dir(os.path.dirname(path))
