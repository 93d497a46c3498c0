"""Resume checks the blobs a thread's records reference (000 §17.2), as ``verify`` does.

A missing or altered blob cannot be repaired by recovery (the bytes are gone), and it does not
stop the thread from going on: recovery reports it (`RecoveryReport.damaged_artifacts`, and a
warning in the log) so that whoever resumes learns of it now, not when a reader first needs
the data. `Store.verify` reports the same blobs as damage, with the record's ordinal.

Resume audits the records after the snapshot its session started from: a blob is made
durable before the record that references it is appended, so what a crash can leave missing
is referenced by the records written since the last snapshot; the blobs of the prefix are
`threadlog verify`'s to check (resuming a million-record thread does not read the million
records again for them). The session keeps those of the records it opened with that
reference a blob (`referencing`: it reads them anyway, to reduce them), so the audit reads
nothing again either: it only checks the blobs.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from threadlog.store.artifact_check import artifact_problems
from threadlog.store.protocol import Artifacts

if TYPE_CHECKING:
    from collections.abc import Sequence

    from threadlog.model.envelope import Record
    from threadlog.store.protocol import Store

__all__ = ["damaged_artifacts"]


log = logging.getLogger("threadlog.runtime")


async def damaged_artifacts(
    store: Store, thread_id: str, records: Sequence[Record]
) -> list[dict[str, Any]]:
    """``{"ord", "sha256", "problem"}`` for every blob referenced by ``records`` (the
    thread's, after the snapshot its session started from) that is missing or does not match
    its hash (none for a store without the `Artifacts` capability)."""
    if not isinstance(store, Artifacts) or not records:
        return []
    check = store.check_artifact

    def audit() -> list[dict[str, Any]]:
        return [
            {"ord": ord_, "sha256": ref.sha256, "problem": problem}
            for ord_, ref, problem in artifact_problems(records, check)
        ]

    found = await asyncio.to_thread(audit)
    for item in found:
        log.warning("thread %s: ord %d: %s", thread_id, item["ord"], item["problem"])
    return found
