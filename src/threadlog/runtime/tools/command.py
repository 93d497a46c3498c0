"""The ``run_command`` tool: a command in the workspace, in its own process group.

The command runs with the directory the confinement walk found as its working directory
(through ``/proc/self/fd``, see `_cwd_of`), its own session and process group, stdin from
``/dev/null``, and (Linux) ``PR_SET_PDEATHSIG`` so that it dies with the agent. When the
context has a ``runs_dir``, the run is recorded durably *before* the child exists
(`threadlog.runtime.procs`), with a token in the child's environment, so that a session
resumed after the agent died finds and ends what it left running.

Every byte of the command's output is kept (`threadlog.runtime.tools._output`): small output
in the result, larger output streamed to a blob of the store's artifacts, the result holding
its head and tail and the blob's reference.

Cancellation and timeouts end the whole process group and reap it. The blocking steps run in a
worker thread through `_undoable`, which undoes their result (closes the fd, finishes the
record) if the caller was cancelled meanwhile. The spawn itself is shielded: cancelling it
while asyncio connects the pipes kills only the group's leader and can hang waiting for it
(CPython 3.11), so a cancelled spawn is let finish and its whole group ended (`_after_spawn`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
from typing import TYPE_CHECKING, Any, TypeVar

from threadlog.runtime import procs
from threadlog.runtime.tools._confine import _DIR_OPEN, ToolError, _at, _open_last
from threadlog.runtime.tools._output import collect
from threadlog.runtime.tools._tool import PATH_ARG, Tool

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from threadlog.runtime.tools._confine import ToolContext, _Target

__all__ = ["run_command"]

log = logging.getLogger("threadlog.runtime")

_T = TypeVar("_T")


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
                result = await collect(proc, ctx.artifacts)
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
    return result


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


run_command = Tool(
    "run_command",
    "Run a command in the workspace (a shell string or an argv list).",
    {
        "type": "object",
        "properties": {
            "command": {
                "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
            },
            "cwd": PATH_ARG,
            "timeout": {"type": "number"},
        },
        "required": ["command"],
    },
    "non_idempotent",
    _run_command,
    timeout=600,
)
