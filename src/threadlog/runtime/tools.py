"""Tools: what a tool declares, the context it runs in, and the built-in tools.

A `Tool` declares its **side-effect class** — ``read_only``, ``idempotent`` or
``non_idempotent`` — because recovery depends on it: a read-only or idempotent call whose
outcome is unknown may be run again; a non-idempotent one never is without an idempotency-key
check (``reconcile``) or a human decision.

Tools run with a `ToolContext` that confines paths to the thread's working directory
(``cwd`` in the thread's config): a path that leads outside it, through ``..`` or a
symlink, is refused with `ToolError`. A tool's exception is a *result* (``ok: false``), never a
crash of the turn.

Confinement without races
-------------------------
Resolving a path to a string and then opening that string is a race: a directory swapped for a
symlink in between sends the open outside the workspace. So the file tools never open a path
string. `_walk` starts from a directory fd of the workspace root and takes one component at a
time, relative to the fd of the directory before it, with ``O_NOFOLLOW``: every directory it
enters is a real directory entry of a directory it already holds. Symlinks are not followed by
the kernel but read (``readlink``) and spliced into the components still to walk, so a link
that stays inside the workspace works as before and one that leads out is refused; ``..`` pops
the walk's own stack of fds, never the kernel's idea of a parent. The tools then work on the
fds from the walk: ``openat`` of the last component with ``O_NOFOLLOW``, ``renameat`` of the
temporary file within the held directory, ``fdopendir``. If an entry changes between the look
and the open (a symlink appears where a directory was), the open fails and the walk starts
again; it never proceeds on a stale answer.

Two limits remain, both needing write access to the workspace *and* to the place outside:
a directory the walk holds can be renamed out of the workspace while a tool works in it, and a
file with other hard links can be a file outside. The second is refused for ``write_file`` and
``append_file`` (a regular file with ``st_nlink > 1``); the first no path check can prevent.
`ToolContext.resolve` still returns a path (for callers that want one), found by the same walk;
using that string later is as racy as any path.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
import secrets
import stat
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from threadlog.errors import UsageError
from threadlog.runtime import procs
from threadlog.store._fileops import DEFAULT_FILEOPS

if TYPE_CHECKING:
    from threadlog.model.events import SideEffect

__all__ = [
    "BUILTIN_TOOLS",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "append_file",
    "list_dir",
    "read_file",
    "run_command",
    "write_file",
]

log = logging.getLogger("threadlog.runtime")

_T = TypeVar("_T")


class ToolError(Exception):
    """A tool refused or failed; its message becomes the call's error result."""


_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR_OPEN = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC
_MAX_SYMLINKS = 40
"""Symlinks one walk may follow (Linux's own limit), so that a loop is an error, not a hang."""
_MAX_RETRIES = 16
"""Walks of one path that may be restarted because an entry changed under them."""


class _Changed(Exception):
    """An entry changed between the walk's look and its open: walk again."""


@dataclass
class _Target:
    """Where a path leads inside the workspace, held by directory fds (see `_walk`).

    The path names ``name`` in the directory ``dirs[-1]`` + ``missing``: ``dirs`` are the
    directories opened from the root (``dirs[0]`` is the root itself), ``missing`` the
    components below the last of them that do not exist (yet). ``name`` is None when the path
    is the directory ``dirs[-1]`` itself.
    """

    root: str
    dirs: list[tuple[str, int]]
    missing: list[str] = field(default_factory=list)
    name: str | None = None

    @property
    def dir_fd(self) -> int:
        return self.dirs[-1][1]

    def path(self) -> Path:
        parts = [n for n, _ in self.dirs[1:]] + self.missing
        return Path(self.root, *parts, *([self.name] if self.name is not None else []))

    def close(self) -> None:
        while self.dirs:
            os.close(self.dirs.pop()[1])

    def create_missing(self) -> None:
        """Create the missing directories, each in the held fd of its parent, and make each
        new entry durable (fsync of the parent)."""
        while self.missing:
            name = self.missing[0]
            try:
                os.mkdir(name, 0o777, dir_fd=self.dir_fd)
            except FileExistsError:
                pass  # made meanwhile (by us in an earlier walk, or anyone): open it as found
            else:
                os.fsync(self.dir_fd)
            try:
                fd = os.open(name, _DIR_OPEN, dir_fd=self.dir_fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                    raise _Changed from None
                raise
            self.dirs.append((name, fd))
            self.missing.pop(0)


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


@dataclass(frozen=True, slots=True)
class _Root:
    """The workspace: its path as configured and as resolved (absolute paths and absolute
    symlink targets are inside when they start with either)."""

    path: str
    prefixes: tuple[tuple[str, ...], ...]

    @classmethod
    def of(cls, cwd: Path) -> _Root:
        try:
            real = os.path.realpath(cwd, strict=True)
        except (OSError, RuntimeError) as exc:
            raise ToolError(f"the workspace {os.fspath(cwd)} cannot be opened: {exc}") from None
        given = os.path.abspath(cwd)
        prefixes = (tuple(_parts(real)), tuple(_parts(given)))
        return cls(real, tuple(dict.fromkeys(prefixes)))

    def below(self, absolute: str) -> list[str] | None:
        """The components of ``absolute`` below the root, or None if it is not below it."""
        parts = _parts(absolute)
        for prefix in self.prefixes:
            if tuple(parts[: len(prefix)]) == prefix:
                return parts[len(prefix) :]
        return None


def _walk(root: _Root, path: str) -> _Target:
    """Resolve ``path`` inside the workspace by fds, one component at a time (see the module
    docstring); raises `ToolError` if it leads outside, `_Changed` if it must be walked again."""
    outside = ToolError(f"path {path!r} is outside the workspace {root.path}")
    if path.startswith("/"):
        first = root.below(path)
        if first is None:
            raise outside
    else:
        first = path.split("/")
    try:
        root_fd = os.open(root.path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
    except OSError as exc:
        raise ToolError(f"the workspace {root.path} cannot be opened: {exc}") from None
    target = _Target(root.path, [("", root_fd)])
    try:
        pending = deque(first)
        links = 0
        while pending:
            comp = pending.popleft()
            if comp in ("", "."):
                continue
            if comp == "..":
                if target.missing:
                    target.missing.pop()
                elif len(target.dirs) > 1:
                    os.close(target.dirs.pop()[1])
                else:
                    raise outside
                continue
            if target.missing:
                target.missing.append(comp)  # below a missing directory: nothing to look at
                continue
            try:
                st = os.stat(comp, dir_fd=target.dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                target.missing.append(comp)
                continue
            if stat.S_ISLNK(st.st_mode):
                links += 1
                if links > _MAX_SYMLINKS:
                    raise ToolError(f"cannot resolve {path!r}: too many levels of symbolic links")
                try:
                    link = os.readlink(comp, dir_fd=target.dir_fd)
                except (FileNotFoundError, OSError) as exc:
                    if isinstance(exc, FileNotFoundError) or exc.errno == errno.EINVAL:
                        raise _Changed from None  # no longer a symlink
                    raise
                if link.startswith("/"):
                    below = root.below(link)
                    if below is None:
                        raise outside
                    while len(target.dirs) > 1:  # continue from the root
                        os.close(target.dirs.pop()[1])
                    pending.extendleft(reversed(below))
                else:
                    pending.extendleft(reversed(link.split("/")))
                continue
            if not pending:
                target.name = comp  # the last component: the tool opens it as it needs
                break
            if not stat.S_ISDIR(st.st_mode):
                raise ToolError(f"cannot resolve {path!r}: {comp!r} is not a directory")
            try:
                fd = os.open(comp, _DIR_OPEN, dir_fd=target.dir_fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                    raise _Changed from None  # swapped since the look
                raise
            target.dirs.append((comp, fd))
        if target.missing:
            target.name = target.missing.pop()
        return target
    except BaseException:
        target.close()
        raise


def _at(ctx: ToolContext, path: str, fn: Callable[[_Target], _T], *, create: bool = False) -> _T:
    """Walk ``path`` (see `_walk`) and run ``fn`` on the target; walk again if an entry changed
    under either (bounded: a path that keeps changing is refused rather than chased forever).
    With ``create``, missing directories are made first. The target's fds are closed after."""
    if not isinstance(path, str) or not path or "\x00" in path:
        raise ToolError(f"invalid path {path!r}")
    root = _Root.of(ctx.cwd)
    for _ in range(_MAX_RETRIES):
        try:
            target = _walk(root, path)
        except _Changed:
            continue
        except OSError as exc:  # an unreadable directory, a name too long
            raise ToolError(f"cannot resolve {path!r}: {exc.strerror or exc}") from None
        try:
            if create:
                target.create_missing()
            return fn(target)
        except _Changed:
            continue
        finally:
            target.close()
    raise ToolError(f"{path!r} kept changing while it was being opened; try again")


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a running tool knows about its call."""

    thread_id: str
    call_id: str
    attempt: int
    idempotency_key: str
    cwd: Path
    """The thread's working directory; every path a tool touches must be inside it."""
    runs_dir: str | None = None
    """Where ``run_command`` records the process groups it starts (`threadlog.runtime.procs`),
    so that a session resumed after the agent died ends the ones still running. The runtime
    sets it to a directory of the store's home; None: nothing is recorded."""

    def resolve(self, path: str) -> Path:
        """``path`` (relative to ``cwd``, or absolute) resolved, or `ToolError` if it escapes.

        Found by the same fd walk the tools use (symlinks inside the workspace are followed,
        any that lead out are refused). The returned string is only a name: opening it later
        is open to the races the tools avoid by working on the walk's fds.
        """
        return _at(self, path, lambda target: target.path())


ToolFn = Callable[[ToolContext, dict[str, Any]], Coroutine[Any, Any, Any]]


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool the model may call."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON Schema of the arguments object."""
    side_effect: SideEffect
    run: ToolFn
    timeout: float = 60.0
    """Seconds before the call is cancelled and finishes with an error."""
    idempotency_key: Callable[[ToolContext, dict[str, Any]], str] | None = None
    """Derive the key the downstream system deduplicates on (default: one per call id)."""
    reconcile: Callable[[str], Awaitable[bool | None]] | None = None
    """Ask the downstream system whether the effect with this key happened (True/False), or
    None if it cannot tell. Used on recovery for non-idempotent calls of unknown outcome."""

    def spec(self) -> dict[str, Any]:
        """The tool as the model sees it."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


@dataclass
class ToolRegistry:
    """The tools a runtime offers, by name."""

    tools: dict[str, Tool] = field(default_factory=dict)

    @classmethod
    def of(cls, tools: Iterable[Tool]) -> ToolRegistry:
        registry = cls()
        for tool in tools:
            registry.add(tool)
        return registry

    def add(self, tool: Tool) -> None:
        if tool.name in self.tools:
            raise UsageError(f"a tool named {tool.name!r} is already registered")
        self.tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self.tools.get(name)

    def specs(self, active: Iterable[str] | None = None) -> list[dict[str, Any]]:
        names = (
            list(self.tools)
            if active is None
            else list(dict.fromkeys(n for n in active if n in self.tools))
        )
        return [self.tools[n].spec() for n in names]


def _str_arg(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str):
        raise ToolError(f"argument {name!r} must be a string")
    return value


def _open_last(target: _Target, flags: int, mode: int = 0o666) -> int:
    """``openat`` of the target's last component without following a symlink (one that
    appeared since the walk looked makes the walk start again)."""
    if target.missing or target.name is None:
        raise FileNotFoundError(errno.ENOENT, "no such file")
    try:
        return os.open(target.name, flags | _NOFOLLOW | _CLOEXEC, mode, dir_fd=target.dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _Changed from None
        raise


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


def _refuse_hard_links(st: os.stat_result, shown: object) -> None:
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise ToolError(
            f"{shown} has {st.st_nlink} hard links, so it may be a file outside the workspace: "
            "refusing to write through it (write a new file, or remove the other links)"
        )


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
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.fsync(dir_fd)

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
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            os.fsync(target.dir_fd)  # the new file's entry

    await asyncio.to_thread(_at, ctx, path, append, create=True)
    return {"path": shown, "appended": len(data)}


def _open_cwd(ctx: ToolContext, path: str) -> tuple[int, Path]:
    """A directory fd (and path) of the command's working directory, found by the walk."""

    def open_dir(target: _Target) -> tuple[int, Path]:
        if target.name is None:
            return os.dup(target.dir_fd), target.path()
        try:
            return _open_last(target, _DIR_OPEN), target.path()
        except (FileNotFoundError, NotADirectoryError):
            raise ToolError(f"not a directory: {path}") from None

    return _at(ctx, path, open_dir)


def _cwd_of(fd: int, path: Path) -> str:
    """The ``cwd`` to give the child for the directory held by ``fd``.

    ``/proc/self/fd/<fd>`` is a magic link: the child's ``chdir`` (made after the fork, while
    it still shares the parent's fds) lands in the very directory the walk opened, whatever
    was renamed or swapped since — an ``fchdir`` without a pre-exec hook. Without ``/proc``
    the resolved path is used, and a swap between the walk and the ``chdir`` could send the
    command elsewhere; the command is then confined only as much as any program it runs.
    """
    magic = f"/proc/self/fd/{fd}"
    return magic if os.path.isdir("/proc/self/fd") else os.fspath(path)


async def _undoable(call: Callable[[], _T], undo: Callable[[_T], None]) -> _T:
    """Run ``call`` in a thread; if the caller is cancelled meanwhile, ``undo`` its result.

    A call in a thread cannot be stopped half-way, only waited for; the undo happens in that
    thread (or here, if the result was there already), never in a loop callback that might
    not run once the caller's loop ends.
    """
    lock = threading.Lock()
    state: dict[str, Any] = {}

    def work() -> _T:
        result = call()
        with lock:
            if state.get("abandoned"):
                undo(result)
            else:
                state["result"] = result
        return result

    try:
        return await asyncio.to_thread(work)
    except asyncio.CancelledError:
        with lock:
            state["abandoned"] = True
            if "result" in state:
                undo(state["result"])
        raise


async def _run_command(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    command = args.get("command")
    if isinstance(command, str):
        argv = ["/bin/sh", "-c", command]
    elif isinstance(command, list) and command and all(isinstance(a, str) for a in command):
        argv = list(command)
    else:
        raise ToolError("argument 'command' must be a string or a list of strings")
    cwd = args.get("cwd") or "."
    if not isinstance(cwd, str) or "\x00" in cwd:
        raise ToolError(f"invalid path {cwd!r}")
    timeout = args.get("timeout", 30)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 600:
        raise ToolError("argument 'timeout' must be a number of seconds in (0, 600]")
    cwd_fd, cwd_path = await _undoable(
        functools.partial(_open_cwd, ctx, cwd), lambda opened: os.close(opened[0])
    )
    run: procs.Run | None = None
    spawn: asyncio.Future[asyncio.subprocess.Process] | None = None
    try:
        env = None
        if ctx.runs_dir is not None:
            # Recorded (durably) before the child exists: an agent killed at any point after
            # this leaves a record whose token finds the command's processes on resume.
            try:
                run = await _undoable(
                    functools.partial(
                        procs.begin, ctx.runs_dir, ctx.thread_id, ctx.call_id, ctx.attempt
                    ),
                    procs.finish,
                )
            except OSError as exc:
                raise ToolError(
                    f"cannot record the command before running it, so it did not run: {exc}"
                ) from None
            env = {**os.environ, procs.ENV_VAR: run.token}
        spawn = asyncio.ensure_future(
            asyncio.create_subprocess_exec(
                *argv,
                cwd=_cwd_of(cwd_fd, cwd_path),
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                preexec_fn=procs.die_with_parent(),
            )
        )
        handed_over = False
        try:
            proc = await asyncio.shield(spawn)
            handed_over = True
        except asyncio.CancelledError:
            # Cancelled while asyncio was still connecting the pipes: cancelling that step
            # kills only the leader and can hang waiting for it (CPython 3.11). Let the spawn
            # finish, then end the whole group like any cancelled command.
            with contextlib.suppress(Exception):
                started_proc = await spawn
                handed_over = True
                _kill_group(started_proc.pid)
                await started_proc.wait()
            raise
        finally:
            # the fd must outlive the fork (the child's chdir goes through it)
            if spawn.done():
                _after_spawn(cwd_fd, handed_over, spawn)
            else:
                spawn.add_done_callback(functools.partial(_after_spawn, cwd_fd, handed_over))
        try:
            if run is not None:
                try:
                    run = await asyncio.to_thread(procs.started, run, proc.pid)
                except OSError as exc:  # the token in the command's environment still finds it
                    log.warning("could not record process group %d: %s", proc.pid, exc)
            async with asyncio.timeout(timeout):
                out, err = await proc.communicate()
        except TimeoutError:
            _kill_group(proc.pid)
            await proc.wait()
            raise ToolError(f"command timed out after {timeout:g}s") from None
        except BaseException:
            # cancellation: end the whole process group, then reap it
            _kill_group(proc.pid)
            await proc.wait()
            raise
    finally:
        if spawn is None:
            os.close(cwd_fd)  # never got as far as the spawn
        if run is not None:
            procs.finish(run)
    limit = 64 * 1024
    return {
        "exit_code": proc.returncode,
        "stdout": out.decode("utf-8", "replace")[-limit:],
        "stderr": err.decode("utf-8", "replace")[-limit:],
    }


def _after_spawn(
    cwd_fd: int, handed_over: bool, spawn: asyncio.Future[asyncio.subprocess.Process]
) -> None:
    """Close the cwd fd once the spawn is over; a spawn that finished after its caller was
    cancelled twice (nobody waits for it any more) has its process group killed."""
    os.close(cwd_fd)
    if spawn.cancelled() or spawn.exception() is not None:
        return
    if not handed_over:
        _kill_group(spawn.result().pid)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, 9)
    except ProcessLookupError:
        pass


_PATH = {"type": "string", "description": "A path relative to the workspace."}

read_file = Tool(
    "read_file",
    "Read a text file of the workspace.",
    {"type": "object", "properties": {"path": _PATH}, "required": ["path"]},
    "read_only",
    _read_file,
)
list_dir = Tool(
    "list_dir",
    "List a directory of the workspace (directories end with /).",
    {"type": "object", "properties": {"path": _PATH}},
    "read_only",
    _list_dir,
)
write_file = Tool(
    "write_file",
    "Write (replace) a text file of the workspace.",
    {
        "type": "object",
        "properties": {"path": _PATH, "text": {"type": "string"}},
        "required": ["path", "text"],
    },
    "idempotent",
    _write_file,
)
append_file = Tool(
    "append_file",
    "Append text to a file of the workspace.",
    {
        "type": "object",
        "properties": {"path": _PATH, "text": {"type": "string"}},
        "required": ["path", "text"],
    },
    "non_idempotent",
    _append_file,
)
run_command = Tool(
    "run_command",
    "Run a command in the workspace (a shell string or an argv list).",
    {
        "type": "object",
        "properties": {
            "command": {
                "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
            },
            "cwd": _PATH,
            "timeout": {"type": "number"},
        },
        "required": ["command"],
    },
    "non_idempotent",
    _run_command,
    timeout=600,
)

BUILTIN_TOOLS: tuple[Tool, ...] = (read_file, list_dir, write_file, append_file, run_command)
