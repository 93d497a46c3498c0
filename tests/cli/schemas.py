"""JSON Schemas of every ``--json`` document the CLI tests check (docs/cli.md describes them).

One style: one JSON document per command (``tail`` alone streams JSON lines), objects with
snake_case keys, ids as strings, ordinals as integers, booleans as booleans, absent values as
null; a collection is an array of objects. Errors under ``--json`` go to stderr as `ERROR`.
"""

from __future__ import annotations

from typing import Any

import jsonschema

S: dict[str, Any] = {"type": "string"}
N: dict[str, Any] = {"type": "integer", "minimum": 0}
B: dict[str, Any] = {"type": "boolean"}
NS: dict[str, Any] = {"type": ["string", "null"]}
NI: dict[str, Any] = {"type": ["integer", "null"]}


def obj(required: dict[str, Any], **optional: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "required": sorted(required),
        "properties": {**required, **optional},
    }


def closed(required: dict[str, Any]) -> dict[str, Any]:
    return {**obj(required), "additionalProperties": False}


def array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


WAITING = closed(
    {"call_id": S, "tool": NS, "needs": {"enum": ["resolve", "approval"]}, "command": S}
)
THREAD_ROW = closed(
    {
        "thread_id": S,
        "principal": NS,
        "created_at": NS,
        "title": NS,
        "forked_from": NS,
        "status": {"enum": ["idle", "running", "interrupted", "damaged", "archived"]},
        "last_ord": N,
        "last_hash": NS,
        "last_ts": NS,
        "last_activity": NS,
        "turns": N,
        "tool_calls": N,
        "damage": NS,
        "waiting": array(WAITING),
    }
)
ENVELOPE = closed(
    {
        "v": N,
        "id": S,
        "thread": S,
        "ord": N,
        "parent": NS,
        "ts": S,
        "type": S,
        "data": {},
        "prev": NS,
        "hash": S,
    }
)
LS = array(THREAD_ROW)
SHOW = closed(
    {
        "thread": THREAD_ROW,
        "config": {"type": "object"},
        "lineage": {"type": ["object", "null"]},
        "active_turn": NS,
        "leaf": NS,
        "plan_version": NI,
        "turns": array(obj({"turn_id": S, "status": S, "started_ord": N, "ended_ord": NI})),
        "tool_calls": array(obj({"call_id": S, "status": S})),
        "sessions": array(obj({"session_id": NS, "opened_ord": N, "closed_ord": NI})),
        "last_records": array(ENVELOPE),
    }
)
TREE = closed(
    {
        "thread": S,
        "leaf": NS,
        "lineage": {"type": ["object", "null"]},
        "unknown_calls": array(S),
        "entries": array(
            closed(
                {
                    "id": S,
                    "ord": N,
                    "type": S,
                    "parent": NS,
                    "children": N,
                    "text": S,
                    "active": B,
                    "leaf": B,
                    "label": NS,
                }
            )
        ),
    }
)
EVENTS = array(ENVELOPE)
VERIFY_ONE = closed(
    {
        "thread": S,
        "ok": B,
        "records": N,
        "last_ord": N,
        "first_bad_ord": NI,
        "offset": NI,
        "error": NS,
        "torn_tail": {"type": ["object", "null"]},
    }
)
VERIFY_ALL = array(VERIFY_ONE)
REBUILD = closed({"threads": N, "records": N, "seconds": {"type": "number"}, "damaged": array(S)})
FORK = closed({"thread": S, "lineage": {"type": "object"}, "requested_ord": NI})
DIFF = closed(
    {
        "thread": S,
        "common_ancestor": NS,
        "common_ord": NI,
        "shared_messages": N,
        "a": array({"type": "object"}),
        "b": array({"type": "object"}),
    }
)
ACTED = obj({"thread": S, "applied": B}, ord=N, type=S, queued=S, holder=S)
ARCHIVE = closed({"thread": S, "archived": B, "changed": B})
GC = closed({"deleted": array(S), "dry_run": B, "in_use": array(S)})
RM = closed({"deleted": array(S)})
RESUME = obj({"thread": S, "repaired": B, "repairs": array({"type": "object"})})
MEMORY_LS = array(obj({"memory_id": S, "fact": S, "thread_id": S, "revoked": B}))
ERROR = closed(
    {
        "error": obj(
            {"message": S, "kind": S, "exit_code": {"enum": [1, 2, 3]}},
            candidates=array(S),
            thread=S,
        )
    }
)


def check(doc: Any, schema: dict[str, Any]) -> Any:
    """``doc``, once it is valid for ``schema`` (raises `jsonschema.ValidationError`)."""
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    return doc
