"""Approval policies: auto-approve, ask a human, or deny — by tool name and side-effect class.

A policy is plain JSON kept in the thread's config (``approval_policy``), so it is recorded in
the log and can change between turns with ``config.changed``::

    {"read_only": "auto", "idempotent": "auto", "non_idempotent": "ask",
     "tools": {"run_command": "deny"}}

A rule for the tool's name wins over the rule for its side-effect class. The default asks
before anything non-idempotent and approves the rest.
"""

from __future__ import annotations

from typing import Any, Final, Literal, cast

from threadlog.errors import UsageError

__all__ = ["DEFAULT_POLICY", "Decision", "check_policy", "decide"]

Decision = Literal["auto", "ask", "deny"]
_DECISIONS: Final = ("auto", "ask", "deny")

DEFAULT_POLICY: Final[dict[str, Any]] = {
    "read_only": "auto",
    "idempotent": "auto",
    "non_idempotent": "ask",
}


def check_policy(policy: Any) -> dict[str, Any]:
    """Validate a policy; returns it, or raises `UsageError` saying what is wrong."""
    if not isinstance(policy, dict):
        raise UsageError("approval_policy must be an object")
    for key, value in policy.items():
        if key == "tools":
            if not isinstance(value, dict) or any(v not in _DECISIONS for v in value.values()):
                raise UsageError("approval_policy.tools maps tool names to auto, ask or deny")
        elif key in ("read_only", "idempotent", "non_idempotent"):
            if value not in _DECISIONS:
                raise UsageError(f"approval_policy.{key} must be auto, ask or deny")
        else:
            raise UsageError(f"unknown approval_policy key {key!r}")
    return policy


def decide(policy: dict[str, Any] | None, tool: str, side_effect: str) -> Decision:
    """What the policy says for a call of ``tool`` with ``side_effect``."""
    merged = {**DEFAULT_POLICY, **(policy or {})}
    by_tool = merged.get("tools") or {}
    decision = by_tool.get(tool) or merged.get(side_effect) or "ask"
    return cast("Decision", decision) if decision in _DECISIONS else "ask"
