"""Byte-level re-homing of rollout lines (what a fork does to the copied prefix)."""

from __future__ import annotations

import pytest

from threadlog.model import codec
from threadlog.model.envelope import BadRecord, encode_record, parse_line, rehome_lines

SOURCE = "01a22a49-510c-7584-9d29-5f2f1ad5387a"
CHILD = "01a22a49-510c-7584-9d29-5f2f1ad5387b"


def chain(n: int, thread: str = SOURCE) -> tuple[list[bytes], list[str]]:
    lines, hashes, prev = [], [], None
    for i in range(1, n + 1):
        line, prev = encode_record(
            id=f"01a22a49-510c-7584-9d29-5f2f1ad5{i:04d}",
            thread=thread,
            ord=i,
            parent=None if i == 1 else f"01a22a49-510c-7584-9d29-5f2f1ad5{i - 1:04d}",
            ts="2026-11-30T00:00:00.000000Z",
            type="custom.x",
            data_json=codec.canonical({"i": i, "thread": SOURCE}),
            prev=prev,
        )
        lines.append(line[:-1])
        hashes.append(prev)
    return lines, hashes


def test_rehomed_lines_are_valid_records_of_the_child() -> None:
    lines, hashes = chain(5)
    out, last = rehome_lines(
        lines[1:], thread=CHILD, prev="f" * 64, expect_prev=hashes[0], source=SOURCE
    )
    prev = "f" * 64
    for original, copy in zip(lines[1:], out, strict=True):
        record, before = parse_line(copy), parse_line(original + b"\n")
        assert record.thread == CHILD and record.prev == prev
        assert (record.ord, record.id, record.data, record.parent) == (
            before.ord,
            before.id,
            before.data,
            before.parent,
        )
        prev = record.hash
    assert last == prev


def test_a_damaged_line_is_refused_with_its_position() -> None:
    lines, hashes = chain(5)
    lines[2] = lines[2].replace(b'"i":3', b'"i":4')
    with pytest.raises(BadRecord) as info:
        rehome_lines(lines[1:], thread=CHILD, prev=None, expect_prev=hashes[0])
    assert info.value.index == 1  # type: ignore[attr-defined]


def test_a_broken_chain_and_a_foreign_record_are_refused() -> None:
    lines, hashes = chain(4)
    with pytest.raises(BadRecord, match="chain"):
        rehome_lines(lines[2:], thread=CHILD, prev=None, expect_prev=hashes[0])
    foreign, foreign_hashes = chain(3, thread="01a22a49-510c-7584-9d29-5f2f1ad5ffff")
    with pytest.raises(BadRecord, match="another thread"):
        rehome_lines(
            foreign[1:], thread=CHILD, prev=None, expect_prev=foreign_hashes[0], source=SOURCE
        )
