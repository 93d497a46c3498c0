"""Importers: sessions of other agent harnesses as threadlog threads.

``threadlog import claude-code|codex|pi PATH…`` is a shell over this package::

    from threadlog import open_store
    from threadlog.importers import import_paths, source_format

    with open_store("/tmp/tl") as store:
        report = import_paths(store, source_format("codex"), ["~/.codex/sessions"])

Each source session becomes one thread (its side-chains, child threads with lineage) that
keeps the source's tree, compactions, tool calls with their results, models, usage and
timestamps, and names its source in ``thread.created`` (``config.import``: key, format,
version, session, source path). Importing is idempotent and incremental: see
`threadlog.importers._core` for how a file is read, `threadlog.importers._emit` for how its
items become records, `threadlog.importers._ledger` for how a re-run skips what it has seen,
and the format modules for each format and its mapping.
"""

from __future__ import annotations

from threadlog.errors import UsageError
from threadlog.importers._core import Identity, Line, SourceFormat, import_file, import_paths, walk
from threadlog.importers._report import FileReport, ImportReport, Problem
from threadlog.importers.claude_code import ClaudeCode
from threadlog.importers.codex import Codex
from threadlog.importers.pi import Pi

__all__ = [
    "SOURCES",
    "FileReport",
    "Identity",
    "ImportReport",
    "Line",
    "Problem",
    "SourceFormat",
    "import_file",
    "import_paths",
    "source_format",
    "walk",
]

SOURCES: tuple[str, ...] = ("claude-code", "codex", "pi")
"""The source formats, by the name the command line takes."""


def source_format(name: str) -> SourceFormat:
    """The format called ``name`` (one of `SOURCES`); `UsageError` otherwise."""
    match name:
        case "claude-code":
            return ClaudeCode()
        case "codex":
            return Codex()
        case "pi":
            return Pi()
    raise UsageError(f"unknown source format {name!r} (one of: {', '.join(SOURCES)})")
