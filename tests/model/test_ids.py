from __future__ import annotations

import datetime
import random
import re

import pytest

from threadlog._clock import rfc3339
from threadlog.model.ids import derived_id, is_uuid, uuid7, uuid7_from_bits, uuid7_millis

UUID_SHAPE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
MS = 1_700_000_000_123


def _bits(uuid: str) -> int:
    return int(uuid.replace("-", ""), 16)


@pytest.mark.parametrize("rand", [bytes(10), b"\xff" * 10, bytes(range(1, 11)), b"\xa5" * 16])
def test_uuid7_format_version_and_variant(rand: bytes) -> None:
    u = uuid7(MS, rand)
    assert UUID_SHAPE.fullmatch(u)
    assert is_uuid(u)
    value = _bits(u)
    assert (value >> 76) & 0xF == 7  # version
    assert (value >> 62) & 0b11 == 0b10  # RFC 9562 variant
    assert u[14] == "7"
    assert u[19] in "89ab"


def test_uuid7_places_timestamp_and_random_bits() -> None:
    u = uuid7(MS, b"\xff" * 10)
    value = _bits(u)
    assert value >> 80 == MS
    assert (value >> 64) & 0x0FFF == 0x0FFF  # rand_a: 12 bits of the first two bytes
    assert value & ((1 << 62) - 1) == (1 << 62) - 1  # rand_b: 62 bits
    assert uuid7(MS, bytes(10)) == "018bcfe5-687b-7000-8000-000000000000"


def test_uuid7_uses_only_the_first_ten_random_bytes() -> None:
    assert uuid7(MS, bytes(range(10)) + b"extra") == uuid7(MS, bytes(range(10)))


def test_uuid7_needs_ten_random_bytes() -> None:
    with pytest.raises(ValueError, match="10 random bytes"):
        uuid7(MS, bytes(9))


def test_uuid7_is_deterministic() -> None:
    assert uuid7(MS, bytes(range(10))) == uuid7(MS, bytes(range(10)))
    assert uuid7(MS, bytes(range(10))) != uuid7(MS, bytes(range(1, 11)))


def test_uuid7_sorts_by_time_whatever_the_random_bits() -> None:
    times = [0, 1, 999, MS - 1, MS, MS + 1, 2**47, 2**48 - 1]
    # Highest random bits at the earlier time, lowest at the later one: time still wins.
    ids = [uuid7(t, b"\xff" * 10 if i % 2 == 0 else bytes(10)) for i, t in enumerate(times)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("ms", [0, 1, MS, 2**48 - 1])
def test_uuid7_millis_round_trips(ms: int) -> None:
    assert uuid7_millis(uuid7(ms, bytes(range(10)))) == ms


def test_uuid7_keeps_the_low_48_bits_of_the_time() -> None:
    assert uuid7_millis(uuid7(2**48 + 5, bytes(10))) == 5


def test_derived_id_is_deterministic_and_uuid_shaped() -> None:
    a = derived_id("tool_call.started", "thread", "call-1", "1")
    assert a == derived_id("tool_call.started", "thread", "call-1", "1")
    assert is_uuid(a)
    value = _bits(a)
    assert (value >> 76) & 0xF == 8  # version 8: custom
    assert (value >> 62) & 0b11 == 0b10


def test_derived_id_is_stable_across_versions() -> None:
    # De-duplication relies on the same inputs giving the same id in every release.
    assert derived_id("ns") == "e2942423-64ea-8d42-a831-387a6eb67768"
    assert derived_id("tool_call.started", "t", "c", "1") == "498e6510-e6c0-8ca0-9271-768000fdb7c8"


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (("ns", "x"), ("ns2", "x")),  # namespace
        (("ns", "x"), ("ns", "y")),  # part
        (("ns", "a", "b"), ("ns", "b", "a")),  # order
        (("ns", "ab"), ("ns", "a", "b")),  # where the parts split
        (("ns", "a"), ("ns", "a", "")),  # number of parts
        (("ns",), ("ns", "")),
        (("ns", "1"), ("ns", "01")),
    ],
)
def test_derived_id_differs_per_input(a: tuple[str, ...], b: tuple[str, ...]) -> None:
    assert derived_id(*a) != derived_id(*b)


def test_derived_id_is_injective_even_when_a_part_contains_the_separator() -> None:
    # BUG: parts are joined with "\x1f", so a part that contains "\x1f" collides with two
    # parts (e.g. a model-chosen call_id). A length-prefixed or JSON-array encoding fixes it.
    assert derived_id("ns", "a\x1fb") != derived_id("ns", "a", "b")
    assert derived_id("ns\x1fa") != derived_id("ns", "a")


def test_derived_ids_are_distinct_over_many_inputs() -> None:
    ids = {
        derived_id("tool_call.started", "t", f"call-{i}", str(n)) for i in range(50) for n in (1, 2)
    }
    assert len(ids) == 100


@pytest.mark.parametrize(
    "value",
    [
        "018bcfe5-687b-7000-8000-000000000000",
        "00000000-0000-0000-0000-000000000000",
        "ffffffff-ffff-ffff-ffff-ffffffffffff",
    ],
)
def test_is_uuid_accepts_lower_case_hyphenated(value: str) -> None:
    assert is_uuid(value)


@pytest.mark.parametrize(
    "value",
    [
        "018BCFE5-687B-7000-8000-000000000000",  # upper case
        "018bcfe5687b70008000000000000000",  # no hyphens
        "{018bcfe5-687b-7000-8000-000000000000}",
        "urn:uuid:018bcfe5-687b-7000-8000-000000000000",
        "018bcfe5-687b-7000-8000-00000000000",  # short
        "018bcfe5-687b-7000-8000-0000000000000",  # long
        "018bcfe5-687b-7000-8000-00000000000g",
        " 018bcfe5-687b-7000-8000-000000000000",
        "",
        None,
        123,
        b"018bcfe5-687b-7000-8000-000000000000",
    ],
)
def test_is_uuid_refuses_other_forms(value: object) -> None:
    assert not is_uuid(value)


def test_is_uuid_refuses_a_trailing_newline() -> None:
    # BUG: ``_UUID_RE.match`` with ``$`` also matches just before a final "\n", so an id or a
    # thread id ending in a newline passes (and reaches file paths). Use ``fullmatch``/``\Z``.
    assert not is_uuid("018bcfe5-687b-7000-8000-000000000000\n")


def test_uuid7_from_bits_is_uuid7_of_the_same_bits() -> None:
    # uuid7_from_bits reuses the text of a millisecond's timestamp: ids of one millisecond,
    # of another, and of the first again must all be what uuid7 builds from the same bits.
    rng = random.Random(7)
    stamps = [MS, MS, MS + 1, MS, 0, 2**48 - 1, 2**48 + 5, MS + 1]
    for ms in stamps * 50:
        bits = rng.getrandbits(rng.choice([74, 80, 3]))
        rand = ((bits >> 62) & 0x0FFF).to_bytes(2, "big") + (bits & (2**62 - 1)).to_bytes(8, "big")
        assert uuid7_from_bits(ms, bits) == uuid7(ms, rand)


def test_rfc3339_across_seconds() -> None:
    # the text of the last second is reused (going back to an earlier second must not), and
    # the fraction is two looked-up groups of three digits.
    base = MS * 10**6
    fractions = [5_123, 999_999_999, 1_000_000, 999_999, 1_000, 123_456_789, 0]
    for ns in [base + f for f in fractions] + [(MS + 1000) * 10**6, 0, base, -1]:
        expected = (
            datetime.datetime.fromtimestamp(ns // 10**9, datetime.UTC).strftime(
                "%Y-%m-%dT%H:%M:%S."
            )
            + f"{ns % 10**9 // 1000:06d}Z"
        )
        assert rfc3339(ns) == expected
