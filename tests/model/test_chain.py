"""The hash chain: each record's hash covers its canonical bytes; ``prev`` links the records."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.model.records import Chain, created, encode, make_record
from threadlog.model.envelope import BadRecord, Record, parse_line
from threadlog.model.events import InputQueued, ToolCallProposed, TurnStarted
from threadlog.model.ids import uuid7


@pytest.fixture
def chain() -> Chain:
    c = Chain()
    c.add(
        created(model="m"),
        TurnStarted(turn_id="turn-1", input="héllo"),
        InputQueued(input_id="in-1", text="also"),
        ToolCallProposed(
            turn_id="turn-1", call_id="c1", tool="ls", args={"path": "."}, side_effect="read_only"
        ),
    )
    return c


def _expected_hash(record: Record) -> str:
    body = {k: v for k, v in record.to_dict().items() if k != "hash"}
    raw = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()


def test_records_link_to_their_predecessor(chain: Chain) -> None:
    records = chain.records
    assert [r.ord for r in records] == [1, 2, 3, 4]
    assert records[0].prev is None
    for before, after in zip(records, records[1:], strict=False):
        assert after.prev == before.hash
        assert after.parent == before.id


def test_hash_covers_the_canonical_record_without_the_hash(chain: Chain) -> None:
    for record in chain.records:
        assert record.hash == _expected_hash(record)


def test_lines_parse_back_to_the_same_records(chain: Chain) -> None:
    assert [parse_line(line) for line in chain.lines()] == chain.records


def test_the_hash_depends_on_every_envelope_field() -> None:
    event = ("custom.x", {"a": 1})
    base = make_record(event, ord=2, prev="a" * 64, parent="p")
    variants = [
        make_record(("custom.x", {"a": 2}), ord=2, prev="a" * 64, parent="p"),
        make_record(("custom.y", {"a": 1}), ord=2, prev="a" * 64, parent="p"),
        make_record(event, ord=3, prev="a" * 64, parent="p"),
        make_record(event, ord=2, prev="b" * 64, parent="p"),
        make_record(event, ord=2, prev=None, parent="p"),
        make_record(event, ord=2, prev="a" * 64, parent=None),
        make_record(event, ord=2, prev="a" * 64, parent="p", thread=uuid7(1, bytes(10))),
        parse_line(encode(event, ord=2, prev="a" * 64, parent="p", id=uuid7(2, bytes(10)))),
    ]
    hashes = {base.hash, *(v.hash for v in variants)}
    assert len(hashes) == len(variants) + 1


def test_tampering_with_a_record_breaks_the_link_to_the_next(chain: Chain) -> None:
    victim, successor = chain.records[2], chain.records[3]
    resealed = make_record(
        (victim.type, {**victim.data, "text": "changed"}),
        ord=victim.ord,
        prev=victim.prev,
        parent=victim.parent,
    )
    assert resealed.hash != victim.hash
    assert successor.prev == victim.hash != resealed.hash


FLIPS = (0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0xFF)


def _assert_never_the_same(original: Record, damaged: bytes) -> None:
    try:
        parsed = parse_line(damaged)
    except BadRecord:
        return
    assert parsed != original
    assert parsed.hash != original.hash


@pytest.mark.parametrize("index", [0, 1, 3])
def test_any_single_byte_flip_is_detected(chain: Chain, index: int) -> None:
    line = chain.lines()[index]
    original = parse_line(line)
    for offset in range(len(line)):
        for mask in FLIPS:
            damaged = bytearray(line)
            damaged[offset] ^= mask
            _assert_never_the_same(original, bytes(damaged))


def test_any_single_byte_flip_is_refused_outright(chain: Chain) -> None:
    # Stronger than "never the same record": with the hash over the body and the body check
    # over the hash, one changed byte cannot produce a record that verifies at all.
    line = chain.lines()[1]
    for offset in range(len(line)):
        for mask in FLIPS:
            damaged = bytearray(line)
            damaged[offset] ^= mask
            with pytest.raises(BadRecord):
                parse_line(bytes(damaged))


def test_deleting_or_inserting_a_byte_is_refused(chain: Chain) -> None:
    line = chain.lines()[1]
    for offset in range(len(line)):
        with pytest.raises(BadRecord):
            parse_line(line[:offset] + line[offset + 1 :])
        with pytest.raises(BadRecord):
            parse_line(line[:offset] + b" " + line[offset:])
