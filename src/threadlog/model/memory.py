"""Long-term memory: which remembered facts a model call may see (pure).

Memory is written only by an explicit call (`Session.remember`, or a tool that calls it):
resume and compaction never create it. Each fact records its source event, scope (``thread``,
``principal``, ``project``), when it was written and when it expires. A model call sees
memory only if the thread's config has a ``memory_policy`` (``{"scopes": [...], "limit": N}``),
and then only facts that are live (not revoked, not expired), in a scope the policy names.
Facts carry an optional ``key``: for one key, a fact written in the current thread (this task
verified it) wins over any other, and otherwise the newest wins.

*Scopes keep their owner.* A scope says who may see a fact, and no principal ever sees
another's: a ``thread`` fact is seen in the thread that wrote it, a ``principal`` fact by the
threads of the principal that wrote it, a ``project`` fact by the threads of that principal
*and* that project. A thread's project is its ``project`` setting, else its ``cwd``
(`project_of`); a project fact records the project it was written in. One written before
facts recorded their project has none and is seen only in the thread that wrote it.
"""

from __future__ import annotations

from typing import Any, cast

from threadlog._dataclass import dataclass
from threadlog.errors import UsageError
from threadlog.model.events import MemoryWritten

__all__ = [
    "MemoryFact",
    "memory_message",
    "memory_written",
    "project_of",
    "select_memories",
    "shared_facts",
]


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
    principal: str | None = None
    """The principal of the thread that wrote the fact."""
    project: str | None = None
    """For a ``project`` fact, the project it was written in (None: written before facts
    recorded one)."""


def project_of(config: dict[str, Any]) -> str | None:
    """A thread's project: its ``project`` setting, else its ``cwd`` (None without either)."""
    project = config.get("project")
    if isinstance(project, str) and project:
        return project
    cwd = config.get("cwd")
    return cwd if isinstance(cwd, str) and cwd else None


def _owned(fact: MemoryFact, thread_id: str, principal: str, project: str | None) -> bool:
    """Whether the scope of ``fact`` lets the thread see it (see the module docstring)."""
    if fact.scope == "thread":
        return fact.thread_id == thread_id
    if fact.principal != principal:
        return False  # never another principal's memory
    if fact.scope == "principal":
        return True
    if fact.scope == "project":
        if fact.project is None:
            return fact.thread_id == thread_id
        return project is not None and fact.project == project
    return False


def shared_facts(
    rows: list[dict[str, Any]], principal: str, project: str | None
) -> list[MemoryFact]:
    """`Catalog.shared_memories` from a catalog's live memory rows (their columns by name):
    the facts other threads of ``principal`` may be offered, its ``principal`` facts and,
    given ``project``, its ``project`` facts of that project; never another principal's."""
    return [
        MemoryFact(
            r["memory_id"],
            r["thread_id"],
            r["fact"],
            r["scope"],
            r["written_at"],
            r["expires_at"],
            r["key"],
            r["source_event"],
            r["principal"],
            r["project"],
        )
        for r in rows
        if r["principal"] == principal
        and (
            r["scope"] == "principal"
            or (r["scope"] == "project" and project is not None and r["project"] == project)
        )
    ]


def select_memories(
    facts: list[MemoryFact],
    *,
    thread_id: str,
    principal: str,
    project: str | None,
    now: str,
    policy: dict[str, Any] | None,
) -> list[MemoryFact]:
    """The facts a model call in ``thread_id`` (of ``principal``, in ``project``) may see at
    time ``now`` (RFC 3339 strings): live ones, in a scope the policy names, that the scope
    lets this thread see."""
    if not policy:
        return []
    scopes = set(policy.get("scopes") or ())
    limit = int(policy.get("limit") or 20)
    live = [
        f
        for f in facts
        if f.scope in scopes
        and _owned(f, thread_id, principal, project)
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


def memory_written(
    fact: str,
    *,
    scope: str,
    key: str | None,
    expires_at: str | None,
    source_event: str | None,
    config: dict[str, Any],
    memory_id: str,
    written_at: str,
) -> MemoryWritten:
    """The ``memory.written`` event of a new fact; a ``project`` fact gets the thread's
    project (`project_of` its ``config``). Raises `UsageError` for an empty fact, or a project
    fact in a thread without a project. (An unknown scope is refused by the record's decode,
    `InvalidData`.)"""
    if not isinstance(fact, str) or not fact.strip():
        raise UsageError("a memory is a non-empty fact")
    project = project_of(config) if scope == "project" else None
    if scope == "project" and project is None:
        raise UsageError("a project memory needs the thread's project (or cwd) setting")
    return MemoryWritten(
        memory_id=memory_id,
        fact=fact,
        source_event=cast("str", source_event),
        scope=cast("Any", scope),
        written_at=written_at,
        expires_at=expires_at,
        key=key,
        project=project,
    )
