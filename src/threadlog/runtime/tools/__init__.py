"""Tools: what a tool declares, the context it runs in, and the built-in tools.

A `Tool` declares its **side-effect class** — ``read_only``, ``idempotent`` or
``non_idempotent`` — because recovery depends on it: a read-only or idempotent call whose
outcome is unknown may be run again; a non-idempotent one never is without an idempotency-key
check (``reconcile``) or a human decision.

Tools run with a `ToolContext` that confines paths to the thread's working directory
(``cwd`` in the thread's config): a path that leads outside it, through ``..`` or a
symlink, is refused with `ToolError`. A tool's exception is a *result* (``ok: false``), never a
crash of the turn.

The package, by job:

* ``_tool``: `Tool` and `ToolRegistry`.
* ``_confine``: `ToolContext`, `ToolError`, and the race-free walk of directory fds that every
  path goes through (its docstring tells how, and what it cannot prevent).
* ``files``: ``read_file``, ``list_dir``, ``write_file``, ``append_file``.
* ``command``: ``run_command`` (process groups, the durable run record, cancellation).
* ``artifacts``: ``read_artifact`` (pages through a value cut to fit the model's context).

Everything public is imported from here: ``from threadlog.runtime.tools import Tool``.
"""

from __future__ import annotations

from threadlog.runtime.tools._confine import ToolContext, ToolError
from threadlog.runtime.tools._tool import Tool, ToolRegistry
from threadlog.runtime.tools._tool import ToolFn as ToolFn  # the type of `Tool.run`
from threadlog.runtime.tools.artifacts import read_artifact
from threadlog.runtime.tools.command import run_command
from threadlog.runtime.tools.files import append_file, list_dir, read_file, write_file

__all__ = [
    "BUILTIN_TOOLS",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "append_file",
    "list_dir",
    "read_artifact",
    "read_file",
    "run_command",
    "write_file",
]

BUILTIN_TOOLS: tuple[Tool, ...] = (
    read_file,
    list_dir,
    write_file,
    append_file,
    run_command,
    read_artifact,
)
