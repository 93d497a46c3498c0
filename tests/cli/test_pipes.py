"""Pipes and scripts (issue 17, points 3-5): whole cells in a pipe, ids by unique prefix,
one ``--json`` style with JSON errors, exit codes that mean one thing, global options before
or after the command, and read-only commands that never make a store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from tests.cli.schemas import (
    ACTED,
    ARCHIVE,
    ERROR,
    EVENTS,
    FORK,
    GC,
    LS,
    MEMORY_LS,
    REBUILD,
    RESUME,
    RM,
    SHOW,
    VERIFY_ALL,
    check,
)
from tests.cli.threads import exchange, linear, run

from threadlog import open_store
from threadlog.cli import inspect as _inspect

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture
def store_with(tmp_path: Path) -> tuple[str, list[str]]:
    home = str(tmp_path / "store")
    with open_store(home) as store:
        threads = [
            store.create_thread("p", title=f"thread number {n} " + "x" * 90) for n in range(3)
        ]
        for n, thread in enumerate(threads):
            exchange(store, thread, n, "hello " * 30, "answer " * 30)
        store.flush()
    return home, threads


def test_a_pipe_gets_every_column_and_whole_ids_tab_separated(
    store_with: tuple[str, list[str]],
) -> None:
    home, threads = store_with
    code, out, err = run("ls", "--home", home)
    assert code == 0 and err == ""
    header, *rows = out.splitlines()
    assert header.split("\t") == [
        "thread", "principal", "title", "status", "records", "turns", "last activity", "waiting"
    ]  # fmt: skip
    assert sorted(r.split("\t")[0] for r in rows) == sorted(threads)
    assert all(len(r.split("\t")) == 8 for r in rows)
    assert any(r.split("\t")[2].endswith("x" * 90) for r in rows)  # never cut
    out = run("show", threads[0], "--home", home)[1]
    assert "hello " * 29 in out and "answer " * 29 in out


def test_unique_prefixes_name_threads_and_an_ambiguous_one_lists_candidates(
    store_with: tuple[str, list[str]],
) -> None:
    home, threads = store_with
    target = threads[1]
    prefix = next(
        target[:n] for n in range(1, 37) if sum(t.startswith(target[:n]) for t in threads) == 1
    )
    doc = check(json.loads(run("show", prefix, "--home", home, "--json")[1]), SHOW)
    assert doc["thread"]["thread_id"] == target
    events = check(json.loads(run("events", prefix, "--home", home, "--json")[1]), EVENTS)
    assert {e["thread"] for e in events} == {target}
    code, out, err = run("show", "0", "--home", home)
    assert code == 2 and out == ""
    assert "ambiguous" in err and all(t in err for t in threads)
    code, out, err = run("show", "0", "--home", home, "--json")
    error = check(json.loads(err), ERROR)["error"]
    assert code == 2 and error["exit_code"] == 2 and sorted(error["candidates"]) == sorted(threads)


def test_json_errors_are_json_on_stderr(store_with: tuple[str, list[str]]) -> None:
    home, _ = store_with
    for args in (
        ["show", "no-such-thread", "--json"],
        ["--json", "show", "no-such-thread"],
        ["ls", "--limit", "zero", "--json"],
        ["verify", "no-such-thread", "--json"],
    ):
        code, out, err = run(*args, "--home", home)
        assert code == 2 and out == "", args
        assert check(json.loads(err), ERROR)["error"]["kind"] == "usage", args


def test_exit_codes_mean_one_thing(
    store_with: tuple[str, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, threads = store_with
    code, _, err = run(
        "export", threads[0], "-o", str(tmp_path / "no" / "dir" / "x"), "--home", home
    )
    assert code == 2 and "cannot write" in err
    code, _, _ = run("ls", "--no-such-option", "--home", home)
    assert code == 2

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(_inspect, "fetch_events", broken)
    code, _, err = run("events", threads[0], "--home", home)
    assert code == 3 and "internal error" in err
    code, _, err = run("events", threads[0], "--home", home, "--json")
    assert code == 3 and check(json.loads(err), ERROR)["error"]["kind"] == "internal"


def test_a_closed_pipe_is_not_an_error(tmp_path: Path) -> None:
    home = str(tmp_path / "store")
    with open_store(home) as store:
        thread = linear(store, 2000)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    script = (
        f'"{sys.executable}" -m threadlog events {thread} --home "{home}" | head -1 >/dev/null;'
        ' echo "${PIPESTATUS[0]}"'
    )
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.stdout.strip() == "0", done.stderr
    assert "Traceback" not in done.stderr and "Broken pipe" not in done.stderr


def test_every_reading_command_through_a_real_pipe(store_with: tuple[str, list[str]]) -> None:
    home, threads = store_with
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "COLUMNS": "40"}
    for args in (
        ["ls"],
        ["show", threads[0]],
        ["show", threads[0], "--tree"],
        ["events", threads[0]],
        ["verify"],
        ["export", threads[0], "--format", "messages"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "threadlog", *args, "--home", home],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 0, (args, done.stderr)
        assert "\x1b" not in done.stdout and done.stderr == "", args  # no colour, no bar
        if args[0] == "ls":
            assert all(t in done.stdout for t in threads)  # not cut at 40 columns


def test_global_options_before_or_after_the_command(
    store_with: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    home, threads = store_with
    for args in (
        ["--store", home, "ls", "--json"],
        ["ls", "--store", home, "--json"],
        ["--home", home, "--json", "ls"],
        ["--json", "ls", "--home", home],
    ):
        code, out, err = run(*args)
        assert code == 0, (args, err)
        assert sorted(r["thread_id"] for r in check(json.loads(out), LS)) == sorted(threads)
    monkeypatch.setenv("THREADLOG_STORE", str(tmp_path / "elsewhere"))
    code, out, _ = run("--store", home, "ls", "--json")
    assert code == 0 and len(json.loads(out)) == 3  # the option wins over the environment
    code, out, _ = run()
    assert code == 0 and "Usage: " in out and "Commands:" in out


@pytest.mark.parametrize(
    "args",
    [
        ["ls"],
        ["show", "x"],
        ["show", "x", "--tree"],
        ["events", "x"],
        ["verify"],
        ["verify", "x"],
        ["rebuild"],
        ["export", "x"],
        ["diff", "x", "1", "2"],
        ["memory", "ls"],
        ["fork", "x"],
        ["archive", "x"],
        ["gc", "--older-than", "1d"],
        ["approve", "x", "call"],
        ["send", "x", "hi"],
        ["resume", "x"],
    ],
)
def test_commands_on_a_path_that_is_not_a_store_create_nothing(
    tmp_path: Path, args: list[str]
) -> None:
    missing, empty = tmp_path / "missing", tmp_path / "empty"
    empty.mkdir()
    for where in (missing, empty):
        code, out, err = run(*args, "--store", str(where))
        assert code == 2, (args, out, err)
        assert "not a threadlog store" in err and "nothing was created" in err
    assert not missing.exists() and list(empty.iterdir()) == []


def test_json_documents_of_the_maintenance_commands(store_with: tuple[str, list[str]]) -> None:
    home, threads = store_with
    check(json.loads(run("verify", "--home", home, "--json")[1]), VERIFY_ALL)
    doc = check(json.loads(run("rebuild", "--home", home, "--json")[1]), REBUILD)
    assert doc["threads"] == 3
    fork = check(json.loads(run("fork", threads[0][:30], "--home", home, "--json")[1]), FORK)
    rows = check(json.loads(run("ls", "--home", home, "--json")[1]), LS)
    assert rows[0]["thread_id"] == fork["thread"]  # a fresh fork sorts by its own creation
    check(json.loads(run("archive", threads[2], "--home", home, "--json")[1]), ARCHIVE)
    check(json.loads(run("gc", "--older-than", "30d", "--home", home, "--json")[1]), GC)
    check(json.loads(run("resume", threads[1], "--home", home, "--json")[1]), RESUME)
    check(json.loads(run("rm", fork["thread"], "--yes", "--home", home, "--json")[1]), RM)


def test_memory_ls_json_has_booleans(tmp_path: Path) -> None:
    home = str(tmp_path / "store")
    with open_store(home) as store:
        thread = store.create_thread("p")
        started = store.append(thread, "turn.started", {"turn_id": "t", "input": "x"})
        store.append(
            thread,
            "memory.written",
            {
                "memory_id": "m1",
                "fact": "[bold]tea[/bold] please",
                "source_event": started.id,
                "scope": "principal",
                "written_at": "2026-01-01T00:00:00.000000Z",
            },
        )
        store.flush()
    code, out, err = run("memory", "ls", "--all", "--home", home, "--json")
    assert code == 0, err
    (row,) = check(json.loads(out), MEMORY_LS)
    assert row["revoked"] is False
    assert "[bold]tea[/bold] please" in run("memory", "ls", "--home", home)[1]


def test_acting_commands_speak_the_same_json(store_with: tuple[str, list[str]]) -> None:
    home, threads = store_with
    code, out, err = run(
        "send", threads[0][:30], "[red]next[/red] \x1b[2J", "--home", home, "--json"
    )
    assert code == 0, err
    doc = check(json.loads(out), ACTED)
    assert doc["thread"] == threads[0] and doc["applied"] is True and doc["type"] == "input.queued"
    code, out, err = run("cancel", threads[0], "--home", home, "--json")
    assert code == 2 and out == "" and check(json.loads(err), ERROR)["error"]["kind"] == "usage"
    code, out, err = run("resolve", threads[0], "call_9", "--as", "done", "--home", home)
    assert code == 2 and err.startswith("error: ")
