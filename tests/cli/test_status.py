"""Honest status, progress and completion (issue 17, points 6-8): running told from
interrupted, the call waiting for a human named with the command that settles it, damage as
damage, records in words, ``tail`` for people, progress bars only on a terminal, and thread
ids completed from the index."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from tests.cli.schemas import ERROR, LS, SHOW, check
from tests.cli.threads import exchange, run

from threadlog import open_store
from threadlog.cli import _out, cli
from threadlog.cli._store import THREAD


def _open_turn(home: str, *, unknown: bool = False) -> str:
    with open_store(home) as store:
        thread = store.create_thread("p", title="half done")
        _, answer = exchange(store, thread, 0, "first", "first answer")
        store.append(thread, "turn.started", {"turn_id": "t1", "input": "second"})
        if unknown:
            for type_, data in (
                (
                    "tool_call.proposed",
                    {
                        "turn_id": "t1",
                        "call_id": "call_1",
                        "tool": "append_file",
                        "args": {"path": "x"},
                        "side_effect": "non_idempotent",
                    },
                ),
                ("tool_call.approved", {"call_id": "call_1", "by": "me"}),
                ("tool_call.started", {"call_id": "call_1", "attempt": 1}),
                ("tool_call.unknown", {"call_id": "call_1", "reason": "crashed mid-call"}),
            ):
                store.append(thread, type_, data)
        store.flush()
    return thread


def test_an_open_turn_nobody_holds_is_interrupted_and_says_how_to_recover(tmp_path: Path) -> None:
    home = str(tmp_path / "s")
    thread = _open_turn(home, unknown=True)
    (row,) = check(json.loads(run("ls", "--home", home, "--json")[1]), LS)
    assert row["status"] == "interrupted"
    assert row["waiting"] == [
        {
            "call_id": "call_1",
            "tool": "append_file",
            "needs": "resolve",
            "command": f"threadlog resolve {thread} call_1 --as done|retry|abort",
        }
    ]
    out = run("ls", "--home", home)[1]
    assert "\tinterrupted\t" in out and "call_1 (resolve)" in out
    out = run("show", thread, "--home", home)[1]
    assert (
        f"interrupted: turn t1 is open and no process holds the thread (threadlog resume {thread})"
        in out
    )
    assert f"threadlog resolve {thread} call_1 --as done|retry|abort" in out
    # the latest records in words, the demo's, not raw JSON
    assert 'append_file({"path":"x"}) non_idempotent' in out
    assert "attempt 1 (durable before the tool runs)" in out
    assert "user: second" in out and '{"turn_id"' not in out


def test_an_open_turn_whose_holder_lives_is_running(tmp_path: Path) -> None:
    home = str(tmp_path / "s")
    thread = _open_turn(home)
    with open_store(home) as holder:
        holder.acquire(thread)
        holder.append(thread, "custom.note", {"text": "still here"})
        holder.flush()
        (row,) = check(json.loads(run("ls", "--home", home, "--json")[1]), LS)
        assert row["status"] == "running"
        assert (
            "running: turn t1, a process holds the thread" in run("show", thread, "--home", home)[1]
        )
    (row,) = json.loads(run("ls", "--home", home, "--json")[1])
    assert row["status"] == "interrupted"


def test_damage_shows_as_damage_in_the_table_and_the_json(tmp_path: Path) -> None:
    home = str(tmp_path / "s")
    with open_store(home) as store:
        thread = store.create_thread("p", title="to be damaged")
        exchange(store, thread, 0, "first", "first answer")
        exchange(store, thread, 1, "second", "second answer")
        store.flush()
        path = store.path_of(thread)
    data = bytearray(Path(path).read_bytes())
    at = data.index(b"second answer")
    data[at : at + 6] = b"SECOND"
    Path(path).write_bytes(bytes(data))
    assert run("rebuild", "--home", home)[0] == 0
    (row,) = check(json.loads(run("ls", "--home", home, "--json")[1]), LS)
    assert row["status"] == "damaged" and "hash" in row["damage"]
    assert "\tdamaged\t" in run("ls", "--home", home)[1]
    assert run("verify", thread, "--home", home)[0] == 1
    code, _, err = run("show", thread, "--home", home, "--json")
    error = check(json.loads(err), ERROR)["error"]
    assert code == 3 and error["kind"] == "damage" and error["thread"] == thread
    code, _, err = run("show", thread, "--home", home)
    assert code == 3 and f"threadlog resume {thread} --salvage" in err


def test_tail_speaks_words_on_request_and_json_lines_in_a_pipe(tmp_path: Path) -> None:
    home = str(tmp_path / "s")
    with open_store(home) as store:
        thread = store.create_thread("p", title="tailed")
        exchange(store, thread, 0, "hello [bold]there", "hi")
        store.flush()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for fmt, expect in (("human", "user: hello [bold]there"), ("auto", '"type":"turn.started"')):
        proc = subprocess.Popen(
            [sys.executable, "-m", "threadlog", "tail", thread, "--home", home, "--format", fmt],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        seen = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(seen) < 3:
            seen.append(proc.stdout.readline())
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
        assert expect in "".join(seen), (fmt, seen)


def test_progress_bars_show_on_a_terminal_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = str(tmp_path / "s")
    with open_store(home) as store:
        for n in range(3):
            exchange(store, store.create_thread("p"), n, "q", "a")
    for args in (["verify"], ["rebuild"]):
        assert run(*args, "--home", home)[2] in ("", "rebuilding the index of " + home + " …\n")
        assert run(*args, "--home", home, "--json")[2] == ""
    monkeypatch.setattr(_out, "FORCE_TERMINAL", True)
    err = run("verify", "--home", home)[2]
    assert "verifying" in err and "3/3" in err  # a bar, counting threads
    err = run("rebuild", "--home", home)[2]
    assert "rebuilding the index" in err and "3/3" in err
    for args in (["verify"], ["rebuild"]):
        assert run(*args, "--home", home, "--json")[2] == ""  # --json: nothing extra


def test_thread_ids_complete_from_the_index(tmp_path: Path) -> None:
    home = str(tmp_path / "s")
    with open_store(home) as store:
        threads = sorted(store.create_thread("p", title=f"t{n}") for n in range(3))
    ctx = click.Context(cli.commands.get("ls") or cli, obj={"home": home})
    param = click.Argument(["thread"])
    found = THREAD.shell_complete(ctx, param, threads[0][:8])
    assert sorted(item.value for item in found) == threads
    assert [i.value for i in THREAD.shell_complete(ctx, param, threads[2])] == [threads[2]]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "_THREADLOG_COMPLETE": "bash_complete",
        "COMP_WORDS": f"threadlog show --home {home} {threads[1][:-1]}",
        "COMP_CWORD": "4",
    }
    done = subprocess.run(
        [sys.executable, "-m", "threadlog"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert threads[1] in done.stdout
    env["_THREADLOG_COMPLETE"] = "bash_source"
    done = subprocess.run(
        [sys.executable, "-m", "threadlog"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0 and "_threadlog_completion" in done.stdout


def test_show_json_carries_the_honest_status(tmp_path: Path) -> None:
    home = str(tmp_path / "s")
    thread = _open_turn(home, unknown=True)
    doc = check(json.loads(run("show", thread, "--home", home, "--json")[1]), SHOW)
    assert doc["thread"]["status"] == "interrupted"
    assert doc["thread"]["waiting"][0]["needs"] == "resolve"


def test_ls_lists_archived_threads_and_filters_by_metadata(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    with open_store(home) as store:
        alice = store.create_thread("alice", metadata={"user": "alice", "tier": 2})
        bob = store.create_thread("bob", metadata={"user": "bob"})
        carol = store.create_thread("carol")
        store.archive_thread(carol)

    def listed(*options: str) -> list[str]:
        result = CliRunner().invoke(cli, ["--store", home, "--json", "ls", *options])
        assert result.exit_code == 0, result.output
        return sorted(row["thread_id"] for row in json.loads(result.output))

    assert listed() == sorted([alice, bob])
    assert listed("--archived") == [carol]
    assert listed("--all") == sorted([alice, bob, carol])
    assert listed("--meta", "user=alice") == [alice]
    assert listed("--meta", "tier=2", "--meta", "user=alice") == [alice]
    assert listed("--meta", "tier=3") == []
    bad = CliRunner().invoke(cli, ["--store", home, "ls", "--meta", "tier"])
    assert bad.exit_code == 2 and "KEY=VALUE" in bad.output
