"""Chunk digests (`threadlog.store.embedded.checkpoint`): a checkpoint keeps, with each entry
of the sparse index, the SHA-256 of the rollout's bytes since the entry before, once those
lines were verified; a whole read then hashes each chunk in one go and parses its lines
without hashing them one by one (`scan_file`'s ``chunks``), and any byte that differs sends
the read back to every check.
"""

from __future__ import annotations

import hashlib
import shutil
from typing import TYPE_CHECKING, Any

import pytest
from tests.store.test_follow_cursor import new_thread

from threadlog import EmbeddedStore, IntegrityError
from threadlog.model import codec, envelope
from threadlog.model.envelope import record_line
from threadlog.store.copy import copy_thread
from threadlog.store.embedded import checkpoint
from threadlog.store.embedded import store as store_module

if TYPE_CHECKING:
    from pathlib import Path

RECORDS = 3500


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    home = str(tmp_path_factory.mktemp("chunks") / "home")
    with EmbeddedStore(home) as store:
        thread = store.create_thread("tester")
        for i in range(RECORDS - 1):  # lone durable appends and buffered runs, mixed
            store.append(thread, "custom.n", {"i": i, "pad": "p" * (i % 50)}, durable=i % 7 == 0)
    return home, thread


@pytest.fixture
def copy(template: tuple[str, str], tmp_path: Path) -> tuple[str, str]:
    home = str(tmp_path / "copy")
    shutil.copytree(template[0], home)
    return home, template[1]


def _bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _entries(store: EmbeddedStore, thread: str) -> list[tuple[int, int, bytes | None]]:
    rows = store.index.run(
        "SELECT ord, offset, digest FROM sparse_offsets WHERE thread_id = ? ORDER BY ord",
        (thread,),
    )
    return [(o, off, None if d is None else bytes(d)) for o, off, d in rows]


def _assert_digests_of_the_file(store: EmbeddedStore, thread: str) -> None:
    """Entries at ords 1,000, 2,000 and 3,000, each with the SHA-256 of the file's bytes from
    the entry before (the file's start, for the first) up to its own line."""
    entries = _entries(store, thread)
    data = _bytes(store.path_of(thread))
    assert [o for o, _, _ in entries] == [1000, 2000, 3000]
    start = 0
    for _, off, digest in entries:
        assert digest == hashlib.sha256(data[start:off]).digest()
        start = off


def _line_hashes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the lines a read hashes one by one (`parse_next`'s and `parse_line`'s SHA-256)."""
    calls: list[int] = []
    sha256 = hashlib.sha256

    def counted(*args: Any) -> Any:
        calls.append(1)
        return sha256(*args)

    monkeypatch.setattr(envelope, "_sha256", counted)
    monkeypatch.setattr(envelope.hashlib, "sha256", counted)
    return calls


def test_each_entry_keeps_the_digest_of_the_bytes_since_the_one_before(
    copy: tuple[str, str],
) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        _assert_digests_of_the_file(store, thread)


def test_a_whole_read_hashes_no_line_of_a_verified_chunk(
    copy: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        expected = store.read(thread)
    with EmbeddedStore(home) as store:
        calls = _line_hashes(monkeypatch)
        assert store.read(thread) == expected
    # only the lines after the last entry (ords 3000-3500) are hashed one by one
    assert 0 < len(calls) <= RECORDS - 3000 + 5


@pytest.mark.parametrize("where", [5, 1500, 2999])
def test_a_changed_byte_inside_a_chunk_is_found_by_every_check(
    copy: tuple[str, str], where: int
) -> None:
    """A letter of a record's data changed: the line is still JSON, still chained and still
    shaped like a record; only its hash (or the chunk's) can tell."""
    home, thread = copy
    with EmbeddedStore(home) as store:
        path = store.path_of(thread)
    with open(path, "rb") as f:
        lines = f.readlines()
    i = where - 1  # (record ord ``where`` is line ``where - 1``)
    at = lines[i].index(b'"pad":"p') + 7
    lines[i] = lines[i][:at] + b"q" + lines[i][at + 1 :]
    with open(path, "wb") as f:
        f.writelines(lines)
    with EmbeddedStore(home) as store, pytest.raises(IntegrityError) as info:
        store.read(thread)
    assert info.value.ord == where


def test_a_digest_that_does_not_match_reads_with_every_check(
    copy: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        expected = store.read(thread)
        store.index.run("UPDATE sparse_offsets SET digest = zeroblob(32) WHERE ord = 2000")
    with EmbeddedStore(home) as store:
        calls = _line_hashes(monkeypatch)
        assert store.read(thread) == expected
    assert len(calls) >= RECORDS  # every line hashed: the trusted scan was thrown away


def test_a_thread_reopened_between_entries_gets_the_chunks_it_spans(tmp_path: Path) -> None:
    """An agent's thread is opened and closed many times: a chunk written by several
    sessions gets its digest from the entry before's offset kept in the index."""
    home = str(tmp_path / "home")
    with EmbeddedStore(home) as store:
        thread = store.create_thread("tester")
    for session in range(5):  # 700 records a session: every chunk spans two of them
        with EmbeddedStore(home) as store:
            for i in range(700):
                store.append(thread, "custom.n", {"s": session, "i": i}, durable=False)
    with EmbeddedStore(home) as store:
        _assert_digests_of_the_file(store, thread)
        assert len(store.read(thread)) == 3501


def test_no_digest_is_kept_for_lines_that_fail_their_check(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    home = str(tmp_path / "home")
    with EmbeddedStore(home) as store:
        thread = store.create_thread("tester")
        for i in range(30):
            store.append(thread, "custom.n", {"i": i}, durable=False)
        source = store.path_of(thread)
    data = bytearray(_bytes(source))
    offsets = [0] + [i + 1 for i, b in enumerate(data) if b == 0x0A][:-1]
    good = checkpoint.chunk_digests(source, thread, [(20, offsets[19], None, offsets[9])])
    assert good[0][3] == hashlib.sha256(bytes(data[offsets[9] : offsets[19]])).digest()
    data[offsets[12] + 20] ^= 0x01
    path.write_bytes(bytes(data))
    bad = checkpoint.chunk_digests(str(path), thread, [(20, offsets[19], None, offsets[9])])
    assert bad == [(20, offsets[19], None, None)]


def test_a_copied_thread_keeps_the_digests_of_its_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "CHECKPOINT_EVERY", 1000)  # (a long thread: 10,000)
    source_home, dest_home = str(tmp_path / "a"), str(tmp_path / "b")
    with EmbeddedStore(source_home) as source:
        thread = source.create_thread("tester")
        for i in range(RECORDS):
            source.append(thread, "custom.n", {"i": i}, durable=False)
        source.flush()
        with EmbeddedStore(dest_home) as dest:
            assert copy_thread(source, dest, thread).status == "copied"
    with EmbeddedStore(dest_home) as dest:
        _assert_digests_of_the_file(dest, thread)


@pytest.mark.parametrize("key", ["data", "parent", "v", "ts"])
def test_a_flipped_bit_in_a_key_inside_a_chunk_is_an_integrity_error(
    tmp_path: Path, key: str
) -> None:
    """The line is still JSON with ten keys; a field the envelope needs is missing."""
    home = str(tmp_path / "home")
    thread = new_thread(home, 1200)
    with EmbeddedStore(home) as store:
        path = store.path_of(thread)
    with open(path, "rb") as f:
        lines = f.readlines()
    name = f'"{key}":'.encode()
    flipped = name[:-3] + bytes([name[-3] ^ 1]) + name[-2:]
    lines[499] = lines[499].replace(name, flipped, 1)
    with open(path, "wb") as f:
        f.writelines(lines)
    with EmbeddedStore(home) as store, pytest.raises(IntegrityError) as info:
        store.read(thread)
    assert info.value.ord == 500


def _crafted(records: list[Any], change: dict[str, Any], at: int) -> list[Any]:
    """``records`` with record ``at`` changed, its hash and every later one recomputed."""
    crafted: list[Any] = []
    prev = None
    for record in records:
        if record.ord == at:
            record = record._replace(**change)
        if record.ord > 1:
            record = record._replace(prev=prev)
        record = record._replace(hash=record_line(record, codec.canonical(record.data))[1])
        crafted.append(record)
        prev = record.hash
    return crafted


CHANGES = [{"parent": 12345}, {"ord": 1500.0}]


@pytest.mark.parametrize("change", CHANGES)
def test_a_record_with_a_field_of_the_wrong_type_is_not_adopted(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    """Its hash and the chain hold (so a chunk holding it would get a digest): the copy
    refuses it at its ordinal, as a read would."""
    with EmbeddedStore(str(tmp_path / "a")) as source:
        thread = source.create_thread("tester")
        for i in range(1999):
            source.append(thread, "custom.n", {"i": i}, durable=False)
        source.flush()
        records = source.read(thread)
    with EmbeddedStore(str(tmp_path / "b")) as dest, pytest.raises(IntegrityError) as info:
        dest.adopt_thread(_crafted(records, change, 1500))
    assert info.value.ord == 1500


@pytest.mark.parametrize("change", CHANGES)
def test_a_verified_run_stops_at_a_field_of_the_wrong_type(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    """`parse_run` makes `parse_next`'s class checks: it stops before such a line, whose
    verdict is then the full check's."""
    home = str(tmp_path / "home")
    thread = new_thread(home, 1600)
    with EmbeddedStore(home) as store:
        records = store.read(thread)
    lines = [record_line(r, codec.canonical(r.data))[0] for r in _crafted(records, change, 1500)]
    data = b"".join(lines)
    taken: list[Any] = []
    pos, ord_, _, _ = envelope.parse_run(
        data,
        len(b"".join(lines[:1])),
        len(data),
        thread,
        2,
        records[0].hash,
        records[0].id,
        taken,
        [],
        set(),
        0,
        len(lines),
    )
    assert ord_ == 1500 and len(taken) == 1498
    assert pos == len(b"".join(lines[:1499]))


@pytest.mark.parametrize("offset", ["x", 800000.5])
def test_a_damaged_sparse_offset_is_only_a_hint(tmp_path: Path, offset: object) -> None:
    home = str(tmp_path / "home")
    thread = new_thread(home, 2200)
    with EmbeddedStore(home) as store:
        expected = store.read(thread)
        store.index.run(
            "UPDATE sparse_offsets SET offset = ? WHERE thread_id = ? AND ord = 2000",
            (offset, thread),
        )
    with EmbeddedStore(home) as store:
        assert store.read(thread) == expected


def test_an_evicted_log_takes_no_digest_under_the_lock(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    with EmbeddedStore(home) as store:
        thread = store.create_thread("tester")
        for i in range(1500):
            store.append(thread, "custom.n", {"i": i}, durable=False)
        store.flush()
        with store._writers.lock:
            store._writers.evict_locked()
        assert [(o, d) for o, _, d in _entries(store, thread)] == [(1000, None)]
