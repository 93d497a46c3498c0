"""The thread view: one projection of a thread's records that the browser UI and the HTML
export both draw (pure: the model, ``orjson`` and the standard library).

Theory of operation
-------------------
The log is folded three ways at once, in log order:

* the reducer (`threadlog.model.reducer.replay`) gives the thread's state: its turns, tool
  calls, active leaf, labels, usage, plan, memory and queued input;
* a `Context` gives each record's conversation message, exactly as the model saw it (the same
  fold as the ``messages`` export);
* the conversation tree (`threadlog.model.tree.Tree`) gives each record's parent.

Only *entries* (`threadlog.model.tree.ENTRY_TYPES`) and the thread's root are drawn as nodes
of the tree; any other record between two entries is skipped over, so a node's parent is the
nearest entry above it. ``entries`` lists the nodes depth first, children in log order, each
with ``depth`` (how many branch points with more than one child lie above it), ``active`` (on
the path from the root to the active leaf) and ``branch`` (it has more than one child).

A tool call is one card (``calls``): the reducer's row plus what only the records hold — the
time it was proposed, started and finished, who approved or denied it and why, why its
outcome is unknown, how a human resolved it — and ``state``, the word the UI shows:
``proposed``, ``waiting`` (proposed, and the approval policy asks a human), ``approved``,
``running``, ``finished``, ``failed``, ``unknown``, ``denied``, ``cancelled``, ``done`` or
``aborted`` (resolved by a human). A result is given as text (``result_text``); a result kept
in the artifact store is given as its reference (``artifact``) for the reader to fetch on
demand (the export loads artifacts first, so it always has the text).

Nothing here escapes anything: the view is data. Each renderer escapes what it draws.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from threadlog.model.approvals import decide
from threadlog.model.context import Context, tool_result_text
from threadlog.model.reducer import replay
from threadlog.model.refs import is_artifact_ref
from threadlog.model.tree import ENTRY_TYPES, Tree

if TYPE_CHECKING:
    from collections.abc import Sequence

    from threadlog.model.envelope import Record
    from threadlog.model.state import ThreadState, ToolCallState

__all__ = ["call_state", "thread_status", "thread_view"]

_CALL_TYPES = frozenset(
    {
        "tool_call.proposed",
        "tool_call.approved",
        "tool_call.denied",
        "tool_call.started",
        "tool_call.finished",
        "tool_call.unknown",
        "tool_call.resolved",
        "tool_call.cancelled",
    }
)


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


def call_state(state: ThreadState, call: ToolCallState) -> str:
    """The word the UI shows for a call (see the module docstring)."""
    if call.status == "proposed":
        return "waiting" if _needs(state, call) == "decision" else "proposed"
    if call.status == "finished":
        return "finished" if call.ok else "failed"
    return call.status


def thread_status(state: ThreadState) -> str:
    """``waiting`` (a call waits for a human), ``running``, ``interrupted`` (the last turn
    was cut off by a stopped process) or ``idle``, from the log alone."""
    if any(_needs(state, c) is not None for c in state.tool_calls.values()):
        return "waiting"
    if state.active_turn is not None:
        return "running"
    last = state.last_turn
    if last is not None and last.status == "interrupted":
        return "interrupted"
    return "idle"


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def _entry_text(record: Record, message: dict[str, Any] | None) -> str:
    data = record.data if isinstance(record.data, dict) else {}
    if record.type == "thread.created":
        return "thread created"
    if record.type == "compaction":
        return _text(data.get("summary"))
    if record.type == "branch.summarized":
        return _text(data.get("summary"))
    if record.type == "config.changed":
        return "settings: " + _text(data.get("changes"))
    if message is not None:
        return _text(message.get("content"))
    return record.type


def _kind(record: Record, message: dict[str, Any] | None) -> str:
    if record.type in ("thread.created", "compaction", "config.changed"):
        return {"thread.created": "root", "compaction": "compaction"}.get(record.type, "config")
    if record.type == "branch.summarized":
        return "branch_summary"
    if record.type == "provider.interrupted":
        return "interrupted"
    if message is None:
        return "other"
    return str(message.get("role") or "other")


def _entries(
    records: Sequence[Record], state: ThreadState, context: Context
) -> list[dict[str, Any]]:
    if not records:
        return []
    tree = Tree.of(records)
    root = records[0].id
    shown = {r.id for r in records if r.type in ENTRY_TYPES} | {root}

    def shown_parent(record_id: str) -> str | None:
        node = tree.parent.get(record_id)
        while node is not None and node not in shown:
            node = tree.parent.get(node)
        return node

    parent = {rid: shown_parent(rid) for rid in shown if rid != root}
    children: dict[str, list[str]] = {}
    for record in records:
        if record.id in parent:
            up = parent[record.id]
            children.setdefault(up if up is not None else root, []).append(record.id)
    active = set(tree.path(state.leaf)) if state.leaf else {root}
    by_id = {r.id: r for r in records}
    out: list[dict[str, Any]] = []
    stack: list[tuple[str, int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        record = by_id[node]
        message = context.nodes[node][1] if node in context.nodes else None
        kids = children.get(node, [])
        data = record.data if isinstance(record.data, dict) else {}
        out.append(
            {
                "id": node,
                "parent": parent.get(node),
                "ord": record.ord,
                "ts": record.ts,
                "type": record.type,
                "kind": _kind(record, message),
                "text": _entry_text(record, message),
                "calls": [c.get("id") for c in (message or {}).get("tool_calls") or []],
                "call_id": data.get("call_id") if record.type.startswith("tool_call.") else None,
                "label": state.labels.get(node),
                "active": node in active,
                "leaf": node == state.leaf,
                "branch": len(kids) > 1,
                "children": len(kids),
                "depth": depth,
            }
        )
        step = 1 if len(kids) > 1 else 0
        # depth first, children in log order: push them reversed
        stack.extend((kid, depth + step) for kid in reversed(kids))
    return out


def _calls(records: Sequence[Record], state: ThreadState) -> dict[str, dict[str, Any]]:
    extra: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.type not in _CALL_TYPES or not isinstance(record.data, dict):
            continue
        data = record.data
        call_id = data.get("call_id")
        if not isinstance(call_id, str):
            continue
        row = extra.setdefault(call_id, {})
        kind = record.type.removeprefix("tool_call.")
        row[f"{kind}_ts"] = record.ts
        row[f"{kind}_ord"] = record.ord
        if kind in ("approved", "denied"):
            row["decision"] = {"as": kind, "by": data.get("by"), "reason": data.get("reason")}
        elif kind in ("unknown", "cancelled"):
            row["reason"] = data.get("reason")
        elif kind == "resolved":
            row["resolution"] = {
                "as": data.get("decision"),
                "by": data.get("by"),
                "note": data.get("note"),
            }
    out: dict[str, dict[str, Any]] = {}
    for call in state.tool_calls.values():
        row = extra.get(call.call_id, {})
        result = call.result
        artifact = result["$artifact"] if is_artifact_ref(result) else None
        result_text = None
        if artifact is None and (result is not None or call.ok is not None):
            result_text = tool_result_text(result) if result is not None else ""
        out[call.call_id] = {
            "call_id": call.call_id,
            "turn_id": call.turn_id,
            "tool": call.tool,
            "args": call.args,
            "side_effect": call.side_effect,
            "status": call.status,
            "state": call_state(state, call),
            "needs": _needs(state, call),
            "attempt": call.attempt,
            "ok": call.ok,
            "result_text": result_text,
            "artifact": artifact,
            "error": call.error,
            "decided_by": call.decided_by,
            "proposed_ts": row.get("proposed_ts"),
            "started_ts": row.get("started_ts"),
            "finished_ts": row.get("finished_ts") or row.get("unknown_ts"),
            "decision": row.get("decision"),
            "reason": row.get("reason"),
            "resolution": row.get("resolution"),
            "proposed_ord": call.proposed_ord,
        }
    return out


def thread_view(records: Sequence[Record]) -> dict[str, Any]:
    """The view of a thread's whole log (from its ``thread.created``); see the module
    docstring for its parts."""
    state = replay(records)
    context = Context()
    for record in records:
        context.apply(record)
    ords = {r.id: r.ord for r in records}
    config = state.config
    model = config.get("model")
    for record in reversed(records):
        if model is None and record.type == "provider.started" and isinstance(record.data, dict):
            model = record.data.get("model")
            break
    return {
        "thread_id": state.thread_id,
        "title": state.title,
        "principal": state.principal,
        "created_at": state.created_at,
        "status": thread_status(state),
        "model": model,
        "cwd": config.get("cwd"),
        "lineage": state.lineage,
        "last_ord": state.last_ord,
        "last_ts": records[-1].ts if records else None,
        "leaf": state.leaf,
        "active_turn": state.active_turn,
        "entries": _entries(records, state, context),
        "calls": _calls(records, state),
        "turns": [
            {
                "turn_id": t.turn_id,
                "input": t.input,
                "status": t.status,
                "started_ord": t.started_ord,
                "ended_ord": t.ended_ord,
                "reason": t.reason,
                "usage": t.usage,
            }
            for t in state.turns.values()
        ],
        "usage": state.usage,
        "plan": state.plan,
        "plan_version": state.plan_version,
        "plan_source": state.plan_source,
        "memories": [
            {
                "memory_id": m.memory_id,
                "fact": m.fact,
                "scope": m.scope,
                "key": m.key,
                "source_event": m.source_event,
                "source_ord": ords.get(m.source_event),
                "written_at": m.written_at,
                "expires_at": m.expires_at,
                "revoked": m.revoked,
            }
            for m in state.memories.values()
        ],
        "queued": [
            {"input_id": i.input_id, "text": i.text, "queued_ord": i.queued_ord}
            for i in state.pending_inputs
        ],
    }
