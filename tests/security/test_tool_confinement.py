"""The file tools stay inside the workspace even when the workspace changes under them.

Every test works in ``tmp_path / "ws"`` with a sibling ``tmp_path / "outside"`` holding a
secret that no tool may read, change, or add to. Besides the plain escapes (a symlink out, a
symlinked directory on the way, a hard link to an outside file), a thread flips a directory of
the workspace between a real directory and a symlink to ``outside`` while the tools work
through it: whatever the interleaving, nothing outside is ever written or read.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import stat
import sys
import threading
from typing import TYPE_CHECKING, Any

import pytest

from threadlog.runtime.tools import (
    Tool,
    ToolContext,
    ToolError,
    append_file,
    list_dir,
    read_file,
    run_command,
    write_file,
)
from threadlog.store import _fileops

if TYPE_CHECKING:
    from pathlib import Path

SECRET = "top secret"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "f.txt").write_text(SECRET)
    return path


@pytest.fixture
def ctx(ws: Path) -> ToolContext:
    return ToolContext("thread", "call", 1, "key", ws)


def call(tool: Tool, ctx: ToolContext, args: dict[str, Any]) -> Any:
    return asyncio.run(tool.run(ctx, args))


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every entry under ``root`` with its content (None for directories)."""
    return {
        str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
        for p in sorted(root.rglob("*"))
    }


# -- plain escapes ---------------------------------------------------------------------------

ARGS = {
    "read_file": {},
    "list_dir": {},
    "write_file": {"text": "pwned"},
    "append_file": {"text": "pwned"},
}


@pytest.mark.parametrize(
    "tool", [read_file, list_dir, write_file, append_file], ids=lambda t: t.name
)
@pytest.mark.parametrize("path", ["link", "linkdir/f.txt", "linkdir", "real/../linkdir/f.txt"])
def test_a_symlink_out_is_refused(
    ctx: ToolContext, ws: Path, outside: Path, tool: Tool, path: str
) -> None:
    (ws / "real").mkdir()
    (ws / "link").symlink_to(outside / "f.txt")
    (ws / "linkdir").symlink_to(outside)  # a symlinked intermediate directory
    before = snapshot(outside)
    with pytest.raises(ToolError, match="outside the workspace"):
        call(tool, ctx, {"path": path, **ARGS[tool.name]})
    assert snapshot(outside) == before


@pytest.mark.parametrize("tool", [write_file, append_file], ids=lambda t: t.name)
def test_a_hard_link_to_an_outside_file_is_refused(
    ctx: ToolContext, ws: Path, outside: Path, tool: Tool
) -> None:
    os.link(outside / "f.txt", ws / "hard.txt")
    with pytest.raises(ToolError, match="hard links"):
        call(tool, ctx, {"path": "hard.txt", "text": "pwned"})
    assert (outside / "f.txt").read_text() == SECRET
    assert (ws / "hard.txt").read_text() == SECRET  # still the link, untouched


def test_reading_a_fifo_is_refused_instead_of_hanging(ctx: ToolContext, ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    done = threading.Event()

    def unblock() -> None:  # a bound for a broken build: a blocked reader gets EOF
        if not done.wait(10):
            with open(ws / "pipe", "wb"):
                pass

    helper = threading.Thread(target=unblock, daemon=True)
    helper.start()
    try:
        with pytest.raises(ToolError, match="not a regular file"):
            call(read_file, ctx, {"path": "pipe"})
    finally:
        done.set()


# -- durability ------------------------------------------------------------------------------


def fsynced_dirs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the inode of every directory the durable fsync (`store._fileops`) syncs."""
    seen: list[int] = []
    real = _fileops._SYNC

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            seen.append(st.st_ino)
        real(fd)

    monkeypatch.setattr(_fileops, "_SYNC", fsync)
    return seen


def test_write_file_makes_the_directory_entry_durable(
    ctx: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "sub").mkdir()
    seen = fsynced_dirs(monkeypatch)
    call(write_file, ctx, {"path": "sub/f.txt", "text": "x"})
    assert (ws / "sub").stat().st_ino in seen  # the rename is durable


def test_created_directories_are_durable(
    ctx: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = fsynced_dirs(monkeypatch)
    call(write_file, ctx, {"path": "a/b/f.txt", "text": "x"})
    # each new entry is durable in its parent: a in ws, b in a, f.txt in b
    for path in (ws, ws / "a", ws / "a" / "b"):
        assert path.stat().st_ino in seen, path
    seen.clear()
    call(append_file, ctx, {"path": "c/log.txt", "text": "x"})
    for path in (ws, ws / "c"):
        assert path.stat().st_ino in seen, path


# -- races -----------------------------------------------------------------------------------

_RENAME_EXCHANGE = 2


def _exchanger() -> Any:
    """renameat2(..., RENAME_EXCHANGE): swap two names atomically (Linux >= 3.15)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fn = libc.renameat2
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    at_fdcwd = -100

    def exchange(a: str, b: str) -> None:
        if fn(at_fdcwd, a.encode(), at_fdcwd, b.encode(), _RENAME_EXCHANGE) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    return exchange


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 is Linux-only")
def test_flipping_a_directory_to_a_symlink_never_lets_a_tool_out(
    ctx: ToolContext, ws: Path, outside: Path
) -> None:
    """``ws/d`` is swapped, atomically and without pause, between a real directory and a
    symlink to ``outside`` while the tools write, append, read, list and run commands
    through it. Each call either works inside the real directory or is refused."""
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("inside")
    (ws / "d" / "mark-inside").write_text("")
    (ws / "swap").symlink_to(outside)
    exchange = _exchanger()
    before = snapshot(outside)
    stop = threading.Event()
    flips = 0

    def flipper() -> None:
        nonlocal flips
        while not stop.is_set():
            exchange(str(ws / "d"), str(ws / "swap"))
            flips += 1

    listings: list[list[str]] = []

    async def work() -> list[str]:
        reads = []
        for i in range(150):
            for tool, args in (
                (write_file, {"path": "d/f.txt", "text": "inside"}),
                (write_file, {"path": "d/new.txt", "text": f"w{i}"}),
                (append_file, {"path": "d/log.txt", "text": f"a{i}\n"}),
                (read_file, {"path": "d/f.txt"}),
                (list_dir, {"path": "d"}),
            ):
                try:
                    result = await tool.run(ctx, args)
                except (ToolError, OSError):
                    continue  # refused, or failed: fine, as long as nothing got out
                if tool is read_file:
                    reads.append(result)
                if tool is list_dir:
                    listings.append(result)
            if i % 10 == 0:
                try:
                    await run_command.run(ctx, {"command": ["touch", "ran"], "cwd": "d"})
                except (ToolError, OSError):
                    pass
        return reads

    thread = threading.Thread(target=flipper)
    thread.start()
    try:
        reads = asyncio.run(work())
    finally:
        stop.set()
        thread.join()
    assert flips > 100, "the flipper never ran while the tools worked"
    assert snapshot(outside) == before
    assert SECRET not in reads and reads  # some reads got through, none from outside
    assert listings and all("mark-inside" in listing for listing in listings)
