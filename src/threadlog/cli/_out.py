"""How the command line prints: user text made safe, tables for a terminal or a pipe, JSON.

*User text is never markup.* Titles, messages, tool output and error messages come from users
and models; rich would read ``[/tmp]`` in them as a closing tag (and crash) or ``[red]`` as a
style. Everything a command prints that it did not write itself goes through `clean` (terminal
control characters made visible: an ANSI escape, ``\\r``, a backspace or a bidirectional
override can neither restyle the terminal nor hide text) and reaches rich as a plain
`rich.text.Text` (`text`), never as a markup string. Consoles are made by `console`, with
markup-free defaults (no emoji codes, no highlighting).

*A terminal or a pipe.* On a terminal a table is a rich table, long cells shortened; anything
else (a pipe, a file, a test's runner) gets tab-separated lines with every id and cell whole
(`table`), so ``cut -f1`` works and nothing is cut at 80 columns. ``--json`` output is one
document per command, printed by `print_json` (errors: `print_json_error`, on stderr).
"""

from __future__ import annotations

import re
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeAlias

import orjson

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from rich.console import Console
    from rich.text import Text

__all__ = [
    "abbreviate",
    "clean",
    "console",
    "is_terminal",
    "print_json",
    "print_json_error",
    "progress",
    "short",
    "table",
    "text",
]

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f]")
_BLANK = re.compile(r"\s+")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # the control pictures: ␛ ␍ ␈ …
    if code == 0x7F:
        return "\u2421"  # ␡
    return f"<U+{code:04X}>"


def clean(value: Any, *, one_line: bool = False) -> str:
    """``value`` as text that cannot act on a terminal: every control character but newline
    (and tab) shown as a visible stand-in (ESC as ␛, so ``\\x1b[31m`` reads ``␛[31m``), and
    bidirectional overrides named. ``one_line`` also collapses whitespace, newlines included,
    to single spaces. None is empty."""
    if value is None:
        return ""
    string = value if isinstance(value, str) else str(value)
    if one_line:
        string = " ".join(string.replace("\x0b", " ").replace("\x0c", " ").split())
    else:
        string = string.replace("\t", "    ")
    return _CONTROL.sub(_visible, string)


def short(value: Any, width: int | None = 60) -> str:
    """``value`` cleaned to one line of at most ``width`` characters (an ellipsis where it was
    cut; no limit for None)."""
    string = clean(value, one_line=True)
    if width is None or len(string) <= width:
        return string
    return string[: max(width - 1, 0)] + "…"


def text(value: Any, style: str = "", *, width: int | None = None) -> Text:
    """``value`` as a rich `Text` (never parsed as markup), cleaned, one line when ``width``
    is given."""
    from rich.text import Text  # rich is imported when output is styled, never for --json

    string = short(value, width) if width is not None else clean(value)
    return Text(string, style=style)


FORCE_TERMINAL: bool | None = None
"""Tests set this to True to see what a terminal gets (None: ask stdout)."""


def console(*, stderr: bool = False) -> Console:
    """A console that prints what it is given: no markup in `Text`, no emoji codes, no
    highlighting of numbers and paths."""
    from rich.console import Console

    return Console(
        highlight=False,
        emoji=False,
        soft_wrap=False,
        stderr=stderr,
        force_terminal=FORCE_TERMINAL,
        width=100 if FORCE_TERMINAL else None,
    )


def is_terminal() -> bool:
    """Whether stdout is a terminal (a pipe, a file and a test runner are not)."""
    if FORCE_TERMINAL is not None:
        return FORCE_TERMINAL
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


Cell: TypeAlias = "str | Text | int | None"


def _plain(cell: Cell) -> str:
    if cell is not None and not isinstance(cell, str | int):  # a rich Text
        cell = cell.plain
    return clean(cell, one_line=True).replace("\t", " ")


def table(
    columns: Sequence[str],
    rows: Iterable[Sequence[Cell]],
    *,
    title: str | None = None,
    widths: dict[str, int] | None = None,
    out: Console | None = None,
) -> None:
    """Print rows: a rich table on a terminal (cells named in ``widths`` shortened to that
    many characters), tab-separated lines (a header line first, a ``# title`` line before it)
    anywhere else, every cell whole. A str cell is user text (cleaned, never markup); a
    `Text` cell keeps its style."""
    widths = widths or {}
    if not is_terminal():
        lines = [f"# {title}"] if title else []
        lines.append("\t".join(columns))
        lines += ["\t".join(_plain(cell) for cell in row) for row in rows]
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
        return
    from rich.table import Table
    from rich.text import Text

    grid = Table(box=None, header_style="bold", title=title, title_justify="left")
    for name in columns:
        limit = widths.get(name)
        grid.add_column(
            name,
            no_wrap=limit is None,
            overflow="fold",
            min_width=None if limit is None else min(limit, 16),
        )
    for row in rows:
        cells: list[Text] = []
        for name, cell in zip(columns, row, strict=True):
            if isinstance(cell, Text):
                cells.append(cell)
            else:
                cells.append(text("" if cell is None else cell, width=widths.get(name)))
        grid.add_row(*cells)
    (out or console()).print(grid)


def abbreviate(ids: Iterable[str], minimum: int = 13) -> int:
    """The shortest prefix length, at least ``minimum``, that tells every one of ``ids``
    apart (as ``git`` abbreviates hashes); a THREAD argument takes any unique prefix."""
    ordered = sorted(set(ids))
    length = minimum
    for a, b in zip(ordered, ordered[1:], strict=False):
        common = 0
        for x, y in zip(a, b, strict=False):
            if x != y:
                break
            common += 1
        length = max(length, common + 1)
    return length


def print_json(value: Any) -> None:
    """``value`` as one JSON document on stdout (indented; the one style of ``--json``)."""
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")
    sys.stdout.flush()


def print_json_error(message: str, exit_code: int, kind: str, **extra: Any) -> None:
    """An error under ``--json``: ``{"error": {"message", "kind", "exit_code", …}}`` on
    stderr, one line."""
    doc = {"error": {"message": message, "kind": kind, "exit_code": exit_code, **extra}}
    sys.stderr.write(orjson.dumps(doc).decode() + "\n")
    sys.stderr.flush()


@contextmanager
def progress(
    what: str, *, total: int | None = None, quiet: bool = False
) -> Iterator[Callable[..., None]]:
    """A progress bar on stderr while the block runs, only when stderr is a terminal and not
    ``quiet`` (``--json``); yields ``advance(n=1, total=None)``. In a pipe it shows nothing."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    err = console(stderr=True)
    if quiet or not err.is_terminal:
        yield lambda n=1, total=None: None
        return
    bar = Progress(
        TextColumn(what),
        BarColumn(),
        MofNCompleteColumn(),
        console=err,
        transient=True,
    )
    with bar:
        task = bar.add_task(what, total=total)

        def advance(n: int = 1, total: int | None = None) -> None:
            if total is not None:
                bar.update(task, total=total)
            bar.advance(task, n)

        yield advance
