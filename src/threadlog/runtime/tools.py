"""Tools: what a tool declares, the context it runs in, and the built-in tools.

A `Tool` declares its **side-effect class** — ``read_only``, ``idempotent`` or
``non_idempotent`` — because recovery depends on it: a read-only or idempotent call whose
outcome is unknown may be run again; a non-idempotent one never is without an idempotency-key
check (``reconcile``) or a human decision.

Tools run with a `ToolContext` that confines paths to the thread's working directory
(``cwd`` in the thread's config): a path that resolves outside it, through ``..`` or a
symlink, is refused with `ToolError`. A tool's exception is a *result* (``ok: false``), never a
crash of the turn.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from threadlog.errors import UsageError

if TYPE_CHECKING:
    from pathlib import Path

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


class ToolError(Exception):
    """A tool refused or failed; its message becomes the call's error result."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a running tool knows about its call."""

    thread_id: str
    call_id: str
    attempt: int
    idempotency_key: str
    cwd: Path
    """The thread's working directory; every path a tool touches must be inside it."""

    def resolve(self, path: str) -> Path:
        """``path`` (relative to ``cwd``, or absolute) resolved, or `ToolError` if it escapes."""
        if not isinstance(path, str) or not path or "\x00" in path:
            raise ToolError(f"invalid path {path!r}")
        try:
            root = self.cwd.resolve()
            target = (root / path).resolve()
        except (RuntimeError, OSError) as exc:  # a symlink loop, an unreadable component
            raise ToolError(f"cannot resolve {path!r}: {exc}") from None
        if target != root and root not in target.parents:
            raise ToolError(f"path {path!r} is outside the workspace {root}")
        return target


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


async def _read_file(ctx: ToolContext, args: dict[str, Any]) -> str:
    path = ctx.resolve(_str_arg(args, "path"))
    try:
        return await asyncio.to_thread(path.read_text, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise ToolError(f"no such file: {args['path']}") from None
    except IsADirectoryError:
        raise ToolError(f"{args['path']} is a directory") from None


async def _list_dir(ctx: ToolContext, args: dict[str, Any]) -> list[str]:
    path = ctx.resolve(args.get("path") or ".")
    if not path.is_dir():
        raise ToolError(f"not a directory: {args.get('path') or '.'}")
    return sorted(e.name + ("/" if e.is_dir() else "") for e in os.scandir(path))


def _encode_text(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(f"text is not valid Unicode: {exc}") from None


async def _write_file(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    path = ctx.resolve(_str_arg(args, "path"))
    data = _encode_text(_str_arg(args, "text"))
    if path == ctx.cwd.resolve() or path.is_dir():
        raise ToolError(f"{args['path']} is a directory")

    def write() -> None:
        # temp file beside the target (unique per write), fsync, atomic rename
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        try:
            with open(tmp, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    await asyncio.to_thread(write)
    return {"path": args["path"], "bytes": len(data)}


async def _append_file(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    path = ctx.resolve(_str_arg(args, "path"))
    data = _encode_text(_str_arg(args, "text"))
    if path.is_dir():
        raise ToolError(f"{args['path']} is a directory")

    def append() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    await asyncio.to_thread(append)
    return {"path": args["path"], "appended": len(data)}


async def _run_command(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    command = args.get("command")
    if isinstance(command, str):
        argv = ["/bin/sh", "-c", command]
    elif isinstance(command, list) and command and all(isinstance(a, str) for a in command):
        argv = list(command)
    else:
        raise ToolError("argument 'command' must be a string or a list of strings")
    cwd = ctx.resolve(args.get("cwd") or ".")
    timeout = args.get("timeout", 30)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 600:
        raise ToolError("argument 'timeout' must be a number of seconds in (0, 600]")
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
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
    limit = 64 * 1024
    return {
        "exit_code": proc.returncode,
        "stdout": out.decode("utf-8", "replace")[-limit:],
        "stderr": err.decode("utf-8", "replace")[-limit:],
    }


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
