"""Long-term memory: which remembered facts a model call may see (pure).

Memory is written only by an explicit call (`Session.remember`, or a tool that calls it):
resume and compaction never create it. Each fact records its source event, scope (``thread``,
``principal``, ``project``), when it was written and when it expires. A model call sees
memory only if the thread's config has a ``memory_policy`` (``{"scopes": [...], "limit": N}``),
and then only facts that are live (not revoked, not expired), in a scope the policy names.
Facts carry an optional ``key``: for one key, a fact written in the current thread (this task
verified it) wins over any other, and otherwise the newest wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MemoryFact", "memory_message", "select_memories"]


@dataclass(frozen=True, slots=True)
class MemoryFact:
    memory_id: str
    thread_id: str
    fact: str
    scope: str
    written_at: str
    expires_at: str | None = None
    key: str | None = None
    source_event: str | None = None


def select_memories(
    facts: list[MemoryFact], *, thread_id: str, now: str, policy: dict[str, Any] | None
) -> list[MemoryFact]:
    """The facts a model call in ``thread_id`` may see at time ``now`` (RFC 3339 strings)."""
    if not policy:
        return []
    scopes = set(policy.get("scopes") or ())
    limit = int(policy.get("limit") or 20)
    live = [
        f
        for f in facts
        if f.scope in scopes
        and (f.scope != "thread" or f.thread_id == thread_id)
        and (f.expires_at is None or f.expires_at > now)
    ]
    by_key: dict[str, MemoryFact] = {}
    unkeyed: list[MemoryFact] = []
    for fact in sorted(live, key=lambda f: (f.thread_id == thread_id, f.written_at)):
        if fact.key is None:
            unkeyed.append(fact)
        else:
            by_key[fact.key] = fact  # later in this order wins: current thread, then newest
    chosen = sorted([*unkeyed, *by_key.values()], key=lambda f: f.written_at)
    return chosen[-limit:]


def memory_message(facts: list[MemoryFact]) -> dict[str, Any] | None:
    """The system message that offers the facts (None when there are none)."""
    if not facts:
        return None
    lines = [
        f"- {f.fact} (remembered {f.written_at[:10]}, scope {f.scope}"
        + (f", expires {f.expires_at[:10]}" if f.expires_at else "")
        + ")"
        for f in facts
    ]
    return {
        "role": "system",
        "content": "Long-term memory (facts recorded earlier; what this conversation "
        "establishes takes precedence):\n" + "\n".join(lines),
    }
