"""What an import did, per file: the thread it wrote, how far it read, and every problem.

A problem never stops an import: a malformed line, an unknown record type, a broken parent
chain, a byte-order mark or a torn last line is reported here with its line number, and the
rest of the file is imported. Lines of the types a harness writes beside the conversation
(Claude Code's ``progress`` and ``queue-operation`` lines, Codex's events, Pi's ``custom``
entries…) are no problem: they are counted by type in `FileReport.bookkeeping`. ``threadlog
import --json`` prints `ImportReport.to_dict`.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from threadlog._dataclass import dataclass

__all__ = ["FileReport", "ImportReport", "Problem"]


@dataclass(frozen=True, slots=True)
class Problem:
    """Something odd in a source file, at line ``line`` (1-based; 0: the file itself)."""

    line: int
    kind: str
    """``malformed``, ``encoding``, ``unknown_type``, ``broken_parent``, ``bom``, ``torn_tail``,
    ``orphan_result``, ``duplicate_call``, ``changed``, ``refused``, ``unreadable``,
    ``version``, ``no_header``, ``archived`` (the file was skipped), ``error`` (the file
    could not be imported)."""
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "kind": self.kind, "message": self.message}


@dataclass(slots=True)
class FileReport:
    """The import of one source file."""

    path: str
    format: str
    status: str = "imported"
    """``imported`` (new thread), ``grown`` (new lines added), ``unchanged`` (nothing new),
    ``skipped`` (new lines, not read: the thread is archived), ``failed`` (the file could not
    be read or its thread written)."""
    thread: str | None = None
    children: list[str] = field(default_factory=list)
    """Threads made of the session's side-chains."""
    lines: int = 0
    """Lines read in this run."""
    records: int = 0
    """Records appended in this run (across the thread and its children)."""
    bytes: int = 0
    """Bytes read in this run."""
    problems: list[Problem] = field(default_factory=list)
    bookkeeping: dict[str, int] = field(default_factory=dict)
    """Lines read in this run of types the format knows that hold no conversation to import,
    by type (``progress``, ``queue-operation``, ``system:turn_duration``,
    ``event_msg:token_count``…): kept as ``custom.import.record`` notes, or not stored when
    they repeat items that are (Codex's ``user_message`` events). Every file has them; they
    are not problems. A type the format does not know is an ``unknown_type`` problem."""

    def problem(self, line: int, kind: str, message: str) -> None:
        self.problems.append(Problem(line, kind, message))

    def count(self, kind: str) -> None:
        """One more bookkeeping line of type ``kind``."""
        self.bookkeeping[kind] = self.bookkeeping.get(kind, 0) + 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "status": self.status,
            "thread": self.thread,
            "children": self.children,
            "lines": self.lines,
            "records": self.records,
            "bytes": self.bytes,
            "problems": [p.to_dict() for p in self.problems],
            "bookkeeping": dict(sorted(self.bookkeeping.items())),
        }


@dataclass(slots=True)
class ImportReport:
    """Every file of one ``threadlog import``."""

    files: list[FileReport] = field(default_factory=list)

    @property
    def records(self) -> int:
        return sum(f.records for f in self.files)

    @property
    def problems(self) -> int:
        return sum(len(f.problems) for f in self.files)

    @property
    def bookkeeping(self) -> int:
        """Bookkeeping lines read, in every file (`FileReport.bookkeeping`)."""
        return sum(sum(f.bookkeeping.values()) for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for f in self.files:
            counts[f.status] = counts.get(f.status, 0) + 1
        return {
            "files": [f.to_dict() for f in self.files],
            "totals": {
                "files": len(self.files),
                **counts,
                "records": self.records,
                "bytes": sum(f.bytes for f in self.files),
                "problems": self.problems,
                "bookkeeping": self.bookkeeping,
            },
        }
