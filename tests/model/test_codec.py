from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import re
import uuid
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from threadlog.errors import InvalidData, UsageError
from threadlog.model.codec import MAX_DEPTH, canonical, canonical_decoded, check_plain, loads

GOLDEN: list[tuple[Any, bytes]] = [
    (None, b"null"),
    (True, b"true"),
    (False, b"false"),
    (0, b"0"),
    (-1, b"-1"),
    (2**64 - 1, b"18446744073709551615"),
    (-(2**63), b"-9223372036854775808"),
    (1.0, b"1.0"),
    (0.1, b"0.1"),
    (-0.0, b"-0.0"),
    (1.5e-7, b"1.5e-7"),
    (1e16, b"1e+16"),
    (123456789.123, b"123456789.123"),
    (5e-324, b"5e-324"),
    (1.7976931348623157e308, b"1.7976931348623157e+308"),
    ("", b'""'),
    ("plain", b'"plain"'),
    ("é€😀", '"é€😀"'.encode()),  # UTF-8, never \\u escapes
    ("\u2028/</script>", '"\u2028/</script>"'.encode()),
    ('"\\', b'"\\"\\\\"'),
    ("\n\t\x00\x1f\x7f", b'"\\n\\t\\u0000\\u001f\x7f"'),  # only control characters escaped
    ([], b"[]"),
    ({}, b"{}"),
    ((1, "a", None), b'[1,"a",null]'),  # tuples encode as lists
    ([1, [2, [3]]], b"[1,[2,[3]]]"),
    ({"b": 1, "a": 2}, b'{"a":2,"b":1}'),
    (
        {"z": {"y": [1, {"b": True, "a": None}], "x": []}, "a": "é"},
        '{"a":"é","z":{"x":[],"y":[1,{"a":null,"b":true}]}}'.encode(),
    ),
    # keys sorted by code point (= UTF-8 byte order), not by UTF-16 units or case-folded
    (
        {"b": 1, "a": 2, "B": 3, "é": 4, "😀": 5, "\ue000": 6, "": 7},
        '{"":7,"B":3,"a":2,"b":1,"é":4,"\ue000":6,"😀":5}'.encode(),
    ),
]


@pytest.mark.parametrize(("value", "expected"), GOLDEN, ids=lambda v: repr(v)[:40])
def test_golden_encodings(value: Any, expected: bytes) -> None:
    assert canonical(value) == expected


@pytest.mark.parametrize(("value", "expected"), GOLDEN, ids=lambda v: repr(v)[:40])
def test_golden_encodings_round_trip(value: Any, expected: bytes) -> None:
    decoded = loads(expected)
    assert canonical(decoded) == expected
    assert decoded == json.loads(expected)
    if not isinstance(value, tuple):
        assert decoded == value


def test_canonical_matches_sorted_compact_stdlib_json_without_floats() -> None:
    value = {"k": ["x", {"é": 1, "a": None}, True], "A": {"😀": "ü", "\ue000": ""}}
    stdlib = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    assert canonical(value) == stdlib.encode()


def test_loads_accepts_str_and_bytes() -> None:
    assert loads('{"a":[1,2.5,"é"]}') == loads('{"a":[1,2.5,"é"]}'.encode()) == {"a": [1, 2.5, "é"]}


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (float("nan"), "$"),
        (float("inf"), "$"),
        (float("-inf"), "$"),
        ({"a": [0, float("nan")]}, "$.a[1]"),
        ({"a": {"b": [1, 2, {"c": float("inf")}]}}, "$.a.b[2].c"),
        ([[float("-inf")]], "$[0][0]"),
        ((1, float("nan")), "$[1]"),
    ],
)
def test_refuses_nan_and_infinities_naming_the_path(value: Any, path: str) -> None:
    with pytest.raises(InvalidData, match=re.escape(path) + r": .* is not valid JSON"):
        canonical(value)


def test_refuses_nan_even_next_to_a_string_that_spells_null() -> None:
    with pytest.raises(InvalidData, match=r"\$\.b: nan"):
        canonical({"a": "null", "b": float("nan")})


def test_refuses_nan_beside_a_none() -> None:
    """A null the data holds (None) and one orjson wrote for a NaN, in the same value."""
    with pytest.raises(InvalidData, match=r"\$\.b\[1\]: nan"):
        canonical({"a": None, "b": [None, float("nan")]})


@pytest.mark.parametrize(
    ("value", "path", "key"),
    [
        ({1: "x"}, "$", "1"),
        ({"a": {(1, 2): 0}}, "$.a", "(1, 2)"),
        ({"a": [{None: 1}]}, "$.a[0]", "None"),
        ({"ok": 1, True: 2}, "$", "True"),
    ],
)
def test_refuses_non_string_keys(value: Any, path: str, key: str) -> None:
    with pytest.raises(InvalidData, match=re.escape(f"{path}: key {key} is not a string")):
        canonical(value)


@dataclasses.dataclass
class Point:
    x: int


class Colour(enum.Enum):
    RED = "red"


@pytest.mark.parametrize(
    ("bad", "name"),
    [
        ({1, 2}, "set"),
        (frozenset({1}), "frozenset"),
        (b"bytes", "bytes"),
        (bytearray(b"x"), "bytearray"),
        (datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC), "datetime"),
        (datetime.date(2025, 1, 1), "date"),
        (Point(1), "Point"),
        (decimal.Decimal("1.5"), "Decimal"),
        (object(), "object"),
        (OrderedDict(a=1), "OrderedDict"),
        (1 + 2j, "complex"),
    ],
)
def test_refuses_values_that_are_not_plain_json(bad: Any, name: str) -> None:
    with pytest.raises(InvalidData, match=re.escape(f"$.a[1]: {name} is not plain JSON")):
        canonical({"a": [0, bad]})
    with pytest.raises(InvalidData, match=re.escape(f"$: {name} is not plain JSON")):
        canonical(bad)


class Size(enum.IntEnum):
    ONE = 1


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (Colour.RED, b'"red"'),
        (Size.ONE, b"1"),
        (uuid.UUID(int=5), b'"00000000-0000-0000-0000-000000000005"'),
    ],
)
def test_orjson_native_values_are_written_as_their_json_value(value: Any, encoded: bytes) -> None:
    # Documented in codec.py: orjson cannot be told to refuse these, so they are encoded as
    # their value; stores hand back the decoded bytes, so records equal later reads.
    assert canonical({"a": [0, value]}) == b'{"a":[0,' + encoded + b"]}"
    with pytest.raises(InvalidData):
        check_plain(value)


def test_refuses_subclasses_of_plain_types() -> None:
    class Text(str):
        pass

    class Number(int):
        pass

    for bad in (Text("x"), Number(1), {"a": Text("x")}):
        with pytest.raises(InvalidData):
            canonical(bad)


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (2**64, "$"),
        (-(2**63) - 1, "$"),
        (10**30, "$"),
        ({"a": [1, 2**70]}, "$.a[1]"),
        ({"n": -(2**64)}, "$.n"),
    ],
)
def test_refuses_integers_beyond_64_bits(value: Any, path: str) -> None:
    with pytest.raises(InvalidData, match=re.escape(f"{path}: integer does not fit in 64 bits")):
        canonical(value)


def test_accepts_the_64_bit_integer_limits() -> None:
    assert loads(canonical([2**64 - 1, -(2**63), 2**63])) == [2**64 - 1, -(2**63), 2**63]


def _nested_lists(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


def _nested_dicts(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = {"k": value}
    return value


@pytest.mark.parametrize("nest", [_nested_lists, _nested_dicts])
def test_accepts_nesting_up_to_max_depth(nest: Any) -> None:
    value = nest(MAX_DEPTH)
    check_plain(value)
    assert loads(canonical(value)) == value


@pytest.mark.parametrize("nest", [_nested_lists, _nested_dicts])
def test_check_plain_refuses_nesting_deeper_than_max_depth(nest: Any) -> None:
    with pytest.raises(InvalidData, match=f"nested deeper than {MAX_DEPTH} levels"):
        check_plain(nest(MAX_DEPTH + 1))


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 200])
@pytest.mark.parametrize("nest", [_nested_lists, _nested_dicts])
def test_canonical_refuses_nesting_deeper_than_max_depth(nest: Any, levels: int) -> None:
    # BUG: canonical() only walks the value when orjson fails or writes "null", so data nested
    # deeper than MAX_DEPTH (but within orjson's own limit of 254) is accepted.
    with pytest.raises(InvalidData, match=f"nested deeper than {MAX_DEPTH} levels"):
        canonical(nest(levels))


def test_canonical_refuses_nesting_beyond_orjsons_limit() -> None:
    with pytest.raises(InvalidData, match=f"nested deeper than {MAX_DEPTH} levels"):
        canonical(_nested_lists(300))


def test_invalid_data_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        canonical(float("nan"))


def test_check_plain_accepts_plain_json() -> None:
    check_plain({"a": [1, 2.5, "x", None, True, {"b": ()}], "": -(2**63)})


def test_canonical_does_not_mutate_its_input() -> None:
    value = {"b": [3, 1, 2], "a": {"d": 1, "c": 2}}
    snapshot = json.dumps(value)
    canonical(value)
    assert json.dumps(value) == snapshot


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(value=_JSON)
def test_canonical_decoded_is_canonical_for_decoded_json(value: Any) -> None:
    """The import's encoding of decoded JSON (no NaN check): the same bytes as `canonical`."""
    decoded = loads(canonical(value))
    assert canonical_decoded(decoded) == canonical(decoded)


@pytest.mark.parametrize("nest", [_nested_lists, _nested_dicts])
def test_canonical_decoded_refuses_what_is_not_plain_or_too_deep(nest: Any) -> None:
    with pytest.raises(InvalidData, match=f"nested deeper than {MAX_DEPTH} levels"):
        canonical_decoded(nest(MAX_DEPTH + 1))
    with pytest.raises(InvalidData):
        canonical_decoded({"a": {1, 2}})
    with pytest.raises(InvalidData):
        canonical_decoded({1: "a"})
