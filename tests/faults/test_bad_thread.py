"""One bad thread never takes the store down (issue 9, point 7): the open reports it (logged,
in `EmbeddedStore.problems`, by `threadlog verify`), skips it, and keeps every journal it
could not fully replay."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.security.homes import crashed_home
from threadlog import StorageError, open_store
from threadlog.cli import cli
from threadlog.cli import inspect as _inspect  # noqa: F401 - registers commands
from threadlog.model import codec
from threadlog.model.envelope import encode_record


def test_a_journal_naming_a_deleted_rollout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    crashed = crashed_home(tmp_path)
    crashed.rollout(crashed.other).unlink()
    with caplog.at_level(logging.ERROR, "threadlog.store"), open_store(crashed.home) as store:
        assert store.read(crashed.thread)[1:] == crashed.acked  # the good thread recovered
        assert [(p["kind"], p["thread"]) for p in store.problems] == [
            ("journal_thread", crashed.other)
        ]
        assert store.append(crashed.thread, "custom.after", {}).ord == len(crashed.acked) + 2
    assert "is gone" in caplog.text
    assert len(crashed.journals()) == 1  # not fully replayed: kept


def test_a_journal_record_of_a_thread_that_is_not_a_thread_id(tmp_path: Path) -> None:
    crashed = crashed_home(tmp_path)
    line, _ = encode_record(
        id="0190b4a1-5b53-7c9e-8a5e-000000000001",
        thread="../../etc/passwd",
        ord=1,
        parent=None,
        ts="2026-01-01T00:00:00.000000Z",
        type="custom.x",
        data_json=codec.canonical({}),
        prev=None,
    )
    crashed.write_to_journal(line)
    with open_store(crashed.home) as store:
        assert store.read(crashed.thread)[1:] == crashed.acked
        (problem,) = store.problems
        assert problem["thread"] == "../../etc/passwd"
    assert len(crashed.journals()) == 1


@pytest.mark.parametrize("damage", ["a file", "a .wal folder"])
def test_a_damaged_journal_folder(tmp_path: Path, damage: str) -> None:
    home = tmp_path / "home"
    with open_store(home) as store:
        a = store.create_thread("a")
        store.create_thread("b")
    if damage == "a file":
        shutil.rmtree(home / "journal", ignore_errors=True)
        (home / "journal").write_bytes(b"not a folder")
    else:
        (home / "journal" / "x.wal").mkdir(parents=True)
    with open_store(home) as store:
        assert len(store.read(a)) == 1 and len(store.threads()) == 2
        assert store.problems
        if damage == "a file":  # every commit goes through a journal: none can be made
            with pytest.raises(StorageError, match="cannot create the journal folder"):
                store.append(a, "custom.x", {})
        else:
            assert store.append(a, "custom.x", {}).ord == 2
    assert (home / "journal").exists()


def test_verify_lists_the_problems_and_fails(tmp_path: Path) -> None:
    crashed = crashed_home(tmp_path)
    crashed.rollout(crashed.other).unlink()
    result = CliRunner().invoke(cli, ["verify", "--home", str(crashed.home)])
    assert result.exit_code == 1, result.output
    assert "problem:" in result.stderr and crashed.other in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert os.path.exists(crashed.journals()[0])
