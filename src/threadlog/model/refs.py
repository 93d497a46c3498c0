"""Artifact references: how a record points at a blob in the artifact store.

A large value in event data is replaced by ``{"$artifact": {"sha256", "size", "media_type",
"summary"}}``; the blob holds the value's canonical JSON (or raw bytes for blobs stored
directly). The reducer accepts a reference wherever a field holds free-form data or text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["REF_KEY", "ArtifactRef", "is_artifact_ref"]

REF_KEY = "$artifact"
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
