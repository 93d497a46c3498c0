"""The conversation-tree and memory commands of a session: branch, label, remember, forget.

Mixed into `threadlog.runtime.session.Session` (like `threadlog.runtime.plans.PlanCommands`)
so the session module stays small; the methods reach the session through
`threadlog.runtime.plans.PlanHost`, the protocol of what such commands need (the thread, its
state and context, the append pipeline).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from threadlog._clock import new_id, rfc3339, wall_ns
from threadlog.errors import UsageError
from threadlog.model.events import BranchSummarized, LabelSet, LeafMoved, MemoryRevoked
from threadlog.model.memory import memory_written

if TYPE_CHECKING:
    from threadlog.model.envelope import Record
    from threadlog.runtime.plans import PlanHost

__all__ = ["TreeCommands"]


class TreeCommands:
    """``branch``, ``label``, ``remember`` and ``forget`` (see the module docstring)."""

    async def branch(self: PlanHost, entry: str, *, summary: str | None = None) -> Record:
        """Continue the conversation from an earlier entry; the current branch stays in the log.

        Records ``leaf.moved`` (and, with ``summary``, a ``branch.summarized`` entry on the new
        branch, so the model knows what the abandoned branch tried).
        """
        self._check_open()
        if self.state.active_turn is not None:
            raise UsageError("branch between turns, not while a turn runs")
        if entry not in self.context.nodes:
            raise UsageError(f"no entry {entry!r} in thread {self.thread_id}")
        left = self.state.leaf
        record = await self.append(LeafMoved(to=entry))
        if summary is not None and left is not None:
            record = await self.append(BranchSummarized(from_entry=left, summary=summary))
        return record

    async def label(self: PlanHost, entry: str, label: str | None) -> Record:
        """Name an entry (None removes the label)."""
        self._check_open()
        if entry not in self.context.nodes:
            raise UsageError(f"no entry {entry!r} in thread {self.thread_id}")
        return await self.append(LabelSet(entry=entry, label=label))

    async def remember(
        self: PlanHost,
        fact: str,
        *,
        scope: str = "principal",
        key: str | None = None,
        expires_at: str | None = None,
        source_event: str | None = None,
    ) -> Record:
        """Write a long-term memory, explicitly (nothing else ever does).

        ``source_event`` is the record the fact comes from (default: the active leaf).
        """
        self._check_open()
        return await self.append(
            memory_written(
                fact,
                scope=scope,
                key=key,
                expires_at=expires_at,
                source_event=source_event or self.state.leaf or self.state.last_id,
                config=self.state.config,
                memory_id=new_id(),
                written_at=rfc3339(wall_ns()),
            )
        )

    async def forget(self: PlanHost, memory_id: str, *, reason: str | None = None) -> Record:
        """Revoke a memory written in this thread."""
        self._check_open()
        return await self.append(MemoryRevoked(memory_id=memory_id, reason=reason))
