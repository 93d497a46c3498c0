"""What ``write_file`` and ``append_file`` record before they act, and how a crash is settled.

Both tools are ``non_idempotent`` (000 §17.5 names file writes beside payments): run again
after a crash, a write would replace whatever a human put in the file since, and an append
appends twice. So before the start intent is written, their ``intent`` hook reads the file
(by the same fd walk as the tools, `threadlog.runtime.tools._confine`) and records:

* ``before``: the file's pre-image, ``{"sha256", "size"}``, or ``"absent"``;
* ``after``: what the file holds once the call has had its effect — the written text
  (``write_file``), or the pre-image followed by the appended text (``append_file``).

After a crash between that intent and the result, `reconcile_file` looks at the file again:
it holds ``after`` → the effect happened (done, not repeated); it holds ``before`` → it did
not (safe to run again); anything else (a human's edit, a half-written append) → None, a
human decides, and nothing overwrites the file meanwhile. Checked in that order, so a write
that leaves the file as it was counts as done.

The check reads the file's current content, not a cached name: a file swapped for a symlink
is not followed (the walk refuses one that leads outside), and a directory or a FIFO at the
path is neither image.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from typing import TYPE_CHECKING, Any

from threadlog.runtime.tools._confine import ToolError, _at, _open_last

if TYPE_CHECKING:
    from threadlog.runtime.tools._confine import ToolContext, _Target
    from threadlog.runtime.tools._tool import Reconciling

__all__ = ["append_intent", "reconcile_file", "write_intent"]

ABSENT = "absent"
"""The image of a path that names no file."""


def _image(target: _Target, shown: object) -> tuple[Any, Any]:
    """``(image, hasher)`` of the target's file: ``({"sha256", "size"}, sha256 so far)``, or
    ``("absent", None)``. Refuses a directory or anything but a regular file."""
    if target.name is None:
        raise ToolError(f"{shown} is a directory")
    try:
        fd = _open_last(target, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return ABSENT, None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ToolError(f"{shown} is a directory")
        if not stat.S_ISREG(mode):
            raise ToolError(f"{shown} is not a regular file")
        hasher = hashlib.sha256()
        size = 0
        while chunk := os.read(fd, 1 << 20):
            hasher.update(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    return {"sha256": hasher.hexdigest(), "size": size}, hasher


def _args(args: dict[str, Any]) -> tuple[str, bytes]:
    path, text = args.get("path"), args.get("text")
    if not isinstance(path, str):
        raise ToolError("argument 'path' must be a string")
    if not isinstance(text, str):
        raise ToolError("argument 'text' must be a string")
    try:
        return path, text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(f"text is not valid Unicode: {exc}") from None


def _intent(ctx: ToolContext, args: dict[str, Any], *, append: bool) -> dict[str, Any]:
    path, data = _args(args)
    before, hasher = _at(ctx, path, lambda target: _image(target, path))
    if append and hasher is not None:
        hasher.update(data)
        after = {"sha256": hasher.hexdigest(), "size": before["size"] + len(data)}
    else:
        after = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    return {"path": path, "before": before, "after": after}


async def write_intent(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """``write_file``'s intent: the pre-image, and the text as the file's whole content."""
    return await asyncio.to_thread(_intent, ctx, args, append=False)


async def append_intent(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """``append_file``'s intent: the pre-image, and the pre-image followed by the text."""
    return await asyncio.to_thread(_intent, ctx, args, append=True)


async def reconcile_file(key: str, call: Reconciling) -> bool | None:
    """Whether a file tool's effect happened, proven by the file (see the module docstring)."""
    intent = call.intent
    if not isinstance(intent, dict) or not isinstance(intent.get("path"), str):
        return None  # nothing recorded to compare with: a human decides
    path = intent["path"]

    def look() -> Any:
        try:
            return _at(call.ctx, path, lambda target: _image(target, path)[0])
        except ToolError:
            return None  # a directory, a FIFO, a path now outside: neither image

    now = await asyncio.to_thread(look)
    if now is None:
        return None
    if now == intent.get("after"):
        return True
    if now == intent.get("before"):
        return False
    return None
