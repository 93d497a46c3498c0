"""A grown file's import reads its thread's latest records, not the whole log: a long session
re-imported every few minutes costs its new lines (issue: costs proportional to the work)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import pytest

from threadlog import EmbeddedStore, open_store
from threadlog.importers import import_paths, source_format

from ._helpers import conversation

if TYPE_CHECKING:
    from pathlib import Path

SESSION = "5a1f0c2e-7b3d-4e8f-9a6b-1c2d3e4f5a6b"
TURNS = 150  # ~600 records: more than a page of `_latest`


def _line(kind: str, uuid: str, parent: str | None, content: Any) -> str:
    message = (
        {"role": "user", "content": content}
        if kind == "user"
        else {
            "id": f"msg_{uuid}",
            "role": "assistant",
            "model": "claude-sonnet-4-20250514",
            "content": [{"type": "text", "text": content}],
            "usage": {"input_tokens": 3, "output_tokens": 2},
        }
    )
    return json.dumps(
        {
            "parentUuid": parent,
            "isSidechain": False,
            "type": kind,
            "uuid": uuid,
            "sessionId": SESSION,
            "timestamp": "2025-09-01T10:00:00.000Z",
            "message": message,
        }
    )


def _session(path: Path, turns: int) -> str:
    lines, parent = [], None
    for n in range(turns):
        lines.append(_line("user", f"u{n}", parent, f"question {n}"))
        lines.append(_line("assistant", f"a{n}", f"u{n}", f"answer {n}"))
        parent = f"a{n}"
    path.write_text("\n".join(lines) + "\n")
    return parent or ""


def _import(home: str, path: Path, reads: list[dict[str, Any]] | None = None) -> Any:
    with open_store(home) as store:
        assert isinstance(store, EmbeddedStore)
        if reads is not None:
            read, state = store.read, store.state

            def counted_read(thread: str, after: int = 0, **kw: Any) -> Any:
                reads.append({"after": after, **kw})
                return read(thread, after, **kw)

            def counted_state(thread: str, **kw: Any) -> Any:
                reads.append({"state": kw})
                return state(thread, **kw)

            store.read = counted_read  # type: ignore[method-assign]
            store.state = counted_state  # type: ignore[method-assign]
        return import_paths(store, source_format("claude-code"), [str(path)])


@pytest.fixture
def grown(home: str, tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / f"{SESSION}.jsonl"
    last = _session(path, TURNS)
    first = _import(home, path)
    assert first.files[0].status == "imported"
    with open(path, "a") as f:  # grown once: its thread was opened for writing, and closed
        f.write(_line("user", "u-grown", last, "and then") + "\n")
    assert _import(home, path).files[0].status == "grown"
    return path, "u-grown"


def test_a_grown_file_reads_only_the_latest_records(home: str, grown: tuple[Path, str]) -> None:
    path, last = grown
    with open(path, "a") as f:
        f.write(_line("user", "u-new", last, "one more") + "\n")
        f.write(_line("assistant", "a-new", "u-new", "sure") + "\n")
    reads: list[dict[str, Any]] = []
    report = _import(home, path, reads)
    [f] = report.files
    assert (f.status, f.lines, f.problems) == ("grown", 2, [])
    whole = [r for r in reads if r.get("after") == 0 and r.get("limit") is None]
    assert whole == [], "the grown file's import read the whole thread"
    assert all(r["state"] == {"history": False} for r in reads if "state" in r)
    with open_store(home) as store:
        [thread] = store.thread_ids()
        records = store.read(thread)
        assert store.verify(thread).ok
    talk = conversation(records)
    assert talk[-2:] == [("user", "one more"), ("assistant", "sure", [])]
    assert len(talk) == 2 * TURNS + 3


def test_a_line_continuing_an_old_record_reads_the_rest(home: str, grown: tuple[Path, str]) -> None:
    path, _ = grown
    with open(path, "a") as f:  # a branch from the session's first answer
        f.write(_line("user", "u-branch", "a0", "back to the start") + "\n")
    report = _import(home, path)
    [f] = report.files
    assert (f.status, f.problems) == ("grown", [])  # no broken parent: a0 was found
    with open_store(home) as store:
        [thread] = store.thread_ids()
        talk = conversation(store.read(thread))
    assert talk == [
        ("user", "question 0"),
        ("assistant", "answer 0", []),
        ("user", "back to the start"),
    ]


def test_importing_the_grown_file_again_adds_nothing(home: str, grown: tuple[Path, str]) -> None:
    path, last = grown
    with open(path, "a") as f:
        f.write(_line("user", "u-new", last, "one more") + "\n")
    assert _import(home, path).records > 0
    with open_store(home) as store:
        [thread] = store.thread_ids()
        count = len(store.read(thread))
    again = _import(home, path)
    assert again.records == 0
    with open_store(home) as store:
        assert len(store.read(thread)) == count


def test_an_archived_threads_new_lines_wait_for_it(home: str, grown: tuple[Path, str]) -> None:
    path, last = grown
    with open_store(home) as store:
        [thread] = store.thread_ids()
        store.append(
            thread,
            "turn.ended",
            {"turn_id": store.state(thread).active_turn, "outcome": "interrupted"},
        )
        store.archive_thread(thread)
    with open(path, "a") as f:
        f.write(_line("user", "u-late", last, "while archived") + "\n")
    [f] = _import(home, path).files
    assert (f.status, [p.kind for p in f.problems], f.records) == ("skipped", ["archived"], 0)
    with open_store(home) as store:
        store.archive_thread(thread, archived=False)
    [f] = _import(home, path).files
    assert (f.status, f.lines) == ("grown", 1)
    with open_store(home) as store:
        assert conversation(store.read(thread))[-1] == ("user", "while archived")


@pytest.mark.parametrize("workers", [0, 2])
def test_a_long_new_thread_is_imported_with_its_checkpoint(
    home: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    """A session long enough for the store to checkpoint is written with a checkpoint built
    where its log was (in a worker too): its first open starts there, not at ord 1."""
    from threadlog.model.reducer import replay
    from threadlog.store.embedded import store as store_module

    monkeypatch.setattr(store_module, "CHECKPOINT_EVERY", 100)
    monkeypatch.setattr(store_module, "SPARSE_EVERY", 50)
    path = tmp_path / f"{SESSION}.jsonl"
    _session(path, TURNS)
    with open_store(home) as store:
        assert isinstance(store, EmbeddedStore)
        report = import_paths(store, source_format("claude-code"), [str(path)], workers=workers)
        [thread] = store.thread_ids()
        assert report.files[0].status == "imported"
    with open_store(home) as store:
        assert isinstance(store, EmbeddedStore)
        records = store.read(thread)
        [(ord_, digest, end)] = store.index.run(
            "SELECT ord, hash, end_offset FROM checkpoints WHERE thread_id = ?", (thread,)
        )
        assert (ord_, digest) == (records[-1].ord, records[-1].hash)
        assert end == os.path.getsize(store.path_of(thread))
        sparse = store.index.run(
            "SELECT ord, offset FROM sparse_offsets WHERE thread_id = ? ORDER BY ord", (thread,)
        )
        assert [o for o, _ in sparse] == list(range(50, len(records) + 1, 50))
        with open(store.path_of(thread), "rb") as f:
            for o, offset in sparse:
                f.seek(offset)
                assert f'"ord":{o},'.encode() in f.readline()
        assert store.state(thread, history=False).trimmed
        assert store.state(thread) == replay(records)
        assert store.verify(thread).ok
        store.append(thread, "custom.note", {"after": "import"})
        assert store._logs[thread].opened_at == (ord_, digest)
