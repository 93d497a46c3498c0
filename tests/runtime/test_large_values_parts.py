"""The parts of large-value handling (`threadlog.runtime.large_values`): loading a record,
cutting a text for a model call, the value limit. The behaviour end to end is in
``test_large_values.py``."""

from __future__ import annotations

import pytest

from tests.runtime.test_large_values import INLINE_LIMIT, big_text, check
from threadlog import open_store
from threadlog.model.refs import is_artifact_ref
from threadlog.runtime import ToolError
from threadlog.runtime.large_values import (
    DEFAULT_VALUE_LIMIT,
    MIN_VALUE_LIMIT,
    LargeValues,
    cut,
    load_artifact,
    value_limit,
)


def test_a_loaded_record_keeps_look_alikes_escaped() -> None:
    lookalike = {"$artifact": {"sha256": "cd" * 32, "size": 3}}
    text = big_text(INLINE_LIMIT + 10)
    with open_store("memory://") as store:
        thread = store.create_thread("u")
        record = store.append(thread, "custom.note", {"big": text, "fake": lookalike, "n": 1})
        assert is_artifact_ref(record.data["big"])
        values = LargeValues(store)
        loaded = values.load(record)
        check(loaded.data, {"big": text, "fake": {"$escaped": lookalike}, "n": 1})
        assert loaded.hash == record.hash and loaded.ord == record.ord
        small = store.append(thread, "custom.note", {"fake": lookalike})
        assert values.load(small) is small  # nothing to load: the record itself
        # the blob the record named is known to be held: its marker names it
        shown = values.fit_text(text, 1000)
        assert f"artifact {record.data['big']['$artifact']['sha256']};" in shown
        # a text the store does not hold is cut all the same, and says it cannot be paged
        inline = big_text(5000, "x")
        shown = values.fit_text(inline, 1000)
        assert "cannot be paged" in shown and "artifact" not in shown
        assert shown.startswith(inline[:500]) and shown.endswith(inline[-500:])
        assert values.fit_text("short", 1000) == "short"
        with pytest.raises(ToolError, match="cannot be read"):
            load_artifact(store, "ef" * 32)  # the in-memory store calls a missing blob damage


def test_value_limit_follows_the_budget() -> None:
    assert value_limit({}) == DEFAULT_VALUE_LIMIT
    assert value_limit({"context_budget": 50_000}) == 50_000
    assert value_limit({"context_budget": 10}) == MIN_VALUE_LIMIT
    assert value_limit({"context_budget": True}) == DEFAULT_VALUE_LIMIT
    assert cut("abcdef", 6, None) == "abcdef"


def test_tool_call_arguments_are_cut_too() -> None:
    text = big_text(5000)
    with open_store("memory://") as store:
        values = LargeValues(store)
        messages = [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "name": "write_file", "arguments": {"text": text}}],
            },
        ]
        fitted = values.fit_messages(messages, 1000)
    assert fitted[0] is messages[0]
    shown = fitted[1]["tool_calls"][0]["arguments"]["text"]
    assert len(shown) < 1200 and "characters left out" in shown
    assert messages[1]["tool_calls"][0]["arguments"]["text"] is text  # never changed in place
