"""`parse_next`, the scan's fused parse: it accepts a line only when `parse_line` and the
scan's own checks would, and then gives the same record (its strings shared)."""

from __future__ import annotations

import hashlib

import pytest

from tests.model.records import THREAD, encode, record_id
from threadlog.model.envelope import BadRecord, Record, parse_line, parse_next

PREV = "ab" * 32
DATA = {"text": "héllo", "n": [1, 2.5, None, True]}


def _line(**kw: object) -> bytes:
    fields: dict[str, object] = {"ord": 2, "prev": PREV, "parent": record_id(1)}
    fields.update(kw)
    return encode(("custom.note", DATA), **fields)  # type: ignore[arg-type]


def _next(
    line: bytes,
    *,
    thread: str = THREAD,
    ord: int = 2,
    prev: str = PREV,
    last_id: str | None = None,
) -> Record | None:
    """parse_next of ``line`` up to its first newline, inside a larger buffer (as a scan
    reads it: the line it gives ends at the newline it found)."""
    data = b"x\n" + line + b"y\n"
    end = data.find(b"\n", 2) + 1
    return parse_next(data, memoryview(data), 2, end, thread, ord, prev, last_id)


def test_a_valid_next_line_gives_parse_lines_record() -> None:
    line = _line()
    parse_line(line)  # (parse_next knows only the type names parse_line has checked)
    record = _next(line)
    assert record == parse_line(line)


def test_it_shares_the_strings_a_log_repeats() -> None:
    line = _line()
    parse_line(line)
    thread, prev, last_id = "".join(THREAD), "".join(PREV), "".join(record_id(1))
    record = _next(line, thread=thread, prev=prev, last_id=last_id)
    assert record is not None
    assert record.thread is thread and record.prev is prev and record.parent is last_id


def test_it_leaves_a_type_name_not_checked_yet_to_parse_line() -> None:
    line = encode(("custom.never_seen_before_here", DATA), ord=2, prev=PREV)
    assert _next(line) is None
    parse_line(line)
    assert _next(line) == parse_line(line)


@pytest.mark.parametrize(
    ("kw", "check"),
    [
        ({}, {"thread": record_id(9)}),  # another thread's record
        ({}, {"ord": 3}),  # not the ordinal expected
        ({}, {"prev": "cd" * 32}),  # not chained on the previous record
    ],
)
def test_it_refuses_a_record_the_scan_would(
    kw: dict[str, object], check: dict[str, object]
) -> None:
    line = _line(**kw)
    parse_line(line)
    assert _next(line, **check) is None  # type: ignore[arg-type]


def test_it_accepts_no_line_parse_line_refuses() -> None:
    """Every byte of a valid line changed (one at a time, to a few values), and lines cut
    short or sealed with a hash over other bytes: parse_next accepts one only if parse_line
    does, and then gives the same record."""
    line = _line()
    parse_line(line)
    variants = [line[:cut] + b"\n" for cut in range(len(line) - 1)]
    for i in range(len(line)):
        for byte in (b"0", b" ", b'"', b"\\", b"}", b"\x00", bytes([line[i] ^ 1])):
            if byte[0] != line[i]:
                variants.append(line[:i] + byte + line[i + 1 :])
    body = line[: -(len(b',"hash":"') + 64 + 3)] + b"}"
    for body_variant in (
        body.replace(b'"v":1', b'"v":true'),
        body.replace(b'"ord":2', b'"ord":2.0'),
    ):
        digest = hashlib.sha256(body_variant).hexdigest().encode()
        variants.append(body_variant[:-1] + b',"hash":"' + digest + b'"}\n')
    accepted = 0
    for variant in variants:
        got = _next(variant)
        if got is None:
            continue
        accepted += 1
        try:
            expected = parse_line(variant[: variant.find(b"\n") + 1])
        except BadRecord as exc:  # pragma: no cover - the failure this test looks for
            raise AssertionError(f"parse_next accepted {variant!r}: {exc}") from None
        assert got == expected
    assert accepted == 0  # (no changed byte leaves a valid record with the same hash)
