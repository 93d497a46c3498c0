"""Importing again: nothing twice, only the new lines of a grown file, and a lost ledger or a
moved file costs time, never a duplicate."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from threadlog import open_store
from threadlog.importers import import_paths, source_format

from ._helpers import conversation

CLAUDE = "7d3c2a10-5b6e-4f1a-9c8d-0e1f2a3b4c5d"
CODEX = "0199a213-81c0-7800-8aa1-bbab2a035a53"


def _run(home: str, fmt: str, path: Path) -> Any:
    with open_store(home) as store:
        return import_paths(store, source_format(fmt), [str(path)])


def _counts(home: str) -> dict[str, int]:
    with open_store(home) as store:
        return {t: len(store.read(t)) for t in store.thread_ids()}


def test_importing_twice_adds_nothing(home: str, sources: Path) -> None:
    for fmt in ("claude-code", "codex", "pi"):
        first = _run(home, fmt, sources / fmt)
        assert first.records > 0
    before = _counts(home)
    for fmt in ("claude-code", "codex", "pi"):
        again = _run(home, fmt, sources / fmt)
        assert {f.status for f in again.files} == {"unchanged"}
        assert again.records == 0
    assert _counts(home) == before


def test_a_lost_ledger_finds_the_threads_again(home: str, sources: Path) -> None:
    _run(home, "claude-code", sources / "claude-code")
    before = _counts(home)
    shutil.rmtree(os.path.join(home, "imports"))
    again = _run(home, "claude-code", sources / "claude-code")
    assert {f.status for f in again.files} == {"unchanged"}
    assert again.records == 0
    assert _counts(home) == before


def test_a_moved_file_is_the_same_session(home: str, sources: Path, tmp_path: Path) -> None:
    _run(home, "codex", sources / "codex")
    before = _counts(home)
    moved = tmp_path / "elsewhere"
    shutil.copytree(sources / "codex", moved)
    again = _run(home, "codex", moved)
    assert again.records == 0
    assert _counts(home) == before


def test_a_grown_claude_file_imports_its_new_lines(home: str, sources: Path) -> None:
    path = sources / "claude-code" / "-home-user-project" / f"{CLAUDE}.jsonl"
    first = _run(home, "claude-code", path)
    thread = first.files[0].thread
    before = _counts(home)[thread]
    with open(path, "a") as f:  # the writer finishes its torn line, then writes one more
        f.write(
            'n off"},"uuid":"u6","sessionId":"'
            + CLAUDE
            + '","timestamp":"2025-09-01T10:04:00.000Z"}\n'
            '{"parentUuid":"u6","isSidechain":false,"type":"assistant","uuid":"a8",'
            '"timestamp":"2025-09-01T10:04:01.000Z","message":{"id":"msg_G","role":"assistant",'
            '"model":"claude-sonnet-4-20250514","content":[{"type":"text","text":"Bye."}],'
            '"usage":{"input_tokens":3,"output_tokens":1}}}\n'
        )
    grown = _run(home, "claude-code", path)
    [f] = grown.files
    assert f.status == "grown" and f.problems[-1].kind != "torn_tail"
    # turn.ended + turn.started, step.started + model.responded, the progress record
    assert f.records == 5
    with open_store(home) as store:
        records = store.read(thread)
    assert len(records) == before + 5
    assert conversation(records)[-2:] == [("user", "torn off"), ("assistant", "Bye.", [])]
    assert _run(home, "claude-code", path).records == 0


def test_a_grown_codex_file_is_read_from_where_the_last_import_stopped(
    home: str, sources: Path
) -> None:
    [path] = (sources / "codex").rglob(f"*{CODEX}.jsonl")
    first = _run(home, "codex", path)
    assert first.files[0].lines == 27
    with open(path, "a") as f:
        f.write(
            '{"timestamp":"2025-10-01T09:00:00.000Z","type":"response_item","ordinal":28,'
            '"payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"one more"}]}}\n'
            '{"timestamp":"2025-10-01T09:00:01.000Z","type":"response_item","ordinal":29,'
            '"payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"sure"}]}}\n'
        )
    grown = _run(home, "codex", path)
    [f] = grown.files
    assert (f.status, f.lines, f.bytes < 400) == ("grown", 2, True)
    with open_store(home) as store:
        records = store.read(f.thread)
        assert store.verify(f.thread).ok
    assert conversation(records)[-2:] == [("user", "one more"), ("assistant", "sure", [])]


def test_a_rewritten_line_is_reported_not_duplicated(home: str, sources: Path) -> None:
    [path] = (sources / "pi").rglob("*_e5f7a9b1-*.jsonl")
    first = _run(home, "pi", path)
    text = path.read_text().replace("v4 hi", "v4 hello there")
    path.write_text(
        text
        + '{"type":"message","id":"g4","parentId":"g3","timestamp":"2025-12-01T09:00:04.000Z","message":{"role":"user","content":"next"}}\n'
    )
    again = _run(home, "pi", path)
    [f] = again.files
    assert "changed" in {p.kind for p in f.problems}
    with open_store(home) as store:
        records = store.read(first.files[0].thread)
    assert conversation(records)[-1] == ("user", "next")


def test_a_second_import_into_the_same_store_waits_for_the_first(home: str) -> None:
    import threading

    from threadlog.importers._ledger import Ledger

    with open_store(home) as store:
        first = Ledger.open(store)
        opened = threading.Event()

        def second() -> None:
            Ledger.open(store).close()
            opened.set()

        worker = threading.Thread(target=second)
        worker.start()
        assert not opened.wait(0.3)
        first.close()
        assert opened.wait(5)
        worker.join()


def test_a_claude_code_fork_names_its_source(home: str, tmp_path: Path) -> None:
    path = tmp_path / "fork.jsonl"
    path.write_text(
        '{"type":"user","uuid":"f1","parentUuid":null,"sessionId":"forked-1",'
        '"forkedFrom":{"sessionId":"7d3c2a10-5b6e-4f1a-9c8d-0e1f2a3b4c5d","messageUuid":"f1"},'
        '"message":{"role":"user","content":"from the fork"}}\n'
    )
    from ._helpers import FIXTURES

    main = _run(
        home, "claude-code", FIXTURES / "claude-code" / "-home-user-project" / f"{CLAUDE}.jsonl"
    )
    [fork] = _run(home, "claude-code", path).files
    with open_store(home) as store:
        lineage = store.read(fork.thread, limit=1)[0].data["lineage"]
    assert lineage["kind"] == "fork" and lineage["thread"] == main.files[0].thread


def test_the_ledger_is_private(home: str, sources: Path) -> None:
    _run(home, "pi", sources / "pi")
    for name in ("ledger.json", "lock"):
        assert os.stat(os.path.join(home, "imports", name)).st_mode & 0o077 == 0
