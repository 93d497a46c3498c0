"""What a tool declares (`Tool`), and the tools a runtime offers by name (`ToolRegistry`).

A `Tool` declares its **side-effect class** — ``read_only``, ``idempotent`` or
``non_idempotent`` — because recovery depends on it: a read-only or idempotent call whose
outcome is unknown may be run again; a non-idempotent one never is without an idempotency-key
check (``reconcile``) or a human decision. Its ``run`` is a coroutine given the call's
`ToolContext` and arguments; what it returns is the result, and what it raises (a `ToolError`
or anything else) is an error *result* (``ok: false``), never a crash of the turn.

A tool whose effect can be read back from the world (a file) may also declare an ``intent``
hook: it runs before the call's start intent is written, and what it returns (for the file
tools: the file's pre-image and the intended content, by hash and size) is recorded in
``tool_call.started``. After a crash, ``reconcile`` is handed that record (`Reconciling`) and
can prove the outcome: the intended content → done; the pre-image → safe to retry; anything
else → unknown, a human decides (000 §17.5).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import field
from typing import TYPE_CHECKING, Any, cast

from threadlog._dataclass import dataclass
from threadlog.errors import UsageError
from threadlog.runtime.tools._confine import ToolContext

if TYPE_CHECKING:
    from threadlog.model.events import SideEffect

__all__ = [
    "PATH_ARG",
    "IntentFn",
    "Reconcile",
    "Reconciling",
    "Tool",
    "ToolFn",
    "ToolRegistry",
    "ask_reconcile",
]

PATH_ARG = {"type": "string", "description": "A path relative to the workspace."}
"""JSON Schema of a built-in tool's path argument."""

ToolFn = Callable[[ToolContext, dict[str, Any]], Coroutine[Any, Any, Any]]

IntentFn = Callable[[ToolContext, dict[str, Any]], Awaitable[dict[str, Any] | None]]
"""``intent(ctx, args)``: what to record before the tool runs (JSON data), or None."""


@dataclass(frozen=True, slots=True)
class Reconciling:
    """What a reconcile hook that takes a second argument is told about the call."""

    ctx: ToolContext
    """The call's context as it ran (its working directory confines any path it reads)."""
    args: dict[str, Any]
    """The call's arguments."""
    intent: dict[str, Any] | None
    """What the tool's ``intent`` hook recorded in the call's last ``tool_call.started``
    (None: no hook, or a start written before intents were recorded)."""


Reconcile = (
    Callable[[str], Awaitable[bool | None]] | Callable[[str, Reconciling], Awaitable[bool | None]]
)
"""``reconcile(key)`` or ``reconcile(key, call)``: True if the effect happened, False if it
certainly did not (safe to run again), None if the hook cannot tell."""


def _takes_call(hook: Callable[..., Any]) -> bool:
    """Whether a reconcile hook accepts the `Reconciling` argument (hooks written for the
    one-argument form keep working)."""
    try:
        inspect.signature(hook).bind("key", None)
    except TypeError:
        return False
    except ValueError:  # no signature to look at (some builtins): the original form
        return False
    return True


async def ask_reconcile(hook: Reconcile, key: str, call: Reconciling) -> bool | None:
    """Call a reconcile hook in whichever form it was written."""
    if _takes_call(hook):
        two = cast("Callable[[str, Reconciling], Awaitable[bool | None]]", hook)
        return await two(key, call)
    one = cast("Callable[[str], Awaitable[bool | None]]", hook)
    return await one(key)


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
    reconcile: Reconcile | None = None
    """Ask the downstream system whether the effect with this key happened (True/False), or
    None if it cannot tell. Used on recovery for non-idempotent calls of unknown outcome.
    A hook taking a second argument also gets the call (`Reconciling`: context, arguments,
    recorded intent)."""
    intent: IntentFn | None = None
    """Run before ``tool_call.started`` is written; its result is recorded there (and handed
    to ``reconcile``). If it fails, the call finishes with the error and the tool never runs:
    a call whose intent could not be recorded could not be reconciled."""

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
