"""``threadlog archive`` and ``threadlog gc --older-than AGE [--archived] [--dry-run]``."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from threadlog import open_store
from threadlog.cli import cli
from threadlog.cli.retention import parse_age
from threadlog.errors import UsageError


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_ages() -> None:
    assert parse_age("30d").days == 30
    assert parse_age("12h").total_seconds() == 12 * 3600
    assert parse_age("2w").days == 14
    for bad in ("30", "d", "1y", "-1d"):
        with pytest.raises(UsageError, match="older-than"):
            parse_age(bad)


def test_archive_then_gc_the_archived(home: str) -> None:
    with open_store(home) as store:
        kept, old = store.create_thread("a"), store.create_thread("a")
    code, out, err = run("archive", old, "--home", home)
    assert (code, out) == (0, f"{old} archived\n"), err
    assert run("archive", old, "--home", home)[1] == f"{old} was already archived\n"
    code, out, _ = run("ls", "--home", home, "--json")
    assert old not in out and kept in out
    code, out, err = run("gc", "--older-than", "0s", "--archived", "--dry-run", "--home", home)
    assert (code, out) == (0, f"would delete {old}\n1 thread would be deleted\n"), err
    code, out, err = run("gc", "--older-than", "30d", "--archived", "--home", home, "--json")
    assert json.loads(out) == {"deleted": [], "dry_run": False, "in_use": []}  # not old enough
    code, out, err = run("gc", "--older-than", "0s", "--archived", "--home", home, "--json")
    assert (code, json.loads(out)) == (0, {"deleted": [old], "dry_run": False, "in_use": []}), err
    with open_store(home) as store:
        assert store.thread_ids() == [kept]
        assert not os.path.exists(store.path_of(old))


def test_gc_without_archived_takes_every_old_thread_and_archive_undo(home: str) -> None:
    with open_store(home) as store:
        one = store.create_thread("a")
    assert run("archive", one, "--undo", "--home", home)[1] == f"{one} was already restored\n"
    code, out, err = run("gc", "--older-than", "bad", "--home", home)
    assert code == 2 and "older-than" in err
    code, out, err = run("gc", "--older-than", "0s", "--home", home)
    assert (code, out) == (0, f"deleted {one}\n1 thread deleted\n"), err


def test_gc_skips_a_thread_another_process_writes(home: str) -> None:
    import subprocess
    import sys

    with open_store(home) as store:
        busy = store.create_thread("a")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from threadlog import open_store\n"
            "s = open_store(sys.argv[1]); s.acquire(sys.argv[2]); print('held', flush=True)\n"
            "sys.stdin.read()",
            home,
            busy,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        code, out, err = run("gc", "--older-than", "0s", "--home", home, "--json")
        assert (code, json.loads(out)) == (0, {"deleted": [], "dry_run": False, "in_use": [busy]})
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
        if holder.stdout is not None:
            holder.stdout.close()


def test_rm_deletes_named_threads_for_good_after_asking(home: str) -> None:
    with open_store(home) as store:
        kept = store.create_thread("a", title="keep me")
        one = store.create_thread("a", title="one")
        two = store.create_thread("a")
    # no terminal to ask on (CliRunner's stdin is no TTY): --yes is required
    code, out, err = run("rm", one, "--home", home)
    assert code == 2 and "--yes" in err
    # asked on a terminal, and answered no: nothing is deleted
    from unittest import mock

    with mock.patch("threadlog.cli.retention._can_ask", return_value=True):
        asked = CliRunner().invoke(cli, ["rm", one[:-4], "--home", home], input="n\n")
    assert asked.exit_code != 0 and f"{one} ('one', 1 records)" in asked.stdout
    with open_store(home) as store:
        assert store.exists(one)
    code, out, err = run("rm", one[:-4], two, "--yes", "--home", home, "--json")
    assert (code, json.loads(out)) == (0, {"deleted": [one, two]}), err
    with open_store(home) as store:
        assert store.thread_ids() == [kept]
        assert store.deleted(one) and not os.path.exists(store.path_of(one))
    code, out, err = run("rm", one, "--yes", "--home", home)
    assert code != 0 and one in err  # gone: not found
    for command in (["show"], ["events"], ["export", "--format", "openai"]):
        code, out, err = run(*command, one, "--home", home)
        assert code == 2 and f"thread '{one}' was deleted from this store" in err, command
    never = "01900000-0000-7000-8000-000000000000"  # never was: not "deleted"
    code, out, err = run("show", never, "--home", home)
    assert code == 2 and "no thread" in err


def test_rm_refuses_a_running_thread_unless_forced(home: str) -> None:
    with open_store(home) as store:
        thread = store.create_thread("a")
        store.append(thread, "turn.started", {"turn_id": "t1", "input": "hi"})
    code, out, err = run("rm", thread, "--yes", "--home", home)
    assert code == 2 and "running turn" in err and "--force" in err
    with open_store(home) as store:
        assert store.exists(thread)
    code, out, err = run("rm", thread, "--yes", "--force", "--home", home)
    assert (code, out) == (0, f"deleted {thread}\n"), err
