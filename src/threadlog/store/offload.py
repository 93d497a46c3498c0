"""Large values out of records and into artifacts: the one encoding every backend applies.

A record keeps an event's data as canonical JSON. When that is larger than the backend's
threshold, each top-level value over it becomes an artifact reference (`threadlog.model.refs`),
and if the record is still too large, the whole data does. Caller data that merely looks like
a reference is escaped first, so that a reader never takes it for one. ``Store.resolve``
undoes both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from threadlog.model import codec
from threadlog.model.refs import ArtifactRef, is_artifact_ref, is_escaped
from threadlog.store.validate import escape_lookalikes

__all__ = ["Put", "encode_data", "summary_of"]

Put = Callable[[Any, bytes], ArtifactRef]
"""``put(value, canonical JSON of value)``: store the JSON as an artifact, return its ref."""


def summary_of(value: Any, value_json: bytes) -> str:
    """The short summary an artifact reference carries (the first 200 characters)."""
    return value[:200] if isinstance(value, str) else value_json[:200].decode("utf-8", "replace")


def encode_data(type_name: str, data: Any, threshold: int, put: Put) -> tuple[Any, bytes]:
    """``(data as stored, its canonical JSON)``: look-alike references escaped, then values
    larger than ``threshold`` bytes handed to ``put`` and replaced by their references.

    Raises `InvalidData` (data that is no JSON, or no longer fits its event type once escaped).
    """
    data, data_json = escape_lookalikes(type_name, data, codec.canonical(data))
    if len(data_json) <= threshold:
        return data, data_json
    # An escaped whole (``{"$escaped": v}``) goes out whole: its value is the caller's
    # verbatim, so a reference put in its place could not be told from the data.
    if isinstance(data, dict) and not is_artifact_ref(data) and not is_escaped(data):
        moved = dict(data)
        for key, value in data.items():
            value_json = codec.canonical(value)
            if len(value_json) > threshold:
                moved[key] = put(value, value_json).to_data()
        data_json = codec.canonical(moved)
        if len(data_json) <= threshold:
            return moved, data_json
        data = moved
    ref = put(data, data_json).to_data()
    return ref, codec.canonical(ref)
