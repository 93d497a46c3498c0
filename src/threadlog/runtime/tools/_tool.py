"""What a tool declares (`Tool`), and the tools a runtime offers by name (`ToolRegistry`).

A `Tool` declares its **side-effect class** — ``read_only``, ``idempotent`` or
``non_idempotent`` — because recovery depends on it: a read-only or idempotent call whose
outcome is unknown may be run again; a non-idempotent one never is without an idempotency-key
check (``reconcile``) or a human decision. Its ``run`` is a coroutine given the call's
`ToolContext` and arguments; what it returns is the result, and what it raises (a `ToolError`
or anything else) is an error *result* (``ok: false``), never a crash of the turn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from threadlog.errors import UsageError
from threadlog.runtime.tools._confine import ToolContext

if TYPE_CHECKING:
    from threadlog.model.events import SideEffect

__all__ = ["PATH_ARG", "Tool", "ToolFn", "ToolRegistry"]

PATH_ARG = {"type": "string", "description": "A path relative to the workspace."}
"""JSON Schema of a built-in tool's path argument."""

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
