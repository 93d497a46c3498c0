"""The inbox: how another process (the CLI) reaches a live session that holds a thread's lease.

Only the lease holder may append to a thread, so ``threadlog approve`` or ``threadlog send``
running beside a live agent cannot write the decision itself. Instead it drops a message file
into ``<home>/inbox/<thread>/`` (written atomically and durably: temp file, fsync, rename,
fsync the directory), and the live session, which watches that directory, applies it through
its normal pipeline and then deletes the file.

A message is applied with an event id derived from the message id, so a session that crashes
between applying a message and deleting it does not apply it twice when it reads it again.

A message is an instruction to a live agent (approve this call, say this), so only the home's
owner may leave one: the inbox folders must be ours and not writable by others (else
`InsecureHome`, on posting and on reading), and a message file that is not ours, or that
others may write, is refused: logged, renamed ``*.refused`` and never applied.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import orjson

from threadlog._clock import new_id
from threadlog.errors import InsecureHome, UsageError
from threadlog.model.ids import is_uuid
from threadlog.store._fileops import DEFAULT_FILEOPS, FileOps
from threadlog.store._perms import check_dir, check_fd

__all__ = ["Message", "inbox_dir", "post", "read_messages", "remove"]

log = logging.getLogger("threadlog.runtime")

KINDS = ("approve", "deny", "input", "resolve", "cancel")


@dataclass(frozen=True, slots=True)
class Message:
    id: str
    path: str
    body: dict[str, Any]


def inbox_dir(home: str, thread_id: str) -> str:
    if not is_uuid(thread_id):
        raise UsageError(f"not a thread id: {thread_id!r:.80}")
    return os.path.join(home, "inbox", thread_id)


def post(home: str, thread_id: str, body: dict[str, Any], fops: FileOps = DEFAULT_FILEOPS) -> str:
    """Durably leave a message for the thread's live session; returns the message id."""
    if body.get("kind") not in KINDS:
        raise UsageError(f"unknown inbox message kind {body.get('kind')!r}")
    directory = inbox_dir(home, thread_id)
    fops.makedirs(directory)
    _check_folders(home, directory)
    message_id = new_id()
    fops.write_atomic(
        os.path.join(directory, f"{message_id}.json"), orjson.dumps({**body, "id": message_id})
    )
    return message_id


def read_messages(home: str, thread_id: str) -> list[Message]:
    """The thread's pending messages, oldest first (unreadable ones are logged and skipped
    once, then removed: a message is a request, not a record)."""
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
        except (OSError, orjson.JSONDecodeError) as exc:
            log.warning("inbox: dropping unreadable message %s: %s", path, exc)
            remove(path)
            continue
        if not isinstance(body, dict) or body.get("kind") not in KINDS:
            log.warning("inbox: dropping malformed message %s", path)
            remove(path)
            continue
        messages.append(Message(name[:-5], path, body))
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
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    DEFAULT_FILEOPS.fsync_dir(os.path.dirname(path))
