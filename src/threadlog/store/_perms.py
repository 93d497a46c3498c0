"""Who may touch a home: its owner only (the ssh rule for ``~/.ssh``).

A home holds every prompt, tool output and decision of its threads, and its journals are
replayed into rollouts on open, so a file someone else could write there is a way to put
words in an agent's log. The rules:

* the home and the store's folders are created 0700, every file 0600, whatever the umask;
* a folder or file owned by another user, or writable by the group or others, is refused
  with `InsecureHome`, which says the command that fixes it (``chmod``/``chown``); nothing
  is changed behind the owner's back;
* one of ours that is merely readable by the group or others (homes made by older versions,
  an index SQLite created 0644) is tightened to 0700/0600, with a warning.

Journals also carry a header keyed by the home's *secret* (32 random bytes in
``<home>/secret``, 0600): a journal whose header is not the one this home's secret gives for
its name was not written by this home's stores, and is never replayed (see
`threadlog.store.embedded.deadjournals`).
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import logging
import os
import secrets
import stat
from typing import TYPE_CHECKING

from threadlog.errors import InsecureHome, StorageError

if TYPE_CHECKING:
    from threadlog.store._fileops import FileOps

__all__ = [
    "SECRET_BYTES",
    "check_dir",
    "check_fd",
    "journal_header",
    "load_secret",
    "restrict_file",
]

log = logging.getLogger("threadlog.store")

SECRET_BYTES = 32
_FOREIGN_WRITE = stat.S_IWGRP | stat.S_IWOTH
_FOREIGN_ANY = stat.S_IRWXG | stat.S_IRWXO
_HEADER_MAGIC = b"#threadlog-journal 1 "


def _check_stat(st: os.stat_result, path: str, what: str, kind: str) -> bool:
    """Refuse a foreign or foreign-writable entry; True if it is ours but too open."""
    euid = os.geteuid()
    if st.st_uid != euid:
        raise InsecureHome(
            f"{what} {path} is owned by uid {st.st_uid}, not by you (uid {euid}); refusing "
            f"to use it. If it is yours, run: chown -R {euid} {path}"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & _FOREIGN_WRITE:
        fix = "chmod 700" if kind == "dir" else "chmod 600"
        raise InsecureHome(
            f"{what} {path} is writable by other users (mode {mode:04o}); refusing to use "
            f"it. Check its contents, then run: {fix} {path}"
        )
    return bool(mode & _FOREIGN_ANY)


def check_dir(path: str, what: str = "the folder") -> bool:
    """Check a folder of the store (see the module docstring); False if it does not exist.

    Raises `InsecureHome` for a folder owned by someone else or writable by others, and
    `StorageError` for something that is not a folder.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StorageError(f"cannot check {what} {path}: {exc}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise StorageError(f"{what} {path} is not a folder; move it away and retry")
    if _check_stat(st, path, what, "dir"):
        mode = stat.S_IMODE(st.st_mode)
        log.warning(
            "%s %s was readable by other users (mode %04o); restricted it to 0700",
            what,
            path,
            mode,
        )
        os.chmod(path, 0o700)
    return True


def check_fd(fd: int, path: str, what: str = "the file") -> None:
    """Check an open file of the store: a regular file, ours, not writable by others (else
    `InsecureHome`); one readable by others is restricted to 0600 (with a warning)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise InsecureHome(f"{what} {path} is not a regular file; refusing to use it")
    if _check_stat(st, path, what, "file"):
        log.warning(
            "%s %s was readable by other users (mode %04o); restricted it to 0600",
            what,
            path,
            stat.S_IMODE(st.st_mode),
        )
        os.fchmod(fd, 0o600)


def restrict_file(path: str, what: str = "the file") -> None:
    """`check_fd` for a path, if the file exists (for files that SQLite opens itself)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StorageError(f"cannot check {what} {path}: {exc}") from exc
    try:
        check_fd(fd, path, what)
    finally:
        os.close(fd)


def load_secret(home: str, fops: FileOps) -> tuple[bytes, int]:
    """The home's secret, created (0600, atomically and durably) if missing, and when it was
    made (its ``st_ctime_ns``: journals without a header older than that are an earlier
    version's). A secret of the wrong size (damaged) is replaced, with an error logged: the
    journals keyed by the old one are then refused, never replayed.

    Creation is serialized by an exclusive ``flock`` on the home folder: two stores opening
    a new home at once must end up with one secret, or the journals one of them keys with a
    secret that lost the race would be refused (and their records lost)."""
    path = os.path.join(home, "secret")
    existing = _read_secret(path)
    if existing is not None:
        return existing
    lock = os.open(home, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        existing = _read_secret(path)  # another store made it while we waited
        if existing is not None:
            return existing
        secret = secrets.token_bytes(SECRET_BYTES)
        try:
            fops.write_atomic(path, secret)
            since = os.stat(path).st_ctime_ns
        except OSError as exc:
            raise StorageError(f"cannot create the home's secret {path}: {exc}") from exc
        return secret, since
    finally:
        os.close(lock)


def _read_secret(path: str) -> tuple[bytes, int] | None:
    """The secret at ``path`` and its ``st_ctime_ns``; None if missing or damaged."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"cannot read the home's secret {path}: {exc}") from exc
    try:
        check_fd(fd, path, "the home's secret")
        data = os.read(fd, SECRET_BYTES + 1)
        since = os.fstat(fd).st_ctime_ns
    finally:
        os.close(fd)
    if len(data) == SECRET_BYTES:
        return data, since
    log.error("the home's secret %s is damaged (%d bytes); replacing it", path, len(data))
    return None


def journal_header(secret: bytes, name: str) -> bytes:
    """The first line of the journal ``name`` (its file name): a MAC of the name under the
    home's secret. It is not a record (a reader of records takes it for damage)."""
    mac = hmac.new(secret, b"threadlog journal\0" + name.encode(), hashlib.sha256).hexdigest()
    return _HEADER_MAGIC + mac.encode() + b"\n"
