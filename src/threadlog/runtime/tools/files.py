"""The file tools: ``read_file``, ``list_dir``, ``write_file`` and ``append_file``.

Each works on the directory fds of the confinement walk (`threadlog.runtime.tools._confine`),
in a worker thread (the walk and the I/O block), never on a path string:

* ``read_file`` opens the last component with ``O_NOFOLLOW | O_NONBLOCK`` and reads only a
  regular file (opening a FIFO cannot block), decoding UTF-8 with replacement.
* ``list_dir`` lists the held directory (``fdopendir``), directories ending with ``/``.
* ``write_file`` replaces the file durably: a temporary file beside it (a unique name per
  write, so racing writes of one path never share one), ``fsync``, ``renameat`` within the held
  directory (which never follows a symlink at the name), ``fsync`` of the directory.
* ``append_file`` appends and ``fsync``s.

Both writers are ``non_idempotent`` (000 §17.5): run again blindly after a crash, a write
would replace a human's edit made since, and an append appends twice. Each records the file's
pre-image and intended content before it runs, and its reconcile hook settles a crash from the
file itself (`threadlog.runtime.tools._fileintent`).

Both writers create missing directories (each made durable), and refuse a file with other hard
links (it may be a file outside the workspace).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import stat
from typing import TYPE_CHECKING, Any

from threadlog.runtime.tools._confine import (
    _CLOEXEC,
    _DIR_OPEN,
    _NOFOLLOW,
    ToolError,
    _at,
    _Changed,
    _open_last,
    _refuse_hard_links,
)
from threadlog.runtime.tools._fileintent import append_intent, reconcile_file, write_intent
from threadlog.runtime.tools._tool import PATH_ARG, Tool
from threadlog.store._fileops import DEFAULT_FILEOPS, durable_fsync

if TYPE_CHECKING:
    from threadlog.runtime.tools._confine import ToolContext, _Target

__all__ = ["append_file", "list_dir", "read_file", "write_file"]


def _str_arg(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str):
        raise ToolError(f"argument {name!r} must be a string")
    return value


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


async def _read_file(ctx: ToolContext, args: dict[str, Any]) -> str:
    shown = args.get("path")

    def read(target: _Target) -> str:
        if target.name is None:
            raise ToolError(f"{shown} is a directory")
        try:
            fd = _open_last(target, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            raise ToolError(f"no such file: {shown}") from None
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                raise ToolError(f"{shown} is a directory")
            if not stat.S_ISREG(mode):
                raise ToolError(f"{shown} is not a regular file")
            return _read_all(fd).decode("utf-8", errors="replace")
        finally:
            os.close(fd)

    path = _str_arg(args, "path")
    return await asyncio.to_thread(_at, ctx, path, read)


async def _list_dir(ctx: ToolContext, args: dict[str, Any]) -> list[str]:
    shown = args.get("path") or "."

    def listing(target: _Target) -> list[str]:
        if target.name is None:
            fd = os.dup(target.dir_fd)
        else:
            try:
                fd = _open_last(target, _DIR_OPEN)
            except (FileNotFoundError, NotADirectoryError):
                raise ToolError(f"not a directory: {shown}") from None
        try:
            with os.scandir(fd) as entries:
                return sorted(e.name + ("/" if e.is_dir() else "") for e in entries)
        finally:
            os.close(fd)

    path = args.get("path") or "."
    return await asyncio.to_thread(_at, ctx, path, listing)


def _encode_text(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(f"text is not valid Unicode: {exc}") from None


async def _write_file(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    path = _str_arg(args, "path")
    data = _encode_text(_str_arg(args, "text"))
    shown = args["path"]

    def write(target: _Target) -> None:
        name = target.name
        if name is None:
            raise ToolError(f"{shown} is a directory")
        dir_fd = target.dir_fd
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISDIR(st.st_mode):
                raise ToolError(f"{shown} is a directory")
            _refuse_hard_links(st, shown)
        # a temp file beside the target (unique per write), fsync, rename within the held
        # directory (renameat never follows a symlink at the name), fsync the directory
        tmp = f".{name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666, dir_fd=dir_fd
        )
        try:
            try:
                DEFAULT_FILEOPS.write_all(fd, data)
                durable_fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        durable_fsync(dir_fd)

    await asyncio.to_thread(_at, ctx, path, write, create=True)
    return {"path": shown, "bytes": len(data)}


async def _append_file(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    path = _str_arg(args, "path")
    data = _encode_text(_str_arg(args, "text"))
    shown = args["path"]

    def append(target: _Target) -> None:
        if target.name is None:
            raise ToolError(f"{shown} is a directory")
        flags = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK
        created = False
        try:
            fd = _open_last(target, flags)
        except FileNotFoundError:
            try:
                fd = _open_last(target, flags | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                raise _Changed from None  # made meanwhile: look again
            created = True
        except IsADirectoryError:
            raise ToolError(f"{shown} is a directory") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ToolError(f"{shown} is not a regular file")
            _refuse_hard_links(st, shown)
            DEFAULT_FILEOPS.write_all(fd, data)
            durable_fsync(fd)
        finally:
            os.close(fd)
        if created:
            durable_fsync(target.dir_fd)  # the new file's entry

    await asyncio.to_thread(_at, ctx, path, append, create=True)
    return {"path": shown, "appended": len(data)}


read_file = Tool(
    "read_file",
    "Read a text file of the workspace.",
    {"type": "object", "properties": {"path": PATH_ARG}, "required": ["path"]},
    "read_only",
    _read_file,
)
list_dir = Tool(
    "list_dir",
    "List a directory of the workspace (directories end with /).",
    {"type": "object", "properties": {"path": PATH_ARG}},
    "read_only",
    _list_dir,
)
write_file = Tool(
    "write_file",
    "Write (replace) a text file of the workspace.",
    {
        "type": "object",
        "properties": {"path": PATH_ARG, "text": {"type": "string"}},
        "required": ["path", "text"],
    },
    "non_idempotent",
    _write_file,
    reconcile=reconcile_file,
    intent=write_intent,
)
append_file = Tool(
    "append_file",
    "Append text to a file of the workspace.",
    {
        "type": "object",
        "properties": {"path": PATH_ARG, "text": {"type": "string"}},
        "required": ["path", "text"],
    },
    "non_idempotent",
    _append_file,
    reconcile=reconcile_file,
    intent=append_intent,
)
