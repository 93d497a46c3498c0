"""The ``jsonl`` export: every record of a thread, one JSON envelope per line.

Each line is `Record.to_dict` (the shape ``threadlog events`` prints and ``docs/cli.md``
documents), so the output can be piped into ``jq`` or loaded line by line. Given records with
their artifacts loaded (`threadlog.export.load_records`), a line's ``data`` is the data as
appended, so its ``hash`` no longer checks against it where an artifact was loaded: this is a
copy to read, not a log to verify (``threadlog events`` prints the log itself).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    from collections.abc import Iterable

    from threadlog.model.envelope import Record

__all__ = ["to_jsonl"]


def to_jsonl(records: Iterable[Record]) -> str:
    """One compact JSON object per record, each line ending in a newline ("" for none)."""
    return "".join(orjson.dumps(record.to_dict()).decode() + "\n" for record in records)
