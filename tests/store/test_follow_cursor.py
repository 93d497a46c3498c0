"""`Reader.follow`'s cursor (`tailread.read_forward`): after its first window, follow reads on
from the byte offset where the last one ended. These tests hold it to what the window and the
whole-file reads it replaced noticed: damage at or after the cursor, a fork's inherited
prefix, ids seen in earlier windows.

A follow that would wait forever is caught by a ``sleep`` that gives up after some polls.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

import pytest
from tests.store.test_tail import _rechained

from threadlog import EmbeddedStore, IntegrityError
from threadlog.store.embedded import reader as reader_module
from threadlog.store.embedded import tailread

if TYPE_CHECKING:
    from collections.abc import Iterator

    from threadlog.model.envelope import Record


class Stalled(AssertionError):
    """follow kept polling where it should have raised or yielded."""


@pytest.fixture
def bounded_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """follow's sleeps: none, and at most 50 of them (this test's follows only)."""
    polls = [0]

    def sleep(_seconds: float) -> None:
        polls[0] += 1
        if polls[0] > 50:
            raise Stalled("follow kept polling")

    monkeypatch.setattr(reader_module, "time", types.SimpleNamespace(sleep=sleep))


def _refuse_whole_scans(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the whole rollout was scanned")

    monkeypatch.setattr(reader_module, "scan_file", refuse)
    monkeypatch.setattr(reader_module.Reader, "scan_whole", refuse)


def new_thread(home: str, records: int) -> str:
    """A thread of ``records`` records (``thread.created`` and ``custom.n`` ones, buffered)."""
    with EmbeddedStore(home) as store:
        thread = store.create_thread("tester")
        for i in range(records - 1):
            store.append(thread, "custom.n", {"i": i}, durable=False)
    return thread


def _overwrite_last_newline(path: str) -> None:
    with open(path, "r+b") as f:
        f.seek(-1, 2)
        f.write(b"x")


def _caught_up(store: EmbeddedStore, thread: str) -> Iterator[Record]:
    """A follow of the 30-record thread from ord 28 that has yielded its last two."""
    follower = iter(store.follow(thread, 28, interval=0))
    assert [next(follower).ord, next(follower).ord] == [29, 30]
    return follower


def test_the_last_yielded_records_newline_overwritten_raises(
    home: str, bounded_polls: None
) -> None:
    # the whole read calls it damage (a whole record whose newline was overwritten); the
    # window follow re-read the file's last line each poll and raised; the cursor must too
    thread = new_thread(home, 30)
    with EmbeddedStore(home) as store:
        follower = _caught_up(store, thread)
        _overwrite_last_newline(store.path_of(thread))
        with pytest.raises(IntegrityError, match="newline was overwritten"):
            next(follower)


def test_a_new_record_whose_newline_was_overwritten_raises(home: str, bounded_polls: None) -> None:
    # also where the index cannot say the record was acknowledged
    thread = new_thread(home, 30)
    with EmbeddedStore(home) as store:
        follower = _caught_up(store, thread)
        with EmbeddedStore(home) as writer:
            writer.append(thread, "custom.n", {"i": -1})
        _overwrite_last_newline(store.path_of(thread))
        store.index.run("DELETE FROM acknowledged")
        with pytest.raises(IntegrityError, match="newline was overwritten"):
            next(follower)


def test_a_fragment_after_the_cursor_is_waited_on(home: str, bounded_polls: None) -> None:
    # a torn tail is not a record, and not damage: once a writer repairs it, follow goes on
    thread = new_thread(home, 30)
    with EmbeddedStore(home) as store:
        follower = _caught_up(store, thread)
        with open(store.path_of(thread), "ab") as f:
            f.write(b'{"v":1,"id":"0')
        with EmbeddedStore(home) as writer:  # opening for writing cuts the fragment
            writer.append(thread, "custom.n", {"i": -1})
        assert next(follower).ord == 31


def _fork(home: str) -> tuple[str, list[Record]]:
    source = new_thread(home, 40)
    with EmbeddedStore(home) as store:
        fork = store.fork(source, 20)
        for i in range(30):
            store.append(fork, "custom.n", {"j": i}, durable=False)
    with EmbeddedStore(home) as store:
        return fork, store.read(fork)


@pytest.mark.parametrize("after", [0, 1, 10, 19, 20, 30])
def test_a_fork_is_followed_by_windows(
    home: str, after: int, bounded_polls: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ord 2 of a fork is chained on the hash its lineage names, not on its own ord 1: a
    # window holding both was refused, and the fork read whole
    fork, records = _fork(home)
    monkeypatch.setattr(reader_module, "FOLLOW_PAGE", 7)
    _refuse_whole_scans(monkeypatch)
    with EmbeddedStore(home) as store:
        got: list[Record] = []
        for record in store.follow(fork, after, interval=0):
            got.append(record)
            if record.ord == len(records):
                break
        assert got == records[after:]
        assert store.read(fork, after=1, limit=3) == records[1:4]


@pytest.mark.xfail(strict=True, reason="ids are checked within a window only", raises=Stalled)
def test_an_id_seen_in_an_earlier_window_is_refused(
    home: str, bounded_polls: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = new_thread(home, 60)
    with EmbeddedStore(home) as store:
        path = store.path_of(thread)
        lines = _rechained(store.read(thread), reuse=(5, 40))  # ord 40 takes ord 5's id
        store.index.run("DELETE FROM acknowledged")
        store.index.run("DELETE FROM checkpoints")
    with open(path, "wb") as f:
        f.writelines(lines)
    monkeypatch.setattr(reader_module, "FOLLOW_PAGE", 10)
    monkeypatch.setattr(tailread, "NEAR_END", 10)  # the first window is read forward
    with EmbeddedStore(home) as store:
        with pytest.raises(IntegrityError):
            store.read(thread)
        got = []
        with pytest.raises(IntegrityError, match="appears twice"):
            for record in store.follow(thread, 0, interval=0):
                got.append(record.ord)
        assert 40 not in got
