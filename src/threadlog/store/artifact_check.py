"""Referenced artifacts checked: the part of ``verify`` both backends share (000 §17.2).

A record may reference blobs (`threadlog.model.refs.referenced`: the store's own references,
and the blobs ``artifact.stored`` records declare, such as a command's full output). A blob
that is gone or no longer matches its hash is damage a reader would only find when it needs
the data; ``verify`` (and resume, `threadlog.runtime.resume`) look for it up front and name
the first record whose blob is wrong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from threadlog.errors import IntegrityError, InvalidTransition
from threadlog.model.refs import referenced

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from threadlog.model.envelope import Record
    from threadlog.model.refs import ArtifactRef

__all__ = ["artifact_problems", "first_bad_artifact", "worse"]


def artifact_problems(
    records: Iterable[Record], check: Callable[[ArtifactRef], str | None]
) -> list[tuple[int, ArtifactRef, str]]:
    """``(ord, ref, problem)`` for every referenced blob that is missing or damaged, in
    record order (a blob referenced twice is checked once)."""
    seen: dict[tuple[str, int], str | None] = {}
    problems = []
    for record in records:
        for ref in referenced(record.type, record.data):
            key = (ref.sha256, ref.size)
            if key not in seen:
                seen[key] = check(ref)
            problem = seen[key]
            if problem is not None:
                problems.append((record.ord, ref, problem))
    return problems


def first_bad_artifact(
    thread_id: str, records: Iterable[Record], check: Callable[[ArtifactRef], str | None]
) -> IntegrityError | None:
    """The first record whose referenced blob is missing or damaged, as an `IntegrityError`."""
    for ord_, _, problem in artifact_problems(records, check):
        return IntegrityError(thread_id, ord_, f"{problem} (referenced by this record)")
    return None


def worse(
    error: IntegrityError | InvalidTransition | None, found: IntegrityError | None
) -> IntegrityError | InvalidTransition | None:
    """Of a verification's error and a bad artifact, the one at the lower ordinal."""
    if found is None:
        return error
    if error is None or (error.ord is not None and found.ord < error.ord):
        return found
    return error
