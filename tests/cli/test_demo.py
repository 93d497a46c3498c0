"""``threadlog demo`` driven by its input: "no", "yes", end of input, no terminal, --yes, and a
60-column terminal. The approval prompt is only shown on a terminal, so the answers are typed
into a pseudo-terminal, as a user would."""

from __future__ import annotations

import os
import pty
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from threadlog.store.open import open_store

SRC = Path(__file__).resolve().parents[2] / "src"
WRITE = re.compile(r"README\.md now (documents|ends with)")
"""What the demo may say only when the write happened."""


@dataclass
class Run:
    out: str
    home: Path
    tmp: Path

    @property
    def thread(self) -> str:
        with open_store(str(self.home)) as store:
            (thread,) = [t.thread_id for t in store.threads()]
        return thread

    def types(self) -> list[str]:
        with open_store(str(self.home)) as store:
            return [r.type for r in store.read(self.thread)]

    def suggested(self) -> list[str]:
        return [line.strip() for line in self.out.splitlines() if line.startswith("  threadlog ")]


def demo(tmp_path: Path, *args: str, typed: bytes | None = None, columns: int = 120) -> Run:
    """Run the demo in a child process. With ``typed``, stdin is a pseudo-terminal that holds
    those keystrokes; without, stdin is closed (no terminal)."""
    home = tmp_path / "a home whose path is long enough to wrap at sixty columns"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(SRC),
        "TMPDIR": str(tmp),  # where the demo makes its workspace
        "COLUMNS": str(columns),
        "TERM": "dumb",
    }
    argv = [sys.executable, "-m", "threadlog", "demo", "--home", str(home), "--pause", "0"]
    if typed is None:
        proc = subprocess.run(
            [*argv, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    else:
        master, slave = pty.openpty()
        try:
            os.write(master, typed)  # the line discipline keeps them until the prompt reads
            proc = subprocess.run(
                [*argv, *args], stdin=slave, capture_output=True, text=True, env=env, timeout=120
            )
        finally:
            os.close(slave)
            os.close(master)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return Run(proc.stdout, home, tmp)


def assert_declined_log(run: Run) -> None:
    types = run.types()
    assert "tool_call.denied" in types
    assert types.count("tool_call.finished") == 2  # the two reads; the append never ran


def assert_declined(run: Run) -> None:
    assert_declined_log(run)
    assert not WRITE.search(run.out), run.out
    assert "README.md was not changed: the write was declined." in run.out
    assert "I left README.md unchanged" in run.out


def assert_removed(run: Run) -> None:
    """The workspace is gone and the output says so."""
    assert list(run.tmp.iterdir()) == []
    assert re.search(r"^workspace .*threadlog-demo-\S+ removed$", run.out, re.M), run.out


def assert_tidy(run: Run) -> None:
    """The workspace is gone, and every suggested command works as printed."""
    assert_removed(run)
    commands = run.suggested()
    assert [c.split()[1] for c in commands] == ["show", "events", "verify", "fork", "resume"]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    for command in commands:
        argv = [sys.executable, "-m", "threadlog", *shlex.split(command)[1:]]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"


def test_no_at_the_prompt_declines_and_the_demo_says_so(tmp_path: Path) -> None:
    run = demo(tmp_path, typed=b"n\n")
    assert "run it? [y/N]" in run.out  # "no" is the default
    assert_declined(run)
    assert_tidy(run)


def test_an_empty_answer_is_no(tmp_path: Path) -> None:
    assert_declined(demo(tmp_path, typed=b"\n"))


def test_end_of_input_at_the_prompt_is_no(tmp_path: Path) -> None:
    run = demo(tmp_path, typed=b"\x04")  # Ctrl-D on an empty line: end of input
    assert "no answer (end of input): declined" in run.out
    assert_declined(run)


def test_without_a_terminal_the_write_is_declined_without_asking(tmp_path: Path) -> None:
    run = demo(tmp_path)
    assert "run it?" not in run.out
    assert "declined (no terminal to ask on; --yes approves)" in run.out
    assert_declined(run)
    assert_removed(run)


def test_yes_at_the_prompt_writes_and_the_demo_says_so(tmp_path: Path) -> None:
    run = demo(tmp_path, typed=b"y\n")
    types = run.types()
    assert "tool_call.approved" in types and "tool_call.denied" not in types
    assert types.count("tool_call.finished") == 3
    assert "README.md now ends with:" in run.out and "## Retry policy" in run.out
    assert "Done: README.md now documents the retry policy" in run.out
    assert "declined" not in run.out
    assert_tidy(run)


def test_the_yes_flag_approves_without_asking(tmp_path: Path) -> None:
    run = demo(tmp_path, "--yes")
    assert "run it?" not in run.out and "approved (--yes)" in run.out
    assert "tool_call.denied" not in run.types()
    assert "README.md now ends with:" in run.out


@pytest.mark.parametrize("columns", [60, 40])
def test_suggested_commands_are_never_wrapped(tmp_path: Path, columns: int) -> None:
    run = demo(tmp_path, typed=b"n\n", columns=columns)
    commands = run.suggested()
    assert len(commands) == 5
    thread, home = run.thread, str(run.home)
    for command in commands:
        assert thread in command and command.endswith(f"--home '{home}'"), run.out
        assert len(command) > columns  # long, and still whole on its line


def test_json_never_prompts_and_reports_the_decision(tmp_path: Path) -> None:
    run = demo(tmp_path, "--json", typed=b"y\n")  # a terminal, but --json does not ask
    doc = orjson.loads(run.out)
    assert doc["write"] == "declined" and doc["verified"] is True
    assert_declined_log(run)
