"""A thread that already holds an illegal record (an older threadlog wrote it, before the
store checked appends) is reported, named and salvaged, never a traceback.

`verify` names the ordinal and the reason and exits 1; `show` and `resume` say where the log
is damaged; ``resume --salvage`` copies the records before the illegal one to a new thread
(lineage recorded) and resumes that one, leaving the damaged log as it was.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from tests.store.test_append_legality import plant_illegal_end

from threadlog import open_store
from threadlog.cli import cli
from threadlog.cli import inspect as _inspect  # noqa: F401 - registers commands
from threadlog.cli import live as _live  # noqa: F401
from threadlog.model.envelope import FORMAT_VERSION


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def damaged_thread(home: str) -> tuple[str, int]:
    """A thread whose ord 4 ends a turn that ord 3 already ended."""
    with open_store(home) as store:
        thread = store.create_thread("alice")
        store.append(thread, "turn.started", {"turn_id": "t1", "input": "hi"})
        store.append(thread, "turn.ended", {"turn_id": "t1", "outcome": "completed"})
    return thread, plant_illegal_end(home, thread)


def test_verify_names_the_illegal_record(home: str) -> None:
    thread, bad = damaged_thread(home)
    code, out, _ = run("verify", thread, "--home", home)
    assert code == 1
    line = " ".join(out.split())  # (the console wraps long lines)
    assert f"first bad ord {bad}: illegal event: turn.ended: turn 't1' already ended" in line
    code, out, _ = run("verify", thread, "--home", home, "--json")
    assert code == 1
    report = json.loads(out)
    assert report["ok"] is False and report["first_bad_ord"] == bad
    assert "already ended" in report["error"]


def test_show_names_the_ordinal_without_a_traceback(home: str) -> None:
    thread, bad = damaged_thread(home)
    result = CliRunner().invoke(cli, ["show", thread, "--home", home])
    assert result.exit_code != 0
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert f"ord {bad}: illegal event turn.ended" in result.stderr
    assert "Traceback" not in result.output


def test_resume_stops_and_salvage_keeps_the_records_before_it(home: str) -> None:
    thread, bad = damaged_thread(home)
    with open_store(home) as store:
        path = Path(store.path_of(thread))
        prefix = [(r.id, r.type, r.data) for r in store.read(thread)[: bad - 1]]
    before = path.read_bytes()
    code, _, err = run("resume", thread, "--home", home)
    assert code == 3
    assert f"damaged at ord {bad}" in err and "illegal event turn.ended" in err
    assert f"threadlog resume {thread} --salvage" in err
    assert "Traceback" not in err
    code, out, err = run("resume", thread, "--home", home, "--salvage", "--json")
    assert code == 0, err
    report = json.loads(out)
    salvaged = report["thread"]
    assert report["salvaged_from"]["ord"] == bad - 1
    with open_store(home) as store:
        records = store.read(salvaged)
        assert [(r.id, r.type, r.data) for r in records[1 : bad - 1]] == prefix[1:]
        # the copy was resumed: nothing was left to repair in it, so nothing was written
        assert report["repaired"] is False and len(records) == bad - 1
        state = store.state(salvaged)
        assert state.lineage is not None and state.format == FORMAT_VERSION
        assert state.lineage == {**state.lineage, "thread": thread, "ord": bad - 1}
        assert state.lineage["kind"] == "salvage"
        assert store.verify(salvaged).ok
        # the copy keeps taking events: the turn the damaged log ended twice ended once
        store.append(salvaged, "turn.started", {"turn_id": "t2", "input": "again"})
    assert path.read_bytes() == before  # the damaged log is left as it was
