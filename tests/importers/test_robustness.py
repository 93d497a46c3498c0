"""No source file can abort an import or leave a thread that does not verify: lines of any
shape (JSON or not, known types with wrong fields, repeated ids) are reported, never raised."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threadlog import open_store
from threadlog.importers import SOURCES, import_paths, source_format

from ._helpers import FIXTURES

_scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=8)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=8,
)
_keys = st.sampled_from(
    [
        "type",
        "uuid",
        "parentUuid",
        "message",
        "id",
        "parentId",
        "payload",
        "role",
        "content",
        "tool_use_id",
        "call_id",
        "isSidechain",
        "subtype",
        "logicalParentUuid",
        "version",
    ]
)
_values = (
    st.sampled_from(
        [
            "user",
            "assistant",
            "system",
            "summary",
            "message",
            "session",
            "response_item",
            "event_msg",
            "compacted",
            "turn_context",
            "compaction",
            "toolResult",
            "tool_result",
            "tool_use",
            "function_call",
            "function_call_output",
            "compact_boundary",
            "u1",
            "u2",
            "a",
        ]
    )
    | _json
)
_line = st.dictionaries(_keys, _values, max_size=6).map(json.dumps) | st.text(max_size=30)


def _fixture_lines(fmt: str) -> list[str]:
    return [
        line
        for path in sorted((FIXTURES / fmt).rglob("*.jsonl"))
        for line in path.read_text().splitlines()[:12]
    ]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    fmt=st.sampled_from(SOURCES),
    extra=st.lists(_line, max_size=12),
    picks=st.lists(st.integers(0, 60), max_size=10),
)
def test_any_lines_import_and_verify(
    tmp_path: Path, fmt: str, extra: list[str], picks: list[int]
) -> None:
    known = _fixture_lines(fmt)
    lines = [known[i % len(known)] for i in picks] + extra  # real lines, repeated and shuffled
    path = tmp_path / f"rollout-2026-01-01T00-00-00-{len(lines)}.jsonl"
    path.write_text("".join(line.replace("\n", " ") + "\n" for line in lines))
    with open_store("memory://") as store:
        [report] = import_paths(store, source_format(fmt), [str(path)]).files
        assert report.status != "failed", report.problems
        for thread in [report.thread, *report.children]:
            assert store.verify(thread).ok
            store.state(thread)


def _parses(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def _mutate(obj: object, path: list[int], value: object) -> object:
    """``obj`` with the value reached by following ``path`` (indices into keys or items)
    replaced by ``value``."""
    if not path:
        return value
    if isinstance(obj, dict) and obj:
        key = sorted(obj)[path[0] % len(obj)]
        return {**obj, key: _mutate(obj[key], path[1:], value)}
    if isinstance(obj, list) and obj:
        i = path[0] % len(obj)
        return [*obj[:i], _mutate(obj[i], path[1:], value), *obj[i + 1 :]]
    return value


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    fmt=st.sampled_from(SOURCES),
    edits=st.lists(
        st.tuples(st.integers(0, 60), st.lists(st.integers(0, 9), max_size=4), _json), max_size=8
    ),
)
def test_real_lines_with_wrong_fields_import_and_verify(
    tmp_path: Path, fmt: str, edits: list[tuple[int, list[int], object]]
) -> None:
    lines = [line for line in _fixture_lines(fmt) if _parses(line)]
    for at, path, value in edits:
        i = at % len(lines)
        lines[i] = json.dumps(_mutate(json.loads(lines[i]), path, value))
    target = tmp_path / f"rollout-2026-01-01T00-00-00-{len(edits)}.jsonl"
    target.write_text("".join(line + "\n" for line in lines))
    with open_store("memory://") as store:
        [report] = import_paths(store, source_format(fmt), [str(target)]).files
        assert report.status != "failed", report.problems
        for thread in [report.thread, *report.children]:
            assert store.verify(thread).ok
            store.state(thread)
