"""User and model text is never markup, nor terminal control (issue 17, point 1).

A hostile thread (brackets that rich would read as tags, ANSI escapes, a carriage return, a
bell, HTML, a right-to-left override) goes through every reading command, in a pipe and on a
(forced) terminal: nothing crashes, the text shows as it was written, and no control
character of the user's reaches the output.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from tests.cli.schemas import DIFF, EVENTS, LS, SHOW, TREE, VERIFY_ONE, check
from tests.cli.threads import HOSTILE, hostile_thread, run

from threadlog import open_store
from threadlog.cli import _out

if TYPE_CHECKING:
    from pathlib import Path

CONTROLS = ["\x1b", "\r", "\x07", "\x08", "\u202e"]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    home = str(tmp_path_factory.mktemp("hostile") / "store")
    with open_store(home) as store:
        return home, hostile_thread(store)


def _commands(thread: str) -> list[list[str]]:
    return [
        ["ls"],
        ["show", thread],
        ["show", thread, "--tree"],
        ["show", thread, "--tree", "--all"],
        ["verify", thread],
        ["verify"],
        ["export", thread, "--format", "messages"],
        ["export", thread, "--format", "html"],
        ["diff", thread, "5", "13"],
    ]


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
def test_every_reading_command_prints_hostile_text_as_text(
    hostile: tuple[str, str], terminal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, thread = hostile
    monkeypatch.setattr(_out, "FORCE_TERMINAL", terminal)
    for args in _commands(thread):
        code, out, err = run(*args, "--home", home)
        assert code == 0, (args, out, err)
        assert "Traceback" not in err, args
        if args[0] == "export":
            continue  # the exported document is data, escaped by its own format
        if not terminal:
            for control in CONTROLS:
                assert control not in out, (args, control)
        else:
            # rich styles with escapes of its own; the user's sequences never get through
            assert "\x1b[31mANSI" not in out and "\x1b]0;title" not in out, args
            assert "\r" not in out and "\x07" not in out and "\u202e" not in out, args
    if terminal:
        return
    _, out, _ = run("ls", "--home", home)
    assert "fix the [/tmp] cleanup" in out and "[bold]eve[/bold]" in out
    _, out, _ = run("show", thread, "--home", home)
    assert "[red]not red[/red]" in out and "␛[31mANSI red␛[0m" in out
    assert "<U+202E>evil" in out
    _, out, _ = run("show", thread, "--tree", "--home", home)
    assert "[/bold] closes nothing" in out and "<script>alert('html')</script>" in out


def test_the_terminal_shows_brackets_literally(
    hostile: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, thread = hostile
    monkeypatch.setattr(_out, "FORCE_TERMINAL", True)
    _, out, _ = run("ls", "--home", home)
    assert "[/tmp]" in out  # not swallowed as a closing tag
    _, out, _ = run("show", thread, "--tree", "--home", home)
    assert "[red]not red[/red]" in out and ":smile:" in out  # no style, no emoji


def test_json_keeps_the_text_exactly(hostile: tuple[str, str]) -> None:
    home, thread = hostile
    rows = check(json.loads(run("ls", "--home", home, "--json")[1]), LS)
    assert rows[0]["title"] == HOSTILE[0]
    doc = check(json.loads(run("show", thread, "--home", home, "--json")[1]), SHOW)
    assert doc["thread"]["waiting"][0]["call_id"] == "call_[red]x"
    tree = check(json.loads(run("show", thread, "--tree", "--home", home, "--json")[1]), TREE)
    assert HOSTILE[3] in tree["entries"][2]["text"]  # data, not made visible
    check(json.loads(run("events", thread, "--home", home, "--json")[1]), EVENTS)
    check(json.loads(run("verify", thread, "--home", home, "--json")[1]), VERIFY_ONE)
    check(json.loads(run("diff", thread, "5", "13", "--home", home, "--json")[1]), DIFF)


def test_the_settle_command_is_shell_quoted(hostile: tuple[str, str]) -> None:
    home, thread = hostile
    doc = json.loads(run("show", thread, "--home", home, "--json")[1])
    assert doc["thread"]["waiting"][0]["command"] == (
        f"threadlog resolve {thread} 'call_[red]x' --as done|retry|abort"
    )


def test_clean_makes_every_control_visible() -> None:
    assert _out.clean("a\x1b[31mb\rc\x00d\x7fe\x9bf") == "a␛[31mb␍c␀d␡e<U+009B>f"
    assert _out.clean("one\ntwo\tthree", one_line=True) == "one two three"
    assert _out.short("x" * 10, 5) == "xxxx…"
    assert _out.text("[bold]x[/bold]").plain == "[bold]x[/bold]"


def test_a_hostile_store_path_in_messages(tmp_path: Path) -> None:
    where = tmp_path / "[red]no\x1b[2Jstore"
    code, _, err = run("ls", "--home", str(where))
    assert code == 2 and "\x1b" not in err and "[red]no" in err and "not a threadlog store" in err
