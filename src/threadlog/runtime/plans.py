"""The plan API of a session: the current plan, and new versions linked to their cause.

A thread's plan is versioned in the log (`threadlog.model.plans`); `PlanCommands` is mixed
into `threadlog.runtime.session.Session` so that a session offers ``session.plan`` and
``await session.set_plan(...)`` without the session module growing (the methods reach the
session through `PlanHost`, a protocol of what they need).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from threadlog.errors import UsageError
from threadlog.model import codec
from threadlog.model.events import PlanVersioned

if TYPE_CHECKING:
    from threadlog.model.context import Context
    from threadlog.model.envelope import Record
    from threadlog.model.events import Event
    from threadlog.model.state import ThreadState

__all__ = ["PlanCommands", "PlanHost"]


class PlanHost(Protocol):
    """What the plan commands need of a session."""

    @property
    def thread_id(self) -> str:
        """The thread."""
        ...

    @property
    def state(self) -> ThreadState:
        """The thread's state: the current plan and the tool calls."""
        ...

    @property
    def context(self) -> Context:
        """Every record of the thread, by id (to check ``caused_by``)."""
        ...

    async def append(
        self, event: Event, *, durable: bool | None = None, id: str | None = None
    ) -> Record:
        """Append through the session's pipeline."""
        ...

    def _check_open(self) -> None:
        """Raise `UsageError` once the session is closing."""
        ...


class PlanCommands:
    """``session.plan`` and ``session.set_plan`` (see the module docstring)."""

    @property
    def plan(self: PlanHost) -> Any:
        """The current plan (None before the first version); its number is
        ``state.plan_version`` and what produced it ``state.plan_source``."""
        return self.state.plan

    async def set_plan(
        self: PlanHost,
        plan: Any,
        *,
        reason: str | None = None,
        by: str = "user",
        caused_by: str | None = None,
        call_id: str | None = None,
        id: str | None = None,
    ) -> Record:
        """Record the next version of the thread's plan (a ``plan.versioned``), at any time.

        Args:
            plan: any JSON value (a list of steps, a task graph, text); not None.
            reason: why; for a re-plan, what made the previous version wrong.
            by: who sets it.
            caused_by: the id of the record of this thread that produced this version: the
                approval of a proposed plan, or the entry that prompted the re-plan.
            call_id: the tool call whose result this version is.
            id: an explicit event id (makes the append idempotent).

        The model sees the current plan in every request from then on. Raises `UsageError`
        for a plan that is not JSON, or a ``caused_by`` / ``call_id`` the thread does not have.
        """
        self._check_open()
        if plan is None:
            raise UsageError("a plan is a JSON value, not None")
        codec.canonical(plan)  # UsageError for what is not JSON
        if caused_by is not None and caused_by not in self.context.nodes:
            raise UsageError(f"caused_by: no record {caused_by!r} in thread {self.thread_id}")
        if call_id is not None and call_id not in self.state.tool_calls:
            raise UsageError(f"call_id: no tool call {call_id!r} in thread {self.thread_id}")
        return await self.append(
            PlanVersioned(
                version=self.state.plan_version + 1,
                plan=plan,
                reason=reason,
                by=by,
                caused_by=caused_by,
                call_id=call_id,
            ),
            id=id,
        )
