"""`scan_file` reads a rollout a piece at a time: whatever the piece size, its verdict is the
one a scan of the whole file in memory gives (records, offsets, end, torn tail, damage)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from threadlog import EmbeddedStore
from threadlog.store.embedded import rollout

if TYPE_CHECKING:
    from pathlib import Path

PIECES = (150, 700, 4096, 1 << 20)


def _verdict(scan: rollout.Scan) -> tuple[object, ...]:
    error = scan.error
    torn = scan.torn
    return (
        [r.hash for r in scan.records],
        scan.offsets,
        scan.end,
        None if torn is None else (torn.offset, torn.size, torn.completes),
        None if error is None else (error.ord, error.offset, str(error)),
    )


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, bytes, list[int]]:
    home = str(tmp_path_factory.mktemp("scan") / "home")
    with EmbeddedStore(home) as store:
        thread = store.create_thread("tester")
        for i in range(60):
            store.append(thread, "custom.n", {"i": i, "pad": "p" * (i * 7 % 90)})
        path = store.path_of(thread)
    with open(path, "rb") as f:
        data = f.read()
    starts = [0] + [i + 1 for i, b in enumerate(data) if b == 0x0A][:-1]
    return thread, data, starts


def _variants(data: bytes, starts: list[int]) -> dict[str, bytes]:
    mid, late = starts[30], starts[-2]
    flipped = bytearray(data)
    flipped[mid + 40] ^= 0x01
    last_flipped = bytearray(data)
    last_flipped[late + 40] ^= 0x01
    zeros = b"\0" * 40 + b"\n"
    return {
        "intact": data,
        "torn fragment": data + data[starts[5] : starts[5] + 37],
        "cut inside the last line": data[: starts[-1] + 20],
        "last newline missing": data[:-1],
        "zero debris at the end": data + zeros + zeros,
        "zero debris, then a valid record": data[: starts[40]] + zeros + data[starts[40] :],
        "a flipped byte in the middle": bytes(flipped),
        "a flipped byte near the end": bytes(last_flipped),
        "a line twice": data[: starts[20]] + data[starts[19] :],
        "garbage line in the middle": data[:mid] + b"not json\n" + data[mid:],
    }


@pytest.mark.parametrize("piece", PIECES)
def test_every_piece_size_gives_the_whole_scan_verdict(
    log: tuple[str, bytes, list[int]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    piece: int,
) -> None:
    thread, data, starts = log
    monkeypatch.setattr(rollout, "FILE_CHUNK", piece)
    for name, content in _variants(data, starts).items():
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(content)
        whole = rollout.scan(content, thread)
        assert _verdict(rollout.scan_file(str(path), thread)) == _verdict(whole), name
        for end in (starts[25], starts[25] + 11, len(content) - 3):  # a durable end
            cut = rollout.scan(content[:end], thread)
            got = rollout.scan_file(str(path), thread, end=end)
            assert _verdict(got) == _verdict(cut), (name, end)


def test_a_line_longer_than_a_piece_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rollout, "FILE_CHUNK", 64)
    with EmbeddedStore(str(tmp_path / "home")) as store:
        thread = store.create_thread("tester")
        store.append(thread, "custom.big", {"text": "y" * 5000})
        store.append(thread, "custom.n", {"i": 1})
        path = store.path_of(thread)
    scanned = rollout.scan_file(path, thread)
    assert [r.type for r in scanned.records] == ["thread.created", "custom.big", "custom.n"]
    assert scanned.error is None and scanned.torn is None


@pytest.mark.parametrize("piece", PIECES)
def test_a_fork_is_judged_as_a_whole_scan_judges_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, piece: int
) -> None:
    with EmbeddedStore(str(tmp_path / "home")) as store:
        parent = store.create_thread("tester")
        for i in range(30):
            store.append(parent, "custom.n", {"i": i})
        child = store.fork(parent, 25)
        store.append(child, "custom.n", {"i": -1})
        path = store.path_of(child)
    with open(path, "rb") as f:
        data = f.read()
    monkeypatch.setattr(rollout, "FILE_CHUNK", piece)
    inside = data.index(b"\n", len(data) // 2) + 1  # ends inside the inherited records
    for name, content in {"whole": data, "ends inside its prefix": data[:inside]}.items():
        cut = tmp_path / "fork.jsonl"
        cut.write_bytes(content)
        expected = _verdict(rollout.scan(content, child))
        assert _verdict(rollout.scan_file(str(cut), child)) == expected, name
    assert rollout.scan(data[:inside], child).error is not None  # (the case is damage)
