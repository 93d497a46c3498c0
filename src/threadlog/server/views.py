"""What the routes answer, built from the store: thread summaries and details, pages of
events, and which artifacts a thread references.

Every function here that reads the store blocks: the routes call them in a worker thread.
Shapes are the ones ``docs/service.md`` documents.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from threadlog.errors import ThreadNotFound, UsageError
from threadlog.model import codec
from threadlog.model.approvals import decide
from threadlog.model.refs import is_artifact_ref, referenced
from threadlog.store.protocol import Artifacts, Catalog

if TYPE_CHECKING:
    from threadlog.model.envelope import Record
    from threadlog.model.state import ThreadState, ToolCallState, TurnState
    from threadlog.server.auth import Caller, Owners
    from threadlog.store.protocol import Store

__all__ = [
    "ReferencedArtifacts",
    "call_row",
    "events_page",
    "last_ord",
    "list_threads",
    "thread_detail",
    "thread_summary",
]


def _summary(
    thread_id: str,
    principal: str | None,
    title: str | None,
    created_at: str | None,
    status: str,
    last: int,
    last_ts: str | None,
    forked_from: str | None,
    turns: int,
    tool_calls: int,
) -> dict[str, Any]:
    return {
        "thread_id": thread_id,
        "principal": principal,
        "title": title,
        "created_at": created_at,
        "status": status,
        "last_ord": last,
        "last_ts": last_ts,
        "forked_from": forked_from,
        "turns": turns,
        "tool_calls": tool_calls,
    }


def _from_state(store: Store, state: ThreadState) -> dict[str, Any]:
    tail = store.read(state.thread_id, max(0, state.last_ord - 1), limit=1)
    lineage = state.lineage or {}
    forked = lineage.get("thread")
    return _summary(
        state.thread_id,
        state.principal,
        state.title,
        state.created_at,
        "running" if state.active_turn is not None else "idle",
        state.last_ord,
        tail[-1].ts if tail else None,
        forked if isinstance(forked, str) else None,
        len(state.turns),
        len(state.tool_calls),
    )


def thread_summary(store: Store, thread_id: str) -> dict[str, Any]:
    """A thread's `ThreadSummary`: its index row when the store has a `Catalog` that has
    indexed it, else its reduced state."""
    if isinstance(store, Catalog):
        try:
            row = store.thread_info(thread_id)
        except ThreadNotFound:
            pass  # not indexed yet (written by another process since the store opened)
        else:
            return _summary(
                row.thread_id,
                row.principal,
                row.title,
                row.created_at,
                row.status,
                row.last_ord,
                row.last_ts,
                row.forked_from,
                row.turns,
                row.tool_calls,
            )
    return _from_state(store, store.state(thread_id))


def list_threads(store: Store, owners: Owners, who: Caller, limit: int) -> list[dict[str, Any]]:
    """The caller's threads (every thread in open mode), most recently active first."""
    principal = None if who.sees_all else who.principal
    if isinstance(store, Catalog):
        return [
            thread_summary(store, row.thread_id)
            for row in store.threads(principal=principal, limit=limit)
        ]
    found = []
    for thread_id in store.thread_ids():
        try:
            if principal is not None and owners.owner(thread_id) != principal:
                continue
            found.append(_from_state(store, store.state(thread_id)))
        except UsageError:
            continue  # gone since it was listed
    found.sort(key=lambda s: s["last_ts"] or "", reverse=True)
    return found[:limit]


def turn_row(turn: TurnState) -> dict[str, Any]:
    """A turn as the thread's detail lists it."""
    return {
        "turn_id": turn.turn_id,
        "input": turn.input,
        "status": turn.status,
        "started_ord": turn.started_ord,
        "ended_ord": turn.ended_ord,
        "reason": turn.reason,
    }


def call_row(call: ToolCallState) -> dict[str, Any]:
    """A tool call's row (``GET …/tool-calls/{call_id}``)."""
    return {
        "call_id": call.call_id,
        "turn_id": call.turn_id,
        "tool": call.tool,
        "args": call.args,
        "side_effect": call.side_effect,
        "status": call.status,
        "proposed_ord": call.proposed_ord,
        "last_ord": call.last_ord,
        "attempt": call.attempt,
        "ok": call.ok,
        "result": call.result,
        "error": call.error,
        "decided_by": call.decided_by,
    }


def _needs(state: ThreadState, call: ToolCallState) -> str | None:
    """What a call waits for from a human: ``decision``, ``resolution`` or nothing."""
    if call.status == "unknown":
        return "resolution"
    if call.status == "proposed":
        policy = state.config.get("approval_policy")
        if decide(policy if isinstance(policy, dict) else None, call.tool, call.side_effect) == (
            "ask"
        ):
            return "decision"
    return None


def thread_detail(summary: dict[str, Any], state: ThreadState) -> dict[str, Any]:
    """A `ThreadDetail`: the summary, the turns, the tool calls and those waiting for a
    human (each a call row with ``needs``: ``decision`` or ``resolution``)."""
    waiting = []
    for call in state.tool_calls.values():
        needs = _needs(state, call)
        if needs is not None:
            waiting.append({**call_row(call), "needs": needs})
    return {
        **summary,
        "turns": [turn_row(t) for t in state.turns.values()],
        "tool_calls": [call_row(c) for c in state.tool_calls.values()],
        "waiting": waiting,
    }


def last_ord(store: Store, thread_id: str, known: int = 0) -> int:
    """The thread's last durable ordinal (the index's, and what the log holds past it)."""
    base = known
    if isinstance(store, Catalog):
        try:
            base = max(base, store.thread_info(thread_id).last_ord)
        except ThreadNotFound:
            pass
    tail = store.read(thread_id, base)
    return tail[-1].ord if tail else base


def events_page(
    store: Store, thread_id: str, *, after: int | None, before: int | None, limit: int
) -> dict[str, Any]:
    """A page of records: after an ordinal (default: from the start) or before one. Ordinals
    are gap-free, so a page before ``B`` is the read after ``B - 1 - limit``."""
    if before is not None:
        start = max(0, before - 1 - limit)
        count = before - 1 - start
        records: list[Record] = store.read(thread_id, start, limit=count) if count > 0 else []
    else:
        records = store.read(thread_id, after or 0, limit=limit)
    first = records[0].ord if records else None
    last = records[-1].ord if records else None
    head = last_ord(store, thread_id, last or 0)
    return {
        "events": [r.to_dict() for r in records],
        "first": first,
        "last": last,
        "last_ord": head,
        "next_after": last if last is not None and last < head else None,
        "prev_before": first if first is not None and first > 1 else None,
    }


class ReferencedArtifacts:
    """The artifacts each thread's records reference, scanned once and extended with the
    records appended since (an artifact is served only through a thread that references
    it: ``docs/service.md``, Identity)."""

    def __init__(self, store: Store, *, max_threads: int = 10_000) -> None:
        self._store = store
        self._seen: dict[str, tuple[int, set[str]]] = {}
        self._lock = threading.Lock()
        self._max = max_threads

    def references(self, thread_id: str, digest: str) -> bool:
        """Whether a record of the thread references the blob ``digest`` (blocking)."""
        with self._lock:
            scanned, digests = self._seen.get(thread_id, (0, set()))
        if digest in digests:
            return True
        records = self._store.read(thread_id, scanned)
        if not records:
            return False
        found = set(digests)
        for record in records:
            found.update(self._digests(record))
        with self._lock:
            if len(self._seen) >= self._max:
                self._seen.clear()
            self._seen[thread_id] = (records[-1].ord, found)
        return digest in found

    def _digests(self, record: Record) -> set[str]:
        refs = referenced(record.type, record.data)
        digests = {ref.sha256 for ref in refs}
        store = self._store
        if is_artifact_ref(record.data) and isinstance(store, Artifacts):
            # the whole data was stored as a blob: its top-level values may be blobs too
            try:
                whole = codec.loads(store.get_artifact(refs[0].sha256))
            except Exception:  # a damaged or missing blob references nothing we can serve
                return digests
            if isinstance(whole, dict):
                for value in whole.values():
                    digests.update(ref.sha256 for ref in referenced("", value))
        return digests
