"""Confinement: the context a tool runs in, and the walk that keeps its paths inside it.

Tools run with a `ToolContext` that confines paths to the thread's working directory
(``cwd`` in the thread's config): a path that leads outside it, through ``..`` or a
symlink, is refused with `ToolError`.

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
fds from the walk (`_at` hands them a `_Target`): ``openat`` of the last component with
``O_NOFOLLOW`` (`_open_last`), ``renameat`` of the temporary file within the held directory,
``fdopendir``. If an entry changes between the look and the open (a symlink appears where a
directory was), the open fails and the walk starts again; it never proceeds on a stale answer.

Two limits remain, both needing write access to the workspace *and* to the place outside:
a directory the walk holds can be renamed out of the workspace while a tool works in it, and a
file with other hard links can be a file outside. The second is refused for ``write_file`` and
``append_file`` (`_refuse_hard_links`: a regular file with ``st_nlink > 1``); the first no path
check can prevent. `ToolContext.resolve` still returns a path (for callers that want one),
found by the same walk; using that string later is as racy as any path.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from threadlog._dataclass import dataclass
from threadlog.errors import UsageError
from threadlog.store._fileops import durable_fsync

if TYPE_CHECKING:
    from collections.abc import Callable

    from threadlog.store.protocol import Artifacts

__all__ = ["ToolContext", "ToolError"]

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
                durable_fsync(self.dir_fd)
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
    artifacts: Artifacts | None = None
    """Where the tool may store blobs too large for its result (``run_command``'s full
    output): the store's `Artifacts` capability, through which the runtime learns what the
    call stored and records it. None: the store has no such capability."""
    load_artifact: Callable[[str], Any] | None = None
    """Read access to the store's artifacts, for ``read_artifact``: the value the artifact
    with this sha256 holds, loaded through the Store port (`threadlog.runtime.large_values`);
    it raises `ToolError` for an artifact the store does not have. None: no store given."""
    on_progress: Callable[[str, float | None], None] | None = None
    """Where `progress` goes (the runtime publishes it to the session's subscribers)."""

    def progress(self, message: str, fraction: float | None = None) -> None:
        """Report how the call is getting on: "3 of 7 files", 0.4.

        Transient: subscribers that asked for progress get a ``tool_progress`` item (with the
        call id, the tool, ``message`` and ``fraction``); nothing is written to the log, so
        report as often as is useful. Callable from the tool's coroutine or from a worker
        thread it started. ``fraction`` is None (unknown) or between 0 and 1.
        """
        if not isinstance(message, str):
            raise UsageError("progress message must be text")
        if fraction is not None and (
            isinstance(fraction, bool)
            or not isinstance(fraction, int | float)
            or not 0 <= fraction <= 1
        ):
            raise UsageError(f"progress fraction must be None or between 0 and 1, not {fraction!r}")
        if self.on_progress is not None:
            self.on_progress(message, None if fraction is None else float(fraction))

    def resolve(self, path: str) -> Path:
        """``path`` (relative to ``cwd``, or absolute) resolved, or `ToolError` if it escapes.

        Found by the same fd walk the tools use (symlinks inside the workspace are followed,
        any that lead out are refused). The returned string is only a name: opening it later
        is open to the races the tools avoid by working on the walk's fds.
        """
        return _at(self, path, lambda target: target.path())


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


def _refuse_hard_links(st: os.stat_result, shown: object) -> None:
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise ToolError(
            f"{shown} has {st.st_nlink} hard links, so it may be a file outside the workspace: "
            "refusing to write through it (write a new file, or remove the other links)"
        )
