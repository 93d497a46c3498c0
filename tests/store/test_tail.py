"""Tail operations on a long thread: checkpoints, the sparse index, window reads, streaming
verify (`checkpoint`, `tailread`, `streamscan`, `verify` in `threadlog.store.embedded`).

A thread of 5,000 records is built once per module and closed (which checkpoints it); each
test copies its home. Where a test asserts that something is *not* read whole, it replaces
the whole-file scan with one that fails.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from typing import TYPE_CHECKING, Any

import orjson
import pytest

from threadlog import EmbeddedStore, IntegrityError, UsageError
from threadlog.model import envelope
from threadlog.store.embedded import checkpoint, streamscan
from threadlog.store.embedded import reader as reader_module
from threadlog.store.embedded import writers as writers_module
from threadlog.store.embedded.rollout import scan_file

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

RECORDS = 5000
END = 2**62


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    home = str(tmp_path_factory.mktemp("tail") / "home")
    with EmbeddedStore(home) as store:
        thread = store.create_thread("tester")
        store.append(thread, "turn.started", {"turn_id": "t1", "input": "hi"})
        for i in range(RECORDS - 3):
            store.append(thread, "custom.n", {"i": i}, durable=False)
        store.append(thread, "turn.ended", {"turn_id": "t1", "outcome": "completed"})
    return home, thread


@pytest.fixture
def copy(template: tuple[str, str], tmp_path: Path) -> tuple[str, str]:
    home = str(tmp_path / "copy")
    shutil.copytree(template[0], home)
    return home, template[1]


@pytest.fixture
def no_whole_scan(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make any read of the whole rollout fail (the window reads must not need one)."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the whole rollout was scanned")

    monkeypatch.setattr(reader_module, "scan_file", refuse)
    monkeypatch.setattr(reader_module.Reader, "scan_whole", refuse)
    yield


def _row(store: EmbeddedStore, thread: str) -> list[Any]:
    return list(store.index.run("SELECT * FROM checkpoints WHERE thread_id = ?", (thread,))[0])


def _restore(store: EmbeddedStore, row: list[Any]) -> None:
    store.index.run("INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?, ?, ?)", tuple(row))


def _full_scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count the whole-file scans that opening a thread for writing makes."""
    seen: list[str] = []
    whole = writers_module.scan_file

    def spy(path: str, thread_id: str) -> Any:
        seen.append(thread_id)
        return whole(path, thread_id)

    monkeypatch.setattr(writers_module, "scan_file", spy)
    return seen


# -- window reads ----------------------------------------------------------------------------


def test_windows_match_the_whole_log(copy: tuple[str, str]) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        everything = store.read(thread)
    by_ord = {r.ord: r for r in everything}
    cases = [
        (0, END, 5),
        (0, RECORDS + 1, 5),
        (0, RECORDS, 1),
        (0, 2, 5),
        (0, 1, 5),
        (0, 3001, 7),
        (2990, 3001, None),
        (2990, None, 20),
        (4000, None, None),
        (999, 1002, None),
        (0, 1500, 2),
        (RECORDS - 1, END, 10),
        (RECORDS, END, 10),
        (10, 5, None),
        (0, END, 0),
    ]
    with EmbeddedStore(home) as store:
        for after, before, limit in cases:
            got = store.read(thread, after, before=before, limit=limit)
            top = RECORDS if before is None else min(before - 1, RECORDS)
            want = [by_ord[o] for o in range(after + 1, top + 1)]
            if limit is not None:
                want = want[-limit:] if before is not None and limit else want[:limit]
            assert got == want, (after, before, limit)


def test_the_last_records_are_read_without_the_whole_log(
    copy: tuple[str, str], no_whole_scan: None
) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        last = store.read(thread, before=END, limit=5)
        assert [r.ord for r in last] == list(range(RECORDS - 4, RECORDS + 1))
        middle = store.read(thread, after=3100, limit=3)  # from the sparse index
        assert [r.ord for r in middle] == [3101, 3102, 3103]
        early = store.read(thread, after=10, before=14)  # from the start of the file
        assert [r.ord for r in early] == [11, 12, 13]
        assert store.state(thread).last_ord == RECORDS  # from the checkpoint
        # and for the thread's writer, the window stops at the durable end
        store.append(thread, "custom.n", {"i": -1})
        assert store.read(thread, before=END, limit=1)[0].ord == RECORDS + 1


def test_a_window_never_reads_past_the_durable_end(copy: tuple[str, str]) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        store.append(thread, "custom.n", {"i": -1})
        end = store.durable_end(thread)
        assert end is not None
        with open(store.path_of(thread), "ab") as f:  # bytes a writer has not made durable
            f.write(b'{"not":"durable"}\n')
        assert store.read(thread, before=END, limit=2)[-1].ord == RECORDS + 1


def test_damage_in_a_window_raises_with_its_ordinal(copy: tuple[str, str]) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        path = store.path_of(thread)
    _flip(path, RECORDS - 2)
    with EmbeddedStore(home) as store, pytest.raises(IntegrityError) as info:
        store.read(thread, before=END, limit=5)
    assert info.value.ord == RECORDS - 2


# -- checkpoints -----------------------------------------------------------------------------


def test_opening_for_writing_starts_at_the_checkpoint(
    copy: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, thread = copy
    scans = _full_scans(monkeypatch)
    with EmbeddedStore(home) as store:
        assert _row(store, thread)[1] == RECORDS
        with pytest.raises(UsageError, match="already ended"):  # the checkpoint's state
            store.append(thread, "turn.ended", {"turn_id": "t1", "outcome": "completed"})
        assert store.append(thread, "custom.n", {"i": -1}).ord == RECORDS + 1
    assert scans == []
    with EmbeddedStore(home) as store:
        assert _row(store, thread)[1] == RECORDS + 1  # taken again at close


@pytest.mark.parametrize(
    "spoil",
    [
        "DELETE FROM checkpoints",
        "UPDATE checkpoints SET hash = '" + "0" * 64 + "'",
        "UPDATE checkpoints SET end_offset = end_offset - 7",
        "UPDATE checkpoints SET end_offset = end_offset + 100000000",
        "UPDATE checkpoints SET ord = ord - 1",
        "UPDATE checkpoints SET version = 'another'",
    ],
)
def test_a_missing_or_wrong_checkpoint_falls_back_to_the_whole_log(
    copy: tuple[str, str], monkeypatch: pytest.MonkeyPatch, spoil: str
) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        store.index.run(spoil)
    scans = _full_scans(monkeypatch)
    with EmbeddedStore(home) as store:
        with pytest.raises(UsageError, match="already ended"):
            store.append(thread, "turn.ended", {"turn_id": "t1", "outcome": "completed"})
        assert store.append(thread, "custom.n", {"i": -1}).ord == RECORDS + 1
        assert [r.ord for r in store.read(thread, before=END, limit=2)] == [RECORDS, RECORDS + 1]
    assert scans == [thread]
    with EmbeddedStore(home) as store:
        assert store.verify(thread).ok


def test_a_garbled_checkpoint_state_is_not_trusted(copy: tuple[str, str]) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        store.index.run("UPDATE checkpoints SET state = x'7b7d'")
    with EmbeddedStore(home) as store:
        with pytest.raises(UsageError, match="already ended"):  # reduced from the file
            store.append(thread, "turn.ended", {"turn_id": "t1", "outcome": "completed"})
        assert store.state(thread).active_turn is None


def test_a_stale_checkpoint_reads_the_records_after_it(copy: tuple[str, str]) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        old = _row(store, thread)
        store.append(thread, "turn.started", {"turn_id": "t2", "input": "again"})
        for i in range(20):
            store.append(thread, "custom.n", {"i": i})
    with EmbeddedStore(home) as store:
        _restore(store, old)  # an earlier checkpoint: still true, just behind
    with EmbeddedStore(home) as store:
        with pytest.raises(UsageError, match="is running"):  # t2, after the checkpoint
            store.append(thread, "turn.started", {"turn_id": "t3", "input": "x"})
        assert store.state(thread).active_turn == "t2"
        assert store.append(thread, "custom.n", {"i": -1}).ord == RECORDS + 22


def test_a_checkpoint_past_a_truncated_file_is_lost_records(copy: tuple[str, str]) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        path = store.path_of(thread)
    with open(path, "rb") as f:
        lines = f.readlines()
    with open(path, "wb") as f:  # cut at a line boundary: the last 10 records are gone
        f.writelines(lines[:-10])
    with EmbeddedStore(home) as store:
        with pytest.raises(IntegrityError) as info:
            store.append(thread, "custom.n", {"i": -1})
        assert info.value.ord == RECORDS - 9
        with pytest.raises(IntegrityError):
            store.read(thread, before=END, limit=5)
        report = store.verify(thread)
        assert not report.ok and report.error is not None and report.error.ord == RECORDS - 9


def test_a_torn_tail_after_the_checkpoint_is_repaired(copy: tuple[str, str]) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        path = store.path_of(thread)
    size = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(b'{"v":1,"id":"half a rec')  # an interrupted write
    with EmbeddedStore(home) as store:
        assert store.verify(thread).torn is not None
        assert store.append(thread, "custom.n", {"i": -1}).ord == RECORDS + 1
        repairs = store.take_repairs(thread)
        assert [r["kind"] for r in repairs] == ["torn_tail_removed"]
        assert repairs[0]["offset"] == size
    with EmbeddedStore(home) as store:
        report = store.verify(thread)
        assert report.ok and report.torn is None and report.records == RECORDS + 1


def test_a_flipped_byte_after_the_checkpoint_is_reported(copy: tuple[str, str]) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        old = _row(store, thread)
        for i in range(10):
            store.append(thread, "custom.n", {"i": i})
        path = store.path_of(thread)
    with EmbeddedStore(home) as store:
        _restore(store, old)
    _flip(path, RECORDS + 5)
    with EmbeddedStore(home) as store:
        with pytest.raises(IntegrityError) as info:
            store.append(thread, "custom.n", {"i": -1})
        assert info.value.ord == RECORDS + 5
        report = store.verify(thread)
        assert report.error is not None and report.error.ord == RECORDS + 5


# -- whole reads over a checkpoint -----------------------------------------------------------


def _canonical_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the records a read re-encodes to prove their bytes canonical (`parse_next`)."""
    calls: list[int] = []
    dumps = envelope._dumps

    def counted(*args: Any, **kwargs: Any) -> bytes:
        calls.append(1)
        return dumps(*args, **kwargs)

    monkeypatch.setattr(envelope, "_dumps", counted)
    return calls


def test_a_whole_read_trusts_the_canonical_bytes_up_to_the_checkpoint(
    copy: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        calls = _canonical_checks(monkeypatch)
        records = store.read(thread)
        assert calls == []
        assert [r.ord for r in records] == list(range(1, RECORDS + 1))
        assert store.read(thread, after=RECORDS - 3) == records[-3:]
        store.index.run("DELETE FROM checkpoints")
        store.index.run("UPDATE sparse_offsets SET digest = NULL")  # (the chunks' trust too)
    with EmbeddedStore(home) as store:  # the same read, with every check
        assert store.read(thread) == records
        assert len(calls) > RECORDS - 10


def _rechain(lines: list[bytes], start: int) -> None:
    """Give ``lines[start:]`` the hashes their bytes have now, each chained on the one before."""
    prev = orjson.loads(lines[start - 1])["hash"]
    for i in range(start, len(lines)):
        obj = orjson.loads(lines[i])
        del obj["hash"]
        obj["prev"] = prev
        body = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
        if i == start:  # this one made non-canonical: a space after a colon in its data
            body = body.replace(b'"data":{"i":', b'"data":{"i": ', 1)
        prev = hashlib.sha256(body).hexdigest()
        lines[i] = body[:-1] + b',"hash":"' + prev.encode() + b'"}\n'


def test_a_rewritten_chain_under_the_checkpoint_is_read_with_every_check(
    copy: tuple[str, str],
) -> None:
    """A record made non-canonical, with its hash and every later one recomputed: each line
    matches its hash and the chain holds, but it no longer reaches the checkpoint's hash, so
    the scan checks every record again and finds the bad one."""
    home, thread = copy
    with EmbeddedStore(home) as store:
        path = store.path_of(thread)
        row = _row(store, thread)
    with open(path, "rb") as f:
        lines = f.readlines()
    _rechain(lines, 100)
    with open(path, "wb") as f:
        f.writelines(lines)
    scanned = scan_file(path, thread, verified=(row[1], row[2]))
    assert scanned.error is not None and scanned.error.ord == 101
    assert "not canonical" in str(scanned.error)
    assert len(scanned.records) == 100
    with EmbeddedStore(home) as store:
        with pytest.raises(IntegrityError, match="not canonical") as info:
            store.read(thread)
        assert info.value.ord == 101


@pytest.mark.parametrize(
    "spoil",
    [
        "UPDATE checkpoints SET version = 'another'",
        "UPDATE checkpoints SET ord = 0",
        "UPDATE checkpoints SET hash = '" + "0" * 64 + "'",
    ],
)
def test_a_checkpoint_row_not_to_be_trusted_reads_with_every_check(
    copy: tuple[str, str], monkeypatch: pytest.MonkeyPatch, spoil: str
) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        store.index.run(spoil)
        store.index.run("UPDATE sparse_offsets SET digest = NULL")  # (trusted on their own)
    with EmbeddedStore(home) as store:
        calls = _canonical_checks(monkeypatch)
        assert [r.ord for r in store.read(thread)] == list(range(1, RECORDS + 1))
        assert len(calls) > RECORDS - 10


def test_an_empty_file_under_a_bad_checkpoint_row_is_no_thread(tmp_path: Path) -> None:
    path = str(tmp_path / "empty.jsonl")
    open(path, "wb").close()
    for verified in ((0, "x"), (-1, "x"), (3, "x")):
        scanned = scan_file(path, "t", verified=verified)
        assert scanned.records == [] and scanned.error is None


# -- streaming verify ------------------------------------------------------------------------


def _flip(path: str, ord_: int) -> None:
    """Flip one byte inside record ``ord_``'s data."""
    with open(path, "rb") as f:
        lines = f.readlines()
    line = bytearray(lines[ord_ - 1])
    at = line.index(b'"data":') + 9
    line[at] ^= 0x01
    lines[ord_ - 1] = bytes(line)
    with open(path, "wb") as f:
        f.writelines(lines)


def _damage(path: str, kind: str) -> None:
    with open(path, "rb") as f:
        lines = f.readlines()
    if kind == "flip-early":
        _flip(path, 3)
        return
    if kind == "flip-late":
        _flip(path, RECORDS - 1)
        return
    if kind == "fragment":
        lines.append(b'{"v":1,"id":"tor')
    elif kind == "zeros-then-valid":
        lines.insert(2500, b"\0" * 40 + b"\n")
    elif kind == "zeros-at-end":
        lines.append(b"\0" * 300 + b"\n")
    elif kind == "newline-lost":
        lines[-1] = lines[-1][:-1]
    elif kind == "swapped":
        lines[1000], lines[1001] = lines[1001], lines[1000]
    with open(path, "wb") as f:
        f.writelines(lines)


@pytest.mark.parametrize("chunk", [4096, 100_000, 4 * 1024 * 1024])
@pytest.mark.parametrize(
    "kind",
    [
        "none",
        "flip-early",
        "flip-late",
        "fragment",
        "zeros-then-valid",
        "zeros-at-end",
        "newline-lost",
        "swapped",
    ],
)
def test_streaming_verify_agrees_with_the_whole_scan(
    copy: tuple[str, str], monkeypatch: pytest.MonkeyPatch, chunk: int, kind: str
) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        path = store.path_of(thread)
    _damage(path, kind)
    whole = scan_file(path, thread)
    monkeypatch.setattr(streamscan, "CHUNK", chunk)
    with EmbeddedStore(home) as store:
        report = store.verify(thread)
    assert report.records == len(whole.records)
    assert report.last_ord == (whole.records[-1].ord if whole.records else 0)
    assert (report.torn is None) == (whole.torn is None)
    if whole.torn is not None:
        assert report.torn is not None and report.torn.offset == whole.torn.offset
    if whole.error is None:
        assert report.ok == (kind in ("none", "fragment", "zeros-at-end"))
    else:
        assert report.error is not None
        assert (report.error.ord, report.error.offset) == (whole.error.ord, whole.error.offset)
        assert str(report.error) == str(whole.error)


def test_streaming_verify_finds_an_id_used_twice_in_different_chunks(
    copy: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        path = store.path_of(thread)
        records = store.read(thread)
    lines = _rechained(records, reuse=(100, 4000))
    with open(path, "wb") as f:
        f.writelines(lines)
    whole = scan_file(path, thread)
    assert whole.error is not None and whole.error.ord == 4000
    monkeypatch.setattr(streamscan, "CHUNK", 64 * 1024)
    with EmbeddedStore(home) as store:
        report = store.verify(thread)
    assert report.error is not None
    assert (report.error.ord, report.error.offset) == (4000, whole.error.offset)
    assert report.records == 3999 and str(report.error) == str(whole.error)


def _rechained(records: list[Any], reuse: tuple[int, int]) -> list[bytes]:
    """The log re-encoded with record ``reuse[1]`` given the id of ``reuse[0]``."""
    from threadlog.model import codec
    from threadlog.model.envelope import encode_record

    lines: list[bytes] = []
    prev: str | None = None
    ids = {r.ord: r.id for r in records}
    ids[reuse[1]] = ids[reuse[0]]
    for r in records:
        line, prev = encode_record(
            id=ids[r.ord],
            thread=r.thread,
            ord=r.ord,
            parent=r.parent,
            ts=r.ts,
            type=r.type,
            data_json=codec.canonical(r.data),
            prev=prev,
        )
        lines.append(line)
    return lines


def test_the_sparse_index_points_at_its_records(copy: tuple[str, str]) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        rows = store.index.run(
            "SELECT ord, offset FROM sparse_offsets WHERE thread_id = ? ORDER BY ord", (thread,)
        )
        path = store.path_of(thread)
    assert [r[0] for r in rows] == [1000, 2000, 3000, 4000, 5000]
    with open(path, "rb") as f:
        for ord_, offset in rows:
            f.seek(offset)
            assert f'"ord":{ord_},'.encode() in f.readline()


def test_the_committer_checkpoints_a_busy_thread(
    home: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkpoint, "CHECKPOINT_EVERY", 50)
    with EmbeddedStore(home, commit_interval=0.01) as store:
        thread = store.create_thread("a")
        for i in range(120):
            store.append(thread, "custom.n", {"i": i}, durable=False)
        deadline = time.monotonic() + 10
        rows: list[Any] = []
        while time.monotonic() < deadline and not rows:
            rows = store.index.run("SELECT ord FROM checkpoints WHERE thread_id = ?", (thread,))
            time.sleep(0.01)
        assert rows and rows[0][0] >= 50  # taken while the thread is still open


# -- follow ----------------------------------------------------------------------------------


def _follow(store: EmbeddedStore, thread: str, after: int, count: int) -> list[int]:
    """The ordinals of the first ``count`` records ``follow`` yields after ``after``."""
    got: list[int] = []
    for record in store.follow(thread, after, interval=0.01):
        got.append(record.ord)
        if len(got) == count:
            break
    return got


def test_follow_near_the_end_reads_only_the_end(copy: tuple[str, str], no_whole_scan: None) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        assert _follow(store, thread, RECORDS - 3, 3) == [RECORDS - 2, RECORDS - 1, RECORDS]
        assert _follow(store, thread, 3100, 2) == [3101, 3102]  # from the sparse index


def test_follow_from_the_start_reads_a_window_at_a_time(
    copy: tuple[str, str], no_whole_scan: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader_module, "FOLLOW_PAGE", 700)  # 5,000 records: 8 windows
    home, thread = copy
    with EmbeddedStore(home) as store:
        assert _follow(store, thread, 0, RECORDS) == list(range(1, RECORDS + 1))


def test_follow_yields_new_records_after_the_windows(copy: tuple[str, str]) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store, EmbeddedStore(home) as reader:
        follower = iter(reader.follow(thread, RECORDS - 1, interval=0.01))
        assert next(follower).ord == RECORDS
        store.append(thread, "custom.n", {"i": -1})  # written by another store
        assert next(follower).ord == RECORDS + 1


def test_follow_without_a_sparse_index_reads_the_file_once(
    copy: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        store.index.run("DELETE FROM sparse_offsets")
        store.index.run("DELETE FROM checkpoints")
        scans: list[str] = []
        whole = reader_module.Reader.scan_whole

        def counted(self: Any, *args: Any) -> Any:
            scans.append("whole")
            return whole(self, *args)

        monkeypatch.setattr(reader_module.Reader, "scan_whole", counted)
        assert _follow(store, thread, 2500, 3) == [2501, 2502, 2503]
        assert scans == ["whole"]


def test_follow_refuses_a_log_replaced_under_it(copy: tuple[str, str]) -> None:
    home, thread = copy
    with EmbeddedStore(home) as store:
        follower = iter(store.follow(thread, RECORDS - 1, interval=0.01))
        assert next(follower).ord == RECORDS
        other = store.create_thread("tester")  # the same data, another thread's records
        for record in store.read(thread)[1:]:
            store.append(other, record.type, record.data, durable=False)
        store.append(other, "custom.n", {"i": -2})
        shutil.copyfile(store.path_of(other), store.path_of(thread) + ".new")
    with pytest.raises(IntegrityError):
        os.replace(store.path_of(thread) + ".new", store.path_of(thread))
        next(follower)
