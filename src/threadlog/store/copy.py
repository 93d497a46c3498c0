"""Copying threads between stores of any backends, record for record (``threadlog copy``).

Theory of operation
-------------------
`copy_thread` moves one thread from ``source`` to ``dest`` so that both hold the same log:
the same ids, ordinals, parents, timestamps, writing threads and hashes (a fork keeps its
lineage and its inherited prefix, whose records name the ancestors that wrote them).

1. **Read and verify, a page at a time.** The source's records up to its last one when the
   copy starts are read `PAGE` at a time (`Store.follow` verifies each one, and reads a
   window at a time where the store can seek), and each page is checked as it comes
   (`threadlog.store.transfer.ImportCheck`: hashes recomputed, chain, ordinals, lineage,
   legality, unique ids) by the destination before it writes it: a long thread is never
   held whole.
2. **Blobs first.** Each blob a page's records reference (`threadlog.model.refs.referenced`)
   is streamed from the source's `Artifacts` into the destination's, in chunks (bounded
   memory), before the page goes on, and must come out under the same hash; so the
   destination never holds a record whose blob it lacks.
3. **Adopt.** The destination's `Transfer.adopt_pages` writes the thread all or nothing (a
   temporary file linked into place, one transaction); a thread it already holds with the
   same records is left alone (a copy run again is a no-op: ``skipped``), one it holds with
   other content is refused (`ConflictError`).
4. **Verify after.** The destination's `Store.verify` must pass and its records must have
   exactly the source's hashes (compared a page at a time, by a digest of each page's).

`copy_threads` does this for many threads, carrying on past a thread that fails (its error
is in the result) and reporting progress to a callback. A live writer may append to a
source thread meanwhile: the copy holds what was durable when it was read.
"""

from __future__ import annotations

import hashlib
from dataclasses import field
from typing import TYPE_CHECKING, Any, Literal

from threadlog._dataclass import dataclass
from threadlog.errors import IntegrityError, ThreadlogError, UsageError
from threadlog.model.refs import referenced
from threadlog.store.protocol import Artifacts, Transfer
from threadlog.store.transfer import END

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterator, Sequence

    from threadlog.model.envelope import Record
    from threadlog.model.refs import ArtifactRef
    from threadlog.store.protocol import Store

__all__ = ["CopyReport", "ThreadCopy", "copy_thread", "copy_threads"]

CHUNK = 1 << 20
"""Bytes of a blob read and written at a time."""
PAGE = 5000
"""Records read, adopted and read back at a time (the copy holds one page of the thread)."""


@dataclass(frozen=True, slots=True)
class ThreadCopy:
    """What became of one thread."""

    thread_id: str
    status: Literal["copied", "skipped", "failed"]
    """``skipped``: the destination held exactly these records already."""
    records: int = 0
    artifacts: int = 0
    """Blobs copied (or found there already) for the thread's records."""
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data (``threadlog copy --json``)."""
        return {
            "thread": self.thread_id,
            "status": self.status,
            "records": self.records,
            "artifacts": self.artifacts,
            "error": self.error,
        }


@dataclass(slots=True)
class CopyReport:
    """What a copy of many threads did."""

    threads: list[ThreadCopy] = field(default_factory=list)

    def count(self, status: str) -> int:
        """How many threads ended with ``status``."""
        return sum(1 for t in self.threads if t.status == status)

    @property
    def ok(self) -> bool:
        """Whether no thread failed."""
        return self.count("failed") == 0

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data (``threadlog copy --json``)."""
        return {
            "ok": self.ok,
            "copied": self.count("copied"),
            "skipped": self.count("skipped"),
            "failed": self.count("failed"),
            "records": sum(t.records for t in self.threads if t.status == "copied"),
            "threads": [t.to_dict() for t in self.threads],
        }


def copy_thread(source: Store, dest: Store, thread_id: str) -> ThreadCopy:
    """Copy one thread (see the module docstring); `ThreadCopy` says whether it was copied
    or already there. Raises `UsageError` (a destination that cannot import, a blob the
    destination cannot hold), `ThreadNotFound`, `IntegrityError` (the source's log or a blob
    is damaged, or the copy does not verify), `ConflictError` (the destination holds the
    thread with other content)."""
    if not isinstance(dest, Transfer):
        raise UsageError(f"the destination ({type(dest).__name__}) cannot import threads")
    tail = source.read(thread_id, before=END, limit=1)  # (ThreadNotFound) what is copied
    total = tail[0].ord if tail else 0
    digests: list[bytes] = []  # each page's hashes, digested: to check the copy against
    blobs: set[str] = set()

    def pages() -> Generator[list[Record], None, None]:
        for page in _pages(source, thread_id, total):
            _copy_blobs(source, dest, thread_id, page, blobs)  # before the records that name them
            digests.append(_digest(page))
            yield page

    stream = pages()
    try:
        written = dest.adopt_pages(stream)
    finally:  # (a failure mid-way: the source's follow let go now, not when collected)
        stream.close()
    report = dest.verify(thread_id)
    if not report.ok:
        raise IntegrityError(
            thread_id,
            report.first_bad_ord or 0,
            f"the copy does not verify: {report.error}",
        )
    for k, start in enumerate(range(0, total if written else 0, PAGE)):  # (a page at a time;
        # a thread held already was compared record by record by `adopt_pages`)
        if _digest(dest.read(thread_id, after=start, limit=PAGE)) != digests[k]:
            raise IntegrityError(thread_id, start + 1, "the copy's hashes differ from the source's")
    return ThreadCopy(thread_id, "copied" if written else "skipped", total, len(blobs))


def _pages(source: Store, thread_id: str, total: int) -> Iterator[list[Record]]:
    """The thread's records up to ord ``total``, `PAGE` at a time, each verified as it is
    read (`Store.follow`: a window at a time where the store can seek, so that a long
    thread is never held whole)."""
    if total < 1:
        return
    page: list[Record] = []
    records = source.follow(thread_id, 0, interval=0.05)
    try:
        for record in records:
            page.append(record)
            if len(page) == PAGE or record.ord >= total:
                yield page
                page = []
            if record.ord >= total:
                return
    finally:
        close = getattr(records, "close", None)
        if close is not None:
            close()


def _digest(records: Sequence[Record]) -> bytes:
    """A digest of the records' hashes, in order."""
    return hashlib.sha256("".join(r.hash for r in records).encode()).digest()


def copy_threads(
    source: Store,
    dest: Store,
    thread_ids: Sequence[str] | None = None,
    *,
    progress: Callable[[int, int, ThreadCopy], None] | None = None,
) -> CopyReport:
    """Copy ``thread_ids`` (default: every thread of the source) one by one; a thread that
    fails is reported (``failed``, with its error) and the others are still copied.
    ``progress(done, total, result)`` is called after each thread."""
    ids = list(source.thread_ids() if thread_ids is None else thread_ids)
    report = CopyReport()
    for i, thread_id in enumerate(ids):
        try:
            result = copy_thread(source, dest, thread_id)
        except ThreadlogError as exc:
            result = ThreadCopy(thread_id, "failed", error=str(exc))
        report.threads.append(result)
        if progress is not None:
            progress(i + 1, len(ids), result)
    return report


def _copy_blobs(
    source: Store, dest: Store, thread_id: str, records: list[Record], copied: set[str]
) -> None:
    """Stream every blob the records reference into the destination, unless ``copied``
    names it already (then it was, for an earlier page); each one copied is added there."""
    refs: dict[str, ArtifactRef] = {}
    for record in records:
        for ref in referenced(record.type, record.data):
            if ref.sha256 not in copied:
                refs.setdefault(ref.sha256, ref)
    if not refs:
        return
    if not isinstance(source, Artifacts) or not isinstance(dest, Artifacts):
        raise UsageError(
            f"thread {thread_id} references {len(refs)} blob(s), and the "
            f"{'source' if not isinstance(source, Artifacts) else 'destination'} "
            "holds no artifacts"
        )
    for sha256, ref in refs.items():
        copied.add(sha256)
        if dest.check_artifact(ref) is None:
            continue  # there already, sound
        problem = source.check_artifact(ref)
        if problem is not None:
            raise IntegrityError(thread_id, _ord_of(records, sha256), f"blob {sha256}: {problem}")
        with (
            source.open_artifact(sha256) as blob,
            dest.artifact_writer(media_type=ref.media_type) as writer,
        ):
            while chunk := blob.read(CHUNK):
                writer.write(chunk)
            got = writer.commit(summary=ref.summary)
        if got.sha256 != sha256:  # changed while it was read
            raise IntegrityError(thread_id, _ord_of(records, sha256), f"blob {sha256} changed")


def _ord_of(records: list[Record], sha256: str) -> int:
    """The ordinal of the first record referencing the blob."""
    for record in records:
        if any(ref.sha256 == sha256 for ref in referenced(record.type, record.data)):
            return record.ord
    return 0
