"""Lineage: what a fork declares about the records it inherited."""

from __future__ import annotations

from typing import Any

import pytest

from threadlog.model.lineage import Copied, check_new_lineage, copied_prefix, inherits

A, B, C = "a" * 64, "b" * 64, "thread-c"
GOOD = {"thread": "p", "ord": 4, "hash": B, "copied": {"prev": A, "threads": ["p", "q"]}}


def test_a_declared_prefix_is_read_back() -> None:
    assert copied_prefix(GOOD) == Copied(4, A, frozenset({"p", "q"}), B)
    assert copied_prefix({"thread": "p", "ord": 1, "hash": B}) is None
    assert copied_prefix(None) is None


@pytest.mark.parametrize(
    "change",
    [
        {"ord": 1},
        {"ord": "4"},
        {"hash": "B" * 64},
        {"copied": {"prev": "x", "threads": ["p"]}},
        {"copied": {"prev": A, "threads": []}},
        {"copied": {"prev": A, "threads": [1]}},
        {"copied": []},
    ],
)
def test_a_malformed_declaration_is_refused(change: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="lineage.copied"):
        copied_prefix({**GOOD, **change})


def test_inherits_only_inside_the_range_and_from_the_named_threads() -> None:
    assert inherits(GOOD, "p", 2) and inherits(GOOD, "q", 4)
    assert not inherits(GOOD, "p", 1) and not inherits(GOOD, "p", 5)
    assert not inherits(GOOD, C, 3) and not inherits(None, "p", 3)


def test_only_a_fork_may_declare_inherited_records() -> None:
    check_new_lineage({"thread": "p", "kind": "subagent"})
    check_new_lineage(None)
    with pytest.raises(ValueError, match="fork only"):
        check_new_lineage(GOOD)
