"""Bit-flip sweep (issue 9, RELIABILITY A5): no flipped bit passes for a torn tail.

Logs of 1, 2 and 50 records are built by a real store. Every single-bit flip of the last
record, of the last two records, and a sample of every other record must be found as damage
(never "ok", never a torn tail that the next writer would cut), naming the flipped record or
the one before it (a flipped newline joins two lines). A sample of the flips is also opened by
a real store: `verify` fails with the ordinal, an append is refused and changes nothing, and
`rebuild` keeps the file.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from threadlog import EmbeddedStore, IntegrityError
from threadlog.store.embedded.rollout import scan


@dataclass(frozen=True)
class Log:
    thread: str
    rel: str
    data: bytes
    starts: list[int]
    """Byte offset of each line (ord ``i + 1`` starts at ``starts[i]``)."""

    def ord_at(self, offset: int) -> int:
        return max(i for i, start in enumerate(self.starts) if start <= offset) + 1


def _build(home: Path, records: int) -> Log:
    with EmbeddedStore(home) as store:
        thread = store.create_thread("tester", title="bit flips")
        for i in range(records - 1):
            store.append(thread, "custom.note", {"i": i, "text": f"note {i} @ x"}, durable=True)
        path = Path(store.path_of(thread))
    data = path.read_bytes()
    starts = [0]
    for line in data.splitlines(keepends=True)[:-1]:
        starts.append(starts[-1] + len(line))
    assert len(starts) == records
    return Log(thread, str(path.relative_to(home)), data, starts)


@pytest.fixture(scope="module", params=[1, 2, 50], ids=lambda n: f"{n}-records")
def log(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Log:
    return _build(tmp_path_factory.mktemp("template"), request.param)


def _flips(log: Log, seed: int = 9) -> list[tuple[int, int]]:
    """(byte, bit) of every flip to try: every bit of the last two lines, 3 random bits of
    every other line."""
    rng = random.Random(seed)
    n = len(log.starts)
    every_from = log.starts[max(0, n - 2)]
    flips = [(byte, bit) for byte in range(every_from, len(log.data)) for bit in range(8)]
    for i in range(max(0, n - 2)):
        end = log.starts[i + 1]
        flips += [(rng.randrange(log.starts[i], end), rng.randrange(8)) for _ in range(3)]
    return flips


def _flipped(log: Log, byte: int, bit: int) -> bytes:
    damaged = bytearray(log.data)
    damaged[byte] ^= 1 << bit
    return bytes(damaged)


def test_no_flip_verifies_clean_or_passes_for_a_torn_tail(log: Log) -> None:
    flips = _flips(log)
    clean, torn, misplaced = [], [], []
    for byte, bit in flips:
        scanned = scan(_flipped(log, byte, bit), log.thread)
        if scanned.error is None:
            (torn if scanned.torn is not None else clean).append((byte, bit))
            continue
        ord_ = log.ord_at(byte)
        if scanned.error.ord not in (ord_, ord_ - 1) and not (
            log.data[byte : byte + 1] == b"\n" and scanned.error.ord == ord_
        ):
            misplaced.append((byte, bit, scanned.error.ord))
    assert len(flips) >= 8 * len(log.data[log.starts[max(0, len(log.starts) - 2)] :])
    assert clean == [], f"{len(clean)} flips verify clean"
    assert torn == [], f"{len(torn)} flips pass for a torn tail (the next writer cuts a record)"
    assert misplaced == [], misplaced[:5]


def test_a_store_refuses_flipped_logs_and_keeps_them(log: Log, tmp_path: Path) -> None:
    """Sampled end to end: verify fails naming the ord, the writer refuses and cuts nothing,
    rebuild keeps the file (a damaged thread is reported, never unlinked)."""
    n = len(log.starts)
    last = log.starts[-1]
    newline = len(log.data) - 1
    sample = [(newline, bit) for bit in range(8)]  # the last newline, overwritten
    sample += [(last, 0), (last + 1, 5), (len(log.data) - 3, 1), (len(log.data) - 70, 2)]
    if n > 1:
        sample += [(last - 1, 0), (last - 1, 6)]  # the newline before the last line
    for k, (byte, bit) in enumerate(sample):
        home = tmp_path / f"home{k}"
        path = home / log.rel
        path.parent.mkdir(parents=True)
        content = _flipped(log, byte, bit)
        path.write_bytes(content)
        with EmbeddedStore(home) as store:
            report = store.verify(log.thread)
            assert not report.ok, (byte, bit, report.to_dict())
            assert report.first_bad_ord in (log.ord_at(byte), log.ord_at(byte) - 1)
            with pytest.raises(IntegrityError):
                store.append(log.thread, "custom.note", {"must": "not be written"})
            store.rebuild()
            assert log.thread in store.thread_ids()
            assert [t.damage is not None for t in store.threads()] == [True]
        assert path.read_bytes() == content, (byte, bit)
