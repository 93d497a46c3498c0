"""Byte-level verification of rollout lines (what a fork runs over the records it inherits)."""

from __future__ import annotations

import pytest

from threadlog.model import codec
from threadlog.model.envelope import BadRecord, encode_record, verify_lines

SOURCE = "01a22a49-510c-7584-9d29-5f2f1ad5387a"
OTHER = "01a22a49-510c-7584-9d29-5f2f1ad5ffff"


def chain(n: int, thread: str = SOURCE) -> tuple[bytes, list[int], list[str]]:
    """``n`` chained lines of ``thread``, the offset where each starts, and their hashes."""
    lines, hashes, prev = [], [], None
    for i in range(1, n + 1):
        line, prev = encode_record(
            id=f"01a22a49-510c-7584-9d29-5f2f1ad5{i:04d}",
            thread=thread,
            ord=i,
            parent=None if i == 1 else f"01a22a49-510c-7584-9d29-5f2f1ad5{i - 1:04d}",
            ts="2026-11-30T00:00:00.000000Z",
            type="custom.x",
            # a payload that imitates the envelope's fields must not confuse the byte parser
            data_json=codec.canonical({"i": i, "prev": "x", "thread": OTHER}),
            prev=prev,
        )
        lines.append(line)
        hashes.append(prev)
    starts = [sum(len(x) for x in lines[:i]) for i in range(n + 1)]
    return b"".join(lines), starts, hashes


def test_a_valid_chain_verifies_and_returns_its_last_hash() -> None:
    data, starts, hashes = chain(5)
    assert verify_lines(data, starts[1], len(data), prev=hashes[0]) == hashes[4]
    assert verify_lines(data, 0, len(data), prev=None) == hashes[4]
    assert verify_lines(data, starts[2], starts[2], prev=hashes[1]) == hashes[1]


@pytest.mark.parametrize(
    ("damage", "reason", "index"),
    [
        (lambda d: d.replace(b'"i":3', b'"i":4'), "hash does not match", 1),
        (lambda d: d.replace(b'"ord":3', b'"ord":9'), "hash does not match", 1),
        (lambda d: d[:-1], "no terminating newline", 3),
        # the line of ord 3 closed by "] instead of "}: the hash does not cover those bytes
        (lambda d: d.replace(b'"}\n{"data":{"i":4', b'"]\n{"data":{"i":4'), "hash does not", 1),
    ],
)
def test_damage_is_refused_with_its_position(damage: object, reason: str, index: int) -> None:
    data, starts, hashes = chain(5)
    damaged = damage(data)  # type: ignore[operator]
    with pytest.raises(BadRecord, match=reason) as info:
        verify_lines(damaged, starts[1], len(damaged), prev=hashes[0])
    assert info.value.index == index  # type: ignore[attr-defined]
    assert info.value.offset == starts[1 + index]  # type: ignore[attr-defined]


def test_a_broken_chain_and_debris_are_refused() -> None:
    data, starts, hashes = chain(4)
    with pytest.raises(BadRecord, match="chain"):
        verify_lines(data, starts[2], len(data), prev=hashes[0])
    with pytest.raises(BadRecord, match="too short"):
        verify_lines(b"{}\n", 0, 3, prev=None)


def test_the_writer_is_checked_when_given() -> None:
    data, starts, hashes = chain(3)
    assert verify_lines(data, starts[1], len(data), prev=hashes[0], thread=SOURCE) == hashes[2]
    with pytest.raises(BadRecord, match="does not belong to thread") as info:
        verify_lines(data, starts[1], len(data), prev=hashes[0], thread=OTHER)
    assert info.value.index == 0  # type: ignore[attr-defined]


def test_an_empty_range_returns_prev_as_given() -> None:
    assert verify_lines(b"", 0, 0, prev="é") == "é"
    assert verify_lines(b"", 0, 0, prev=None) is None
