"""The CLI: exact JSON shapes, exit codes, help with examples for every command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from threadlog import open_store
from threadlog.cli import cli
from threadlog.cli import demo as _demo  # noqa: F401
from threadlog.cli import inspect as _inspect  # noqa: F401 - registers commands


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def demo_thread(home: str) -> str:
    code, out, _ = run("demo", "--home", home, "--pause", "0.01", "--json", "--yes")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["verified"] is True
    return str(doc["thread"])


def test_every_command_has_help_with_an_example() -> None:
    from threadlog.cli import export as _export  # noqa: F401
    from threadlog.cli import live as _live  # noqa: F401
    from threadlog.cli import memory as _memory  # noqa: F401
    from threadlog.cli import token as _token  # noqa: F401

    checked = 0
    for name, command in cli.commands.items():
        subcommands = getattr(command, "commands", None)
        paths = [[name, sub] for sub in subcommands] if subcommands else [[name]]
        for path in paths:
            code, out, _ = run(*path, "--help")
            assert code == 0
            assert "Example" in out, f"{' '.join(path)} --help has no example"
            assert "--home" in out and "--json" in out, path
            checked += 1
    assert checked >= 16


def test_demo_writes_a_verified_thread(home: str, demo_thread: str) -> None:
    with open_store(home) as store:
        state = store.state(demo_thread)
        (turn,) = state.turns.values()
        assert turn.status == "completed"
        assert [c.tool for c in state.tool_calls.values()] == [
            "read_file",
            "read_file",
            "append_file",
        ]
        assert [c.status for c in state.tool_calls.values()] == ["finished"] * 3
        # the steering was queued and consumed exactly once
        assert (
            len(state.inputs) == 1 and next(iter(state.inputs.values())).consumed_by == turn.turn_id
        )
        assert store.verify(demo_thread).ok
        types = [r.type for r in store.read(demo_thread)]
        assert types[-2:] == ["turn.ended", "session.closed"]
        assert types.count("model.responded") == 4


def test_ls_json_shape(home: str, demo_thread: str) -> None:
    code, out, _ = run("ls", "--home", home, "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["thread_id"] for r in rows] == [demo_thread]
    assert set(rows[0]) == {
        "thread_id",
        "principal",
        "created_at",
        "title",
        "forked_from",
        "status",
        "last_ord",
        "last_hash",
        "last_ts",
        "turns",
        "tool_calls",
        "damage",
        "last_activity",
        "waiting",
    }
    assert rows[0]["principal"] == "demo" and rows[0]["turns"] == 1 and rows[0]["tool_calls"] == 3
    assert rows[0]["last_ord"] == 31


def test_ls_human_and_empty(home: str) -> None:
    open_store(home).close()  # an empty store
    code, out, _ = run("ls", "--home", home)
    assert code == 0 and "no threads" in out


def test_events_are_json_lines_from_a_cursor(home: str, demo_thread: str) -> None:
    code, out, _ = run("events", demo_thread, "--home", home, "--after", "20")
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert [r["ord"] for r in lines] == list(range(21, 32))
    assert list(lines[0]) == [
        "v",
        "id",
        "thread",
        "ord",
        "parent",
        "ts",
        "type",
        "data",
        "prev",
        "hash",
    ]
    code, out, _ = run("events", demo_thread, "--home", home, "--after", "2", "--limit", "2")
    assert [json.loads(x)["ord"] for x in out.splitlines()] == [3, 4]


def test_show_json(home: str, demo_thread: str) -> None:
    code, out, _ = run("show", demo_thread, "--home", home, "--json", "--last", "3")
    assert code == 0
    doc = json.loads(out)
    assert doc["thread"]["thread_id"] == demo_thread
    assert [t["status"] for t in doc["turns"]] == ["completed"]
    assert [r["ord"] for r in doc["last_records"]] == [29, 30, 31]
    code, out, _ = run("show", demo_thread, "--home", home)
    assert code == 0 and "append_file" in out


def test_unknown_thread_is_a_usage_error(home: str) -> None:
    for args in (
        ["show", "01a22a39-6d4f-761f-be74-ff624577f40c"],
        ["events", "nope"],
        ["verify", "01a22a39-6d4f-761f-be74-ff624577f40c"],
    ):
        code, _, err = run(*args, "--home", home)
        assert code == 2, args
        assert err.startswith("error: ")


def test_verify_names_the_tampered_ordinal(home: str, demo_thread: str) -> None:
    with open_store(home) as store:
        path = Path(store.path_of(demo_thread))
    lines = path.read_bytes().splitlines(keepends=True)
    line = bytearray(lines[11])  # ord 12
    pos = line.index(b'"id":"') + 10  # a hex digit of the event id: still valid JSON
    line[pos] = ord("0") if line[pos] != ord("0") else ord("1")
    lines[11] = bytes(line)
    path.write_bytes(b"".join(lines))
    code, out, _ = run("verify", demo_thread, "--home", home, "--json")
    assert code == 1
    report = json.loads(out)
    assert report["ok"] is False and report["first_bad_ord"] == 12
    code, out, _ = run("verify", "--home", home)
    assert code == 1 and "first bad ord 12" in out


def test_verify_ok_and_rebuild(home: str, demo_thread: str) -> None:
    code, out, _ = run("verify", "--home", home, "--json")
    assert code == 0
    assert json.loads(out)[0]["ok"] is True
    code, out, _ = run("rebuild", "--home", home, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["threads"] == 1 and doc["records"] == 31 and doc["damaged"] == []


def test_ctrl_c_closes_the_demo_cleanly(home: str) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "threadlog", "demo", "--home", home, "--pause", "0.3", "--yes"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    # interrupt mid-turn, not during start-up (a fixed sleep raced a slow interpreter start)
    assert proc.stdout is not None
    seen = b""
    while b"step.started" not in seen:
        line = proc.stdout.readline()
        assert line, "the demo ended before its first model call"
        seen += line
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    out = seen + out
    assert proc.returncode == 130, err.decode()
    assert b"closed cleanly" in out and b"Traceback" not in err
    with open_store(home) as store:
        (thread,) = store.thread_ids()
        assert store.verify(thread).ok
        *_, last, closed = store.read(thread)
        assert last.type == "turn.ended" and last.data["outcome"] == "aborted"
        assert closed.type == "session.closed"
        store.append(thread, "custom.after", {})  # the lease was released


def test_tail_follows_new_records_live(home: str) -> None:
    import signal
    import subprocess
    import sys

    with open_store(home) as store:
        thread = store.create_thread("u")
        store.append(thread, "custom.x", {"i": 0})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "threadlog",
            "tail",
            thread,
            "--home",
            home,
            "--after",
            "1",
            "--interval",
            "0.05",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert (first["ord"], first["type"]) == (2, "custom.x")
        with open_store(home) as store:  # another process writes while tail watches
            for i in range(1, 4):
                store.append(thread, "custom.x", {"i": i})
        seen = [json.loads(proc.stdout.readline())["ord"] for _ in range(3)]
        assert seen == [3, 4, 5]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    assert proc.returncode == 0
