from __future__ import annotations

from typing import Any

import pytest

from threadlog.model.codec import canonical, loads
from threadlog.model.events import CATALOGUE
from threadlog.model.policy import BUFFERED, durability_of
from threadlog.model.refs import REF_KEY, ArtifactRef, escape, escape_encoded, is_artifact_ref

DIGEST = "0123456789abcdef" * 4


def test_artifact_ref_round_trips() -> None:
    ref = ArtifactRef(DIGEST, 42, "application/json", "a summary")
    data = ref.to_data()
    assert data == {
        REF_KEY: {
            "sha256": DIGEST,
            "size": 42,
            "media_type": "application/json",
            "summary": "a summary",
        }
    }
    assert is_artifact_ref(data)
    assert ArtifactRef.from_data(data) == ref
    assert ArtifactRef.from_data(loads(canonical(data))) == ref


@pytest.mark.parametrize("data", [None, "x", {}, {"a": 1}, [DIGEST], {REF_KEY: DIGEST}])
def test_from_data_of_a_non_reference_is_none(data: Any) -> None:
    assert ArtifactRef.from_data(data) is None


@pytest.mark.parametrize(
    "data",
    [
        {REF_KEY: {"sha256": DIGEST, "size": 0}},
        {REF_KEY: {"sha256": DIGEST, "size": 2**40, "media_type": "text/plain", "summary": None}},
        {REF_KEY: {"sha256": DIGEST, "size": 1, "anything": "else"}},
    ],
)
def test_is_artifact_ref_accepts(data: Any) -> None:
    assert is_artifact_ref(data)


@pytest.mark.parametrize(
    "data",
    [
        {REF_KEY: {"sha256": DIGEST[:-1], "size": 1}},
        {REF_KEY: {"sha256": DIGEST + "0", "size": 1}},
        {REF_KEY: {"sha256": DIGEST.upper(), "size": 1}},
        {REF_KEY: {"sha256": DIGEST, "size": "1"}},
        {REF_KEY: {"sha256": DIGEST, "size": 1.0}},
        {REF_KEY: {"sha256": DIGEST, "size": True}},
        {REF_KEY: {"sha256": DIGEST}},
        {REF_KEY: {"size": 1}},
        {REF_KEY: {"sha256": DIGEST, "size": 1}, "other": 1},
        {REF_KEY: [DIGEST, 1]},
        [{REF_KEY: {"sha256": DIGEST, "size": 1}}],
        None,
    ],
)
def test_is_artifact_ref_refuses(data: Any) -> None:
    assert not is_artifact_ref(data)


def test_a_digest_with_a_trailing_newline_is_not_a_reference() -> None:
    # BUG: ``_DIGEST_RE.match`` with ``$`` also matches before a final "\n" (refs.py), so
    # the "digest" "<64 hex>\n" is accepted and reaches the artifact store as a file name.
    assert not is_artifact_ref({REF_KEY: {"sha256": DIGEST + "\n", "size": 1}})


def test_durability_classes() -> None:
    # model.responded is critical: its usage is the durable record of the budget spent
    assert frozenset({"config.changed", "label.set"}) == BUFFERED
    assert set(BUFFERED) <= set(CATALOGUE)
    for type_name in CATALOGUE:
        expected = "buffered" if type_name in BUFFERED else "critical"
        assert durability_of(type_name) == expected
    for critical in (
        "model.responded",
        "tool_call.started",
        "tool_call.finished",
        "turn.ended",
        "input.queued",
        "custom.x",
    ):
        assert durability_of(critical) == "critical"


@pytest.mark.parametrize(
    "data",
    [
        {"a": "no dollar at all", "b": [1, {"c": None}]},
        {"a": "$ in a string", "b": '{"$artifact": 1} spelled in a string'},
        {"$artifact": 1, "x": "$"},
        {"a": {"$escaped": 1}},
        {"a": {"$artifact": {"sha256": "0" * 64, "size": 1}}, "b": "$"},
        {"$escaped": "x"},
        "$",
        ["$", {"$artifact": 1}],
    ],
)
def test_escape_encoded_is_escape_of_what_a_reader_decodes(data: Any) -> None:
    # The byte searches that let most data through untouched must never skip a look-alike.
    encoded = canonical(data)
    stored, stored_json = escape_encoded(data, encoded)
    expected = escape(loads(encoded))
    assert loads(stored_json) == expected
    assert stored_json == canonical(expected)
    if b"$" not in encoded:
        assert stored is data and stored_json is encoded
