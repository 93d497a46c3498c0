"""Reading a source file: its head, its complete lines, and the checksums that say it grew.

A file is read as bytes. `read_head` takes its first 64 KiB (and up to its first newline), from
which a format names the file (`identity`); `spans` then finds the complete, non-blank lines
from an offset without parsing them, and `parse` decodes one when the import gets to it, so a
large file never holds all its parsed lines at once. A last line without its newline is not a
line yet (a writer may be in the middle of it): it is reported as ``torn_tail`` and left for the
next import. `digest` is the checksum of the file's head and of the bytes before the offset an
import stopped at: both unchanged means the file only grew.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import orjson

from threadlog._dataclass import dataclass

if TYPE_CHECKING:
    from typing import BinaryIO

    from threadlog.importers._report import FileReport

__all__ = [
    "BOM",
    "HEAD",
    "HEAD_READ",
    "Line",
    "digest",
    "head_lines",
    "parse",
    "read_head",
    "spans",
    "split",
]

HEAD = 4096
"""Bytes of a file's head, and before its read offset, whose checksums say it only grew."""
HEAD_READ = 65536
"""Bytes read first: the file's identity is in its first lines."""
BOM = b"\xef\xbb\xbf"


@dataclass(slots=True)
class Line:
    """One complete line of a source file."""

    no: int
    """1-based line number."""
    obj: Any
    """The parsed JSON value (None when ``error`` is set)."""
    error: str | None = None
    raw: bytes = b""
    replaced: bool = False
    """The line is not valid UTF-8: its invalid bytes were read as U+FFFD (as a JavaScript
    harness reads them), and the line was parsed so."""


def spans(
    data: bytes, start: int, lineno: int, report: FileReport
) -> tuple[list[tuple[int, int, int]], int, int]:
    """The complete, non-blank lines of ``data`` from byte ``start`` as ``(number, start,
    end)``, then the offset after the last complete line and its number. A last line without
    a newline is not returned (it is reported). Lines are parsed one by one as they are fed
    (`parse`), so a large file never holds all its parsed lines at once."""
    spans: list[tuple[int, int, int]] = []
    pos = start
    size = len(data)
    find = data.find
    while pos < size:
        nl = find(b"\n", pos)
        if nl < 0:
            tail = data[pos:]
            if tail.strip():
                report.problem(
                    lineno + 1,
                    "torn_tail",
                    f"the last line has no newline ({len(tail)} bytes): left for the next import",
                )
            break
        lineno += 1
        if nl > pos and not data[pos:nl].isspace():
            spans.append((lineno, pos, nl))
        pos = nl + 1
    return spans, pos, lineno


def parse(data: bytes, no: int, a: int, b: int) -> Line:
    raw = data[a:b]
    try:
        return Line(no, orjson.loads(raw))
    except orjson.JSONDecodeError as exc:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            # a stray byte in one string must not cost the whole line (and the chain after
            # it): read it the way the harness itself does, with U+FFFD for the bad bytes
            try:
                return Line(
                    no, orjson.loads(raw.decode("utf-8", "replace")), raw=raw, replaced=True
                )
            except orjson.JSONDecodeError:
                pass
        return Line(no, None, str(exc), raw)


def split(data: bytes, start: int, lineno: int, report: FileReport) -> list[Line]:
    """The complete lines of ``data`` from byte ``start``, parsed."""
    return [parse(data, *span) for span in spans(data, start, lineno, report)[0]]


def head_lines(data: bytes, base: int) -> bytes:
    """The complete lines among the first 64 KiB of a file (at least its first line)."""
    cut = data.rfind(b"\n", base, base + 65536)
    if cut < 0:
        cut = data.find(b"\n", base)
    return data[: cut + 1] if cut >= 0 else b""


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def read_head(f: BinaryIO) -> bytes:
    """The file's first `HEAD_READ` bytes, and more up to its first newline."""
    head = f.read(HEAD_READ)
    while b"\n" not in head:
        more = f.read(HEAD_READ)
        if not more:
            break
        head += more
    return head
