"""Approval policies: `decide` (what a policy says for a call) and `check_policy`."""

from __future__ import annotations

from typing import Any

import pytest

from threadlog.errors import UsageError
from threadlog.model.approvals import DEFAULT_POLICY, check_policy, decide

SIDE_EFFECTS = ("read_only", "idempotent", "non_idempotent")


def test_default_policy() -> None:
    assert DEFAULT_POLICY == {"read_only": "auto", "idempotent": "auto", "non_idempotent": "ask"}
    assert check_policy(dict(DEFAULT_POLICY)) == DEFAULT_POLICY


@pytest.mark.parametrize("policy", [None, {}])
def test_decide_defaults(policy: dict[str, Any] | None) -> None:
    assert decide(policy, "read_file", "read_only") == "auto"
    assert decide(policy, "write_file", "idempotent") == "auto"
    assert decide(policy, "append_file", "non_idempotent") == "ask"
    assert decide(policy, "run_command", "non_idempotent") == "ask"


@pytest.mark.parametrize("side_effect", ["", "weird", "READ_ONLY", "tools", "unknown"])
def test_decide_unknown_side_effect_asks(side_effect: str) -> None:
    assert decide(None, "t", side_effect) == "ask"
    assert decide({"read_only": "auto", "tools": {}}, "t", side_effect) == "ask"


@pytest.mark.parametrize("side_effect", SIDE_EFFECTS)
@pytest.mark.parametrize("decision", ["auto", "ask", "deny"])
def test_decide_per_class_override(side_effect: str, decision: str) -> None:
    policy = {side_effect: decision}
    assert decide(policy, "any_tool", side_effect) == decision
    for other in SIDE_EFFECTS:
        if other != side_effect:  # the other classes keep their defaults
            assert decide(policy, "any_tool", other) == DEFAULT_POLICY[other]


def test_decide_per_tool_rule_wins() -> None:
    policy = {
        "read_only": "deny",
        "idempotent": "deny",
        "non_idempotent": "auto",
        "tools": {"read_file": "auto", "write_file": "ask", "run_command": "deny"},
    }
    assert decide(policy, "read_file", "read_only") == "auto"
    assert decide(policy, "write_file", "idempotent") == "ask"
    assert decide(policy, "run_command", "non_idempotent") == "deny"
    # tools without a rule of their own fall back to their class
    assert decide(policy, "list_dir", "read_only") == "deny"
    assert decide(policy, "append_file", "non_idempotent") == "auto"
    # a tool rule applies whatever the class the tool declares
    assert decide(policy, "read_file", "non_idempotent") == "auto"
    assert decide(policy, "run_command", "unknown") == "deny"


def test_decide_tool_rules_over_the_defaults() -> None:
    policy = {"tools": {"read_file": "deny", "append_file": "auto"}}
    assert decide(policy, "read_file", "read_only") == "deny"
    assert decide(policy, "append_file", "non_idempotent") == "auto"
    assert decide(policy, "run_command", "non_idempotent") == "ask"


def test_decide_does_not_modify_the_policy() -> None:
    policy: dict[str, Any] = {"tools": {"a": "deny"}}
    decide(policy, "a", "read_only")
    assert policy == {"tools": {"a": "deny"}}


@pytest.mark.parametrize(
    "policy",
    [
        {},
        {"read_only": "auto"},
        {"read_only": "deny", "idempotent": "ask", "non_idempotent": "auto"},
        {"tools": {}},
        {"tools": {"run_command": "deny", "read_file": "auto", "x": "ask"}},
        {"non_idempotent": "deny", "tools": {"append_file": "ask"}},
    ],
)
def test_check_policy_accepts_valid_policies(policy: dict[str, Any]) -> None:
    assert check_policy(policy) is policy


@pytest.mark.parametrize(
    "policy", [None, "auto", 1, ["read_only"], [("read_only", "auto")], ("auto",)]
)
def test_check_policy_refuses_non_objects(policy: Any) -> None:
    with pytest.raises(UsageError, match="must be an object"):
        check_policy(policy)


@pytest.mark.parametrize("key", SIDE_EFFECTS)
@pytest.mark.parametrize("value", ["yes", "AUTO", "", None, True, 1, ["auto"], {"auto": 1}])
def test_check_policy_refuses_bad_class_values(key: str, value: Any) -> None:
    with pytest.raises(UsageError, match=f"approval_policy.{key}"):
        check_policy({key: value})


@pytest.mark.parametrize(
    "policy",
    [
        {"readonly": "auto"},
        {"default": "ask"},
        {"Tools": {}},
        {"read_only": "auto", "extra": "auto"},
        {1: "auto"},
    ],
)
def test_check_policy_refuses_unknown_keys(policy: dict[Any, Any]) -> None:
    with pytest.raises(UsageError, match="unknown approval_policy key"):
        check_policy(policy)


@pytest.mark.parametrize(
    "tools",
    [
        None,
        "deny",
        ["run_command"],
        [("run_command", "deny")],
        {"run_command": "never"},
        {"run_command": None},
        {"run_command": True},
        {"run_command": ["deny"]},
        {"read_file": "auto", "run_command": "DENY"},
    ],
)
def test_check_policy_refuses_bad_tools_maps(tools: Any) -> None:
    with pytest.raises(UsageError, match="approval_policy.tools"):
        check_policy({"tools": tools})
