"""Artifact references: how a record points at a blob in the artifact store.

A large value in event data is replaced by ``{"$artifact": {"sha256", "size", "media_type",
"summary"}}``; the blob holds the value's canonical JSON (or raw bytes for blobs stored
directly). The reducer accepts a reference wherever a field holds free-form data or text.

*Only the store makes references.* References sit in two places: the whole data, or one of
its top-level values (the *reference positions*). Caller data that merely looks like a
reference there must not be taken for one (``resolve`` would load, or fail to load, a blob
the caller never stored, and the model would be shown a placeholder instead of the data). So
on append, a value at a reference position that has the form of a reference, or of an
escape, is stored escaped: ``{"$escaped": <the value>}`` (`escape`). Escaping escapes too
keeps it unambiguous: a value of the form ``{"$escaped": v}`` always means "v, verbatim".
`resolve` undoes it, loading only real references; `unescape` shows the original without
loading anything (for the model's context). The stored (escaped) data is what is hashed.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from threadlog._dataclass import dataclass
from threadlog.model import codec

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "ESCAPE_KEY",
    "REF_KEY",
    "ArtifactRef",
    "escape",
    "escape_encoded",
    "is_artifact_ref",
    "is_escaped",
    "referenced",
    "resolve",
    "unescape",
]

REF_KEY = "$artifact"
ESCAPE_KEY = "$escaped"
_DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class ArtifactRef:
    """What a record keeps of a blob: its hash, size, media type and a short summary."""

    sha256: str
    size: int
    media_type: str = "application/octet-stream"
    summary: str | None = None

    def to_data(self) -> dict[str, Any]:
        """The reference as record data: ``{"$artifact": {...}}``."""
        return {
            REF_KEY: {
                "sha256": self.sha256,
                "size": self.size,
                "media_type": self.media_type,
                "summary": self.summary,
            }
        }

    @classmethod
    def from_data(cls, data: Any) -> ArtifactRef | None:
        """The reference inside record data, or None if the data is not one."""
        if not is_artifact_ref(data):
            return None
        ref = data[REF_KEY]
        return cls(
            ref["sha256"],
            ref["size"],
            ref.get("media_type") or "application/octet-stream",
            ref.get("summary"),
        )


def is_artifact_ref(data: Any) -> bool:
    """True for data of the form ``{"$artifact": {"sha256": …, "size": …}}``."""
    if not (isinstance(data, dict) and len(data) == 1 and REF_KEY in data):
        return False
    ref = data[REF_KEY]
    return (
        isinstance(ref, dict)
        and isinstance(ref.get("sha256"), str)
        and _DIGEST_RE.fullmatch(ref["sha256"]) is not None
        and type(ref.get("size")) is int
    )


def is_escaped(data: Any) -> bool:
    """True for data of the form ``{"$escaped": …}`` (a value stored verbatim)."""
    return data.__class__ is dict and len(data) == 1 and ESCAPE_KEY in data


def _reserved(value: Any) -> bool:
    """Whether a value at a reference position must be escaped to be stored as itself."""
    return is_escaped(value) or is_artifact_ref(value)


def escape(data: Any) -> Any:
    """Decoded data as it is stored: each look-alike at a reference position escaped.

    ``data`` must be plain decoded JSON (what a reader will see), not the caller's objects:
    an ``int`` subclass is not an ``int`` to `is_artifact_ref`, yet reads back as one. Returns
    ``data`` itself when nothing needed escaping.
    """
    if _reserved(data):
        return {ESCAPE_KEY: data}
    if data.__class__ is not dict:
        return data
    out: dict[str, Any] | None = None
    for key, value in data.items():
        if value.__class__ is dict and _reserved(value):
            if out is None:
                out = dict(data)
            out[key] = {ESCAPE_KEY: value}
    return data if out is None else out


def escape_encoded(data: Any, data_json: bytes) -> tuple[Any, bytes]:
    """``(data, canonical JSON)`` as stored: `escape` applied to what a reader would decode.

    The common case costs one search of the bytes: a reference or an escape starts with
    ``{"$`` in canonical JSON (keys are sorted, and ``$`` sorts before letters), and a string
    holding those characters is written with its quote escaped. (Data without a ``$`` at all
    is told by a search for that one byte, a ``memchr`` many times faster over long text.)
    """
    if b"$" not in data_json or b'{"$' not in data_json:
        return data, data_json
    decoded = codec.loads(data_json)
    escaped = escape(decoded)
    if escaped is decoded:
        return data, data_json
    return escaped, codec.canonical(escaped)


def unescape(value: Any) -> Any:
    """A value at a reference position as the caller wrote it (references left as they are)."""
    return value[ESCAPE_KEY] if is_escaped(value) else value


def resolve(data: Any, load: Callable[[ArtifactRef], Any]) -> Any:
    """Stored data as the caller wrote it: escapes undone, real references loaded.

    ``load`` returns a reference's value (what the blob holds, decoded). A blob holds the value
    as it was stored at that position, so it may itself be escaped, or (for the whole data)
    hold references in its top-level values.
    """
    if is_artifact_ref(data):
        ref = ArtifactRef.from_data(data)
        assert ref is not None
        data = load(ref)
    if is_escaped(data):
        return data[ESCAPE_KEY]
    if data.__class__ is not dict:
        return data
    out: dict[str, Any] | None = None
    for key, value in data.items():
        if value.__class__ is not dict or len(value) != 1:
            continue
        if is_artifact_ref(value):
            ref = ArtifactRef.from_data(value)
            assert ref is not None
            value = unescape(load(ref))
        elif is_escaped(value):
            value = value[ESCAPE_KEY]
        else:
            continue
        if out is None:
            out = dict(data)
        out[key] = value
    return data if out is None else out


def referenced(type_name: str, data: Any) -> list[ArtifactRef]:
    """The artifacts a record's data references: those at the reference positions (the
    store's own), and the blob an ``artifact.stored`` record declares (how a tool's blob,
    such as a command's full output, is recorded: its reference deeper in a result is not
    at a reference position, where only the store makes references)."""
    if type_name == "artifact.stored" and isinstance(data, dict):
        sha256, size = data.get("sha256"), data.get("size")
        if isinstance(sha256, str) and _DIGEST_RE.fullmatch(sha256) and type(size) is int:
            media_type = data.get("media_type")
            return [ArtifactRef(sha256, size, media_type or "application/octet-stream")]
        return []
    found = []
    for value in [data, *(data.values() if data.__class__ is dict else ())]:
        ref = ArtifactRef.from_data(value)
        if ref is not None:
            found.append(ref)
    return found
