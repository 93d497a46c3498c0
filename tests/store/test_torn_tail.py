"""Torn tails are repaired, mid-log damage is refused (RELIABILITY A5, INV-4; rollout.py).

A thread of 30 records is built once and closed (so its journal is checkpointed and gone);
every case writes a manipulated copy of its rollout into a fresh home and opens a store there.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from threadlog import EmbeddedStore, IntegrityError, Record
from threadlog.store.embedded.rollout import scan

RECORDS = 30
MIDDLE = 15


@dataclass(frozen=True)
class Template:
    thread: str
    rel: str
    """The rollout's path relative to the home."""
    data: bytes
    lines: list[bytes]
    records: list[Record]

    @property
    def last_start(self) -> int:
        return len(self.data) - len(self.lines[-1])

    def line_start(self, ord_: int) -> int:
        return sum(len(line) for line in self.lines[: ord_ - 1])


def _build(home: Path, *, journaled: bool = False) -> tuple[EmbeddedStore, str]:
    if not journaled:
        store = EmbeddedStore(home)
        thread = store.create_thread("tester", title="torn tails")
        for i in range(RECORDS - 1):
            store.append(thread, "custom.note", {"i": i, "text": f"note number {i}"}, durable=True)
        return store, thread
    # One group commit spanning two threads goes through the journal (a commit of a single
    # thread's records is written straight to its rollout, with its own fsync).
    store = EmbeddedStore(home, commit_interval=3600)
    thread = store.create_thread("tester", title="torn tails")
    other = store.create_thread("other")
    for i in range(RECORDS - 1):
        store.append(thread, "custom.note", {"i": i, "text": f"note number {i}"}, durable=False)
    store.append(other, "custom.note", {}, durable=False)
    store.flush()
    return store, thread


def _template(store: EmbeddedStore, thread: str, home: Path) -> Template:
    path = store.path_of(thread)
    data = Path(path).read_bytes()
    records = store.read(thread)
    assert [r.ord for r in records] == list(range(1, RECORDS + 1))
    return Template(
        thread, os.path.relpath(path, home), data, data.splitlines(keepends=True), records
    )


@pytest.fixture(scope="module")
def tpl(tmp_path_factory: pytest.TempPathFactory) -> Template:
    home = tmp_path_factory.mktemp("template")
    store, thread = _build(home)
    store.close()
    return _template(store, thread, home)


class Homes:
    """Fresh homes holding one manipulated rollout each."""

    def __init__(self, root: Path, tpl: Template) -> None:
        self.root = root
        self.tpl = tpl
        self.count = 0

    def make(self, content: bytes) -> tuple[Path, Path]:
        self.count += 1
        home = self.root / f"home{self.count}"
        path = home / self.tpl.rel
        path.parent.mkdir(parents=True)
        path.write_bytes(content)
        return home, path


@pytest.fixture
def homes(tmp_path: Path, tpl: Template) -> Homes:
    return Homes(tmp_path, tpl)


def _wal_files(home: Path) -> list[Path]:
    return sorted((home / "journal").glob("*.wal"))


def _check_repaired(home: Path, path: Path, tpl: Template, keep: int, torn: bool) -> None:
    """The file holds ``keep`` intact records plus debris: readers see the ``keep`` records,
    an append truncates the debris and gets ord ``keep + 1``."""
    content = path.read_bytes()
    good_end = sum(len(line) for line in tpl.lines[:keep])
    with EmbeddedStore(home) as store:
        assert store.read(tpl.thread) == tpl.records[:keep]
        report = store.verify(tpl.thread)
        assert report.ok and report.records == keep and report.last_ord == keep
        if torn:
            assert report.torn is not None
            assert (report.torn.offset, report.torn.size) == (good_end, len(content) - good_end)
        else:
            assert report.torn is None
        assert path.read_bytes() == content, "a reader or verify changed the file"
        record = store.append(tpl.thread, "custom.note", {"after": "repair"}, durable=True)
        assert record.ord == keep + 1
        assert record.prev == tpl.records[keep - 1].hash
        assert store.read(tpl.thread) == [*tpl.records[:keep], record]
    repaired = path.read_bytes()
    assert repaired[:good_end] == tpl.data[:good_end]
    tail = scan(
        repaired[good_end:],
        tpl.thread,
        base_offset=good_end,
        start_ord=keep + 1,
        prev_hash=tpl.records[keep - 1].hash,
    )
    assert tail.error is None and tail.torn is None and tail.records == [record]
    assert repaired.endswith(b"\n")
    assert not _wal_files(home)
    with EmbeddedStore(home) as store:
        report = store.verify(tpl.thread)
        assert report.ok and report.torn is None and report.records == keep + 1
    assert path.read_bytes() == repaired, "reopening changed the repaired file"


def test_every_cut_inside_the_last_line_is_repaired(
    homes: Homes, tpl: Template, caplog: pytest.LogCaptureFixture
) -> None:
    start = tpl.last_start
    assert len(tpl.lines[-1]) > 200
    for cut in range(start, len(tpl.data) - 1):  # (the last byte alone: the next test)
        home, path = homes.make(tpl.data[:cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="threadlog.store"):
            try:
                _check_repaired(home, path, tpl, RECORDS - 1, torn=cut > start)
            except AssertionError as exc:
                raise AssertionError(f"cut at byte {cut} (last line starts at {start})") from exc
        if cut > start:
            assert f"removing {cut - start} bytes at offset {start}" in caplog.text
        shutil.rmtree(home)


def test_a_last_record_missing_only_its_newline_is_completed_not_cut(
    homes: Homes, tpl: Template
) -> None:
    """A write cut just before its last byte, or a file cut by one byte: the record is whole
    and chains where it belongs, so the repair adds the newline instead of cutting a record
    that may have been acknowledged (no index needed to know it)."""
    home, path = homes.make(tpl.data[:-1])
    with EmbeddedStore(home) as store:
        report = store.verify(tpl.thread)
        assert report.ok and report.torn is not None
        assert report.torn.completes == tpl.records[-1]
        assert store.read(tpl.thread) == tpl.records[:-1]  # not durable-whole yet
        record = store.append(tpl.thread, "custom.note", {"after": "repair"}, durable=True)
        assert record.ord == RECORDS + 1
        assert store.take_repairs(tpl.thread)[0]["kind"] == "torn_tail_completed"
        assert store.read(tpl.thread) == [*tpl.records, record]
    assert path.read_bytes().startswith(tpl.data)


@pytest.mark.parametrize("size", [1, 511, 1024, 4096, 8192])
def test_zeros_after_the_last_line_are_repaired(homes: Homes, tpl: Template, size: int) -> None:
    home, path = homes.make(tpl.data + b"\0" * size)
    _check_repaired(home, path, tpl, RECORDS, torn=True)


@pytest.mark.parametrize(
    "debris",
    [
        pytest.param(
            random.Random(seed).randbytes(size).replace(b"\n", b"x"), id=f"random-{size}-{seed}"
        )
        for seed, size in [(1, 1), (2, 17), (3, 1000), (4, 4096), (5, 8192)]
    ]
    + [
        pytest.param(b"\0" * 100 + b"\n", id="zero-line"),
        pytest.param(b'{"data":{"i":1},"id":"', id="json-prefix"),
        pytest.param(b'{"data":' + b"\0" * 4000 + b'"x"}\n' + b"\0" * 100, id="lost-page-line"),
        pytest.param(b"\0" * 4096 + b"\n" + b"\0" * 10 + b"\n{", id="zero-lines-fragment"),
    ],
)
def test_debris_a_crash_can_leave_is_repaired(homes: Homes, tpl: Template, debris: bytes) -> None:
    """A torn tail is an unterminated fragment or zero-filled lines (RELIABILITY A5)."""
    home, path = homes.make(tpl.data + debris)
    _check_repaired(home, path, tpl, RECORDS, torn=True)


@pytest.mark.parametrize(
    "debris",
    [
        pytest.param(random.Random(seed).randbytes(size) + b"\n", id=f"random-{size}-{seed}")
        for seed, size in [(3, 1000), (4, 4096)]
    ]
    + [
        pytest.param(b"\n\n\n", id="empty-lines"),
        pytest.param(b"garbage\ngarbage\n" * 40, id="text-lines"),
        pytest.param(b"\xff\xfe\x00" * 500 + b"\n" + b"\0" * 100, id="binary-line-and-zeros"),
        pytest.param(b"\0" * 100 + b"\nnot zeros\n", id="zeros-then-text"),
    ],
)
def test_complete_garbage_lines_are_refused(homes: Homes, tpl: Template, debris: bytes) -> None:
    """A complete line that is neither a record nor zero-filled is not what a crash leaves:
    damage, never cut (issue 9: only an unterminated fragment or NUL debris is torn)."""
    home, path = homes.make(tpl.data + debris)
    _check_refused(home, path, tpl, RECORDS + 1)


def test_a_partial_copy_of_the_last_line_is_repaired(homes: Homes, tpl: Template) -> None:
    home, path = homes.make(tpl.data + tpl.lines[-1][:-5])
    _check_repaired(home, path, tpl, RECORDS, torn=True)


def _check_refused(home: Path, path: Path, tpl: Template, bad_ord: int) -> None:
    """Damage a crash cannot explain: verify, read and append all name ``bad_ord``; the
    append changes nothing on disk."""
    content = path.read_bytes()
    with EmbeddedStore(home) as store:
        report = store.verify(tpl.thread)
        assert not report.ok
        assert report.first_bad_ord == bad_ord, report.to_dict()
        assert report.records == bad_ord - 1
        with pytest.raises(IntegrityError) as read_error:
            store.read(tpl.thread)
        assert read_error.value.ord == bad_ord
        assert f"ord {bad_ord}" in str(read_error.value)
        with pytest.raises(IntegrityError) as append_error:
            store.append(tpl.thread, "custom.note", {"must": "not be written"}, durable=True)
        assert append_error.value.ord == bad_ord
        assert path.read_bytes() == content
    assert path.read_bytes() == content
    assert not _wal_files(home)
    with EmbeddedStore(home) as store:  # a second open does not repair it either
        with pytest.raises(IntegrityError):
            store.append(tpl.thread, "custom.note", {"must": "not be written"}, durable=True)
    assert path.read_bytes() == content


def test_every_flipped_byte_in_a_middle_record_is_refused(homes: Homes, tpl: Template) -> None:
    start = tpl.line_start(MIDDLE)
    line = tpl.lines[MIDDLE - 1]
    for i in range(len(line) - 1):  # every byte but the newline
        damaged = bytearray(tpl.data)
        damaged[start + i] ^= 0x01
        home, path = homes.make(bytes(damaged))
        try:
            _check_refused(home, path, tpl, MIDDLE)
        except AssertionError as exc:
            raise AssertionError(f"byte {i} of ord {MIDDLE} flipped: {line[i : i + 1]!r}") from exc
        shutil.rmtree(home)


def test_a_duplicated_last_line_is_refused(homes: Homes, tpl: Template) -> None:
    home, path = homes.make(tpl.data + tpl.lines[-1])
    _check_refused(home, path, tpl, RECORDS + 1)


def test_a_duplicated_middle_line_is_refused(homes: Homes, tpl: Template) -> None:
    lines = list(tpl.lines)
    lines.insert(MIDDLE, lines[MIDDLE - 1])
    home, path = homes.make(b"".join(lines))
    _check_refused(home, path, tpl, MIDDLE + 1)


def test_a_missing_middle_line_is_refused(homes: Homes, tpl: Template) -> None:
    lines = list(tpl.lines)
    del lines[MIDDLE - 1]
    home, path = homes.make(b"".join(lines))
    _check_refused(home, path, tpl, MIDDLE)


def test_swapped_lines_are_refused(homes: Homes, tpl: Template) -> None:
    lines = list(tpl.lines)
    lines[MIDDLE - 1], lines[MIDDLE] = lines[MIDDLE], lines[MIDDLE - 1]
    home, path = homes.make(b"".join(lines))
    _check_refused(home, path, tpl, MIDDLE)


def test_a_torn_middle_line_followed_by_records_is_refused(homes: Homes, tpl: Template) -> None:
    lines = list(tpl.lines)
    lines[MIDDLE - 1] = lines[MIDDLE - 1][:50] + b"\n"
    home, path = homes.make(b"".join(lines))
    _check_refused(home, path, tpl, MIDDLE)


def test_zeros_in_the_middle_are_refused(homes: Homes, tpl: Template) -> None:
    lines = list(tpl.lines)
    lines[MIDDLE - 1] = b"\0" * len(lines[MIDDLE - 1])
    home, path = homes.make(b"".join(lines))
    _check_refused(home, path, tpl, MIDDLE)


def test_a_record_of_another_thread_after_the_last_line_is_refused(
    homes: Homes, tpl: Template, tmp_path: Path
) -> None:
    store, other = _build(tmp_path / "other")
    foreign = Path(store.path_of(other)).read_bytes().splitlines(keepends=True)[-1]
    store.close()
    home, path = homes.make(tpl.data + foreign)
    _check_refused(home, path, tpl, RECORDS + 1)


# -- the same damage when a dead journal still holds the records ------------------------------


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Template, Path]:
    """A 30-record thread as a killed store leaves it: rollout and journal, no checkpoint."""
    home = tmp_path_factory.mktemp("live")
    store, thread = _build(home, journaled=True)
    try:
        snapshot = tmp_path_factory.mktemp("crashed")
        shutil.copytree(home / "threads", snapshot / "threads")
        shutil.copytree(home / "journal", snapshot / "journal")
        shutil.copy2(home / "secret", snapshot / "secret")  # the journal's header is keyed by it
        assert len(_wal_files(snapshot)) == 1
        tpl = _template(store, thread, home)
    finally:
        store.close()
    return tpl, snapshot


def _with_journal(root: Path, snapshot: Path, tpl: Template, content: bytes) -> tuple[Path, Path]:
    home = root / "home"
    shutil.copytree(snapshot, home)
    path = home / tpl.rel
    path.write_bytes(content)
    return home, path


def _check_restored(home: Path, path: Path, tpl: Template) -> None:
    """Opening the store replays the dead journal: all 30 records are back, the journal is
    gone, and the next append gets ord 31."""
    with EmbeddedStore(home) as store:
        assert not _wal_files(home), "the replayed journal was not deleted"
        assert path.read_bytes() == tpl.data
        assert store.read(tpl.thread) == tpl.records
        record = store.append(tpl.thread, "custom.note", {"after": "replay"}, durable=True)
        assert record.ord == RECORDS + 1
    assert not _wal_files(home)
    assert path.read_bytes().startswith(tpl.data)
    with EmbeddedStore(home) as store:
        report = store.verify(tpl.thread)
        assert report.ok and report.torn is None and report.records == RECORDS + 1


def test_every_cut_inside_the_last_line_is_restored_from_the_journal(
    tmp_path: Path, crashed: tuple[Template, Path]
) -> None:
    tpl, snapshot = crashed
    for cut in range(tpl.last_start, len(tpl.data), 3):
        home, path = _with_journal(tmp_path, snapshot, tpl, tpl.data[:cut])
        try:
            _check_restored(home, path, tpl)
        except AssertionError as exc:
            raise AssertionError(f"cut at byte {cut}") from exc
        shutil.rmtree(home)


# keep >= 1: thread.created was committed alone, straight to the rollout with its own fsync,
# so a crash cannot take it away (only records committed through the journal can be lost).
@pytest.mark.parametrize("keep", [1, 2, MIDDLE])
def test_a_rollout_cut_to_whole_records_is_restored_from_the_journal(
    tmp_path: Path, crashed: tuple[Template, Path], keep: int
) -> None:
    tpl, snapshot = crashed
    home, path = _with_journal(tmp_path, snapshot, tpl, b"".join(tpl.lines[:keep]))
    _check_restored(home, path, tpl)


def test_mid_log_damage_covered_by_the_journal_is_restored(
    tmp_path: Path, crashed: tuple[Template, Path]
) -> None:
    tpl, snapshot = crashed
    damaged = bytearray(tpl.data)
    damaged[tpl.line_start(MIDDLE) + 20] ^= 0x01
    home, path = _with_journal(tmp_path, snapshot, tpl, bytes(damaged))
    _check_restored(home, path, tpl)
