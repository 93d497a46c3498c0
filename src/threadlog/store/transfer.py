"""What every backend's `Transfer.adopt_thread` checks before it keeps a copied thread.

A copied thread arrives as the records another store returned (`Store.read`): decoded, with
their hashes. `check_import` proves they are one whole, sound log before anything is written,
by the rules `Store.verify` applies to a log at rest:

* ord 1 is the thread's own ``thread.created`` (its ``prev`` is null) and ords run 1..n;
* each record's hash is recomputed from its fields and the canonical JSON of its data (so a
  record is accepted only if re-encoding it gives back the very bytes that were hashed);
* each ``prev`` is the previous record's hash, except that a fork's ord 2 follows the hash its
  lineage names (``lineage.copied.prev``) and its inherited prefix ends on ``lineage.hash``
  (`threadlog.model.lineage`);
* every record was written by the thread, or (in a fork's inherited prefix) by one of the
  ancestors its lineage names; event ids are unique;
* the reducer accepts the whole log (an illegal event is refused with its ordinal).

It returns each record with its rollout line (the embedded store's format: what the hash is
over, and what a backend stores), computed once. `same_log` and `first_difference`
tell a re-run of a copy (the same records: nothing to do) from a conflicting thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from typing import TYPE_CHECKING, NamedTuple, Protocol

from threadlog.errors import ConflictError, IntegrityError, UsageError
from threadlog.model import codec
from threadlog.model.envelope import record_line, valid_type_name
from threadlog.model.eventdata import from_data
from threadlog.model.events import ThreadCreated
from threadlog.model.legality import reduce_log
from threadlog.model.lineage import copied_prefix
from threadlog.store import iddigest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from threadlog.model.envelope import Record
    from threadlog.model.lineage import Copied
    from threadlog.model.state import ThreadState

__all__ = [
    "END",
    "Adopted",
    "Checkpointed",
    "ImportCheck",
    "Spool",
    "SparseIndex",
    "Spooled",
    "check_import",
    "check_import_state",
    "compare_pages",
    "conflict_text",
    "first_page",
    "conflict_message",
    "first_difference",
    "same_log",
]


END = 2**62
"""A ``before`` past any ordinal: ``read(t, before=END, limit=1)`` is a thread's last record
(what a copy, and an adoption comparing with a held thread, take the length from)."""


class Checkpointed(NamedTuple):
    """A new thread's checkpoint, made where its log was built (``threadlog import``'s bulk
    path: `threadlog.importers._bulk.NewLog`), for a store to keep beside the thread it writes
    whole, so that its first open starts there instead of reading it whole."""

    ord: int
    """Its last record's ordinal."""
    hash: str
    """Its last record's hash."""
    state: bytes
    """Its reduced state after that record, trimmed (`threadlog.model.state.trim`), as
    `threadlog.model.snapshot.dump` writes it."""
    sparse: list[tuple[int, int, bytes | None, bytes | None]]
    """``(ord, byte offset, id block, chunk digest)`` of the line of every
    ``sparse_every``-th record (the store's sparse index; the block of the ids of the records
    that end there: `threadlog.store.iddigest`; the SHA-256 of the lines from the entry
    before's up to this one's: `threadlog.store.embedded.checkpoint`)."""


class Spooled(NamedTuple):
    """A new thread's rollout, written whole by another process (an import's worker) to the
    temporary file a batch of new threads takes it from (`Spool`)."""

    path: str
    """The temporary file."""
    size: int
    """Its length in bytes, as written (checked when it is taken)."""

    def remove(self) -> None:
        """Delete the file (a thread that will not be taken); errors are ignored."""
        with contextlib.suppress(OSError):
            os.unlink(self.path)


class Spool(Protocol):
    """Where a process other than the one that holds a batch of new threads writes a thread's
    rollout for it (picklable: handed to an import's worker processes)."""

    def write(self, thread_id: str, lines: Sequence[bytes], /) -> Spooled:
        """Write the thread's lines (its ``thread.created`` first) to its temporary file,
        not fsynced (the batch's commit makes it durable). Raises `StorageError`."""
        ...


class Adopted(NamedTuple):
    """One checked record of a thread being imported."""

    record: Record
    line: bytes
    """Its rollout line (with the hash and the newline), as the embedded store writes it."""


def check_import(records: Sequence[Record]) -> list[Adopted]:
    """Check that ``records`` are one whole thread's sound log (module docstring).

    Raises:
        UsageError: no records, or ord 1 is not a ``thread.created``.
        IntegrityError: a record that does not verify, naming the thread and its ordinal.
    """
    return check_import_state(records)[0]


def check_import_state(records: Sequence[Record]) -> tuple[list[Adopted], ThreadState]:
    """`check_import`, and the thread's reduced state after its last record (what a store
    that keeps a checkpoint of the thread it adopts keeps)."""
    check = ImportCheck()
    adopted = check.feed(records)
    return adopted, check.finish()


class ImportCheck:
    """`check_import` a page at a time: `feed` the records in order (ords 1.. of one
    thread, in as many pages as the caller likes), then `finish`. What it keeps between pages
    does not grow with the records' size: the chain's last hash, the reduced state, and an
    8-byte digest of each event id (for their uniqueness)."""

    def __init__(self) -> None:
        self.thread_id: str | None = None
        self.count = 0
        """Records checked so far."""
        self.last: Record | None = None
        """The last of them."""
        self._inherited: Copied | None = None
        self._prev: str | None = None
        self._ids: set[int] = set()
        self._state: ThreadState | None = None

    def feed(self, records: Sequence[Record]) -> list[Adopted]:
        """Check the next records; each with its rollout line. Raises as `check_import`."""
        adopted: list[Adopted] = []
        if not records:
            return adopted
        if self.thread_id is None:
            self._start(records[0])
        thread_id = self.thread_id
        assert thread_id is not None
        inherited, ids = self._inherited, self._ids
        prev = self._prev
        for record in records:
            self.count += 1
            ord_ = self.count
            writers = inherited.threads if inherited and 2 <= ord_ <= inherited.until else ()
            if not _well_typed(record):
                raise IntegrityError(
                    thread_id, ord_, "a field of the envelope holds a value of the wrong type"
                )
            if record.ord != ord_:
                raise IntegrityError(thread_id, ord_, f"record {ord_} holds ord {record.ord}")
            if ord_ == 2 and inherited is not None:
                prev = inherited.prev
            if record.prev != prev:
                raise IntegrityError(thread_id, ord_, "the hash chain is broken here")
            if record.thread != thread_id and record.thread not in writers:
                raise IntegrityError(thread_id, ord_, f"a record of thread {record.thread}")
            key = _id_key(record.id)
            if key in ids:
                raise IntegrityError(thread_id, ord_, f"a second record with id {record.id}")
            try:
                data_json = codec.canonical(record.data)
            except UsageError as exc:
                raise IntegrityError(thread_id, ord_, f"data that is not JSON: {exc}") from None
            line, digest = record_line(record, data_json)
            if digest != record.hash:
                raise IntegrityError(thread_id, ord_, "the record's hash does not match it")
            if inherited is not None and ord_ == inherited.until and digest != inherited.last:
                raise IntegrityError(
                    thread_id, ord_, "the last inherited record is not the one the fork names"
                )
            ids.add(key)
            adopted.append(Adopted(record, line))  # (not ``data_json``: orjson's bytes hold
            # ~4 KiB of buffer whatever their length, a whole log's worth kept until the end)
            prev = digest
        self._prev = prev
        self.last = records[-1]
        # an illegal event: IntegrityError with its ordinal
        self._state = reduce_log(thread_id, records, self._state)
        return adopted

    def finish(self) -> ThreadState:
        """The checks that need the whole log (it is not cut inside a fork's inherited
        prefix), and the reduced state after its last record."""
        if self.thread_id is None or self._state is None:
            raise UsageError("nothing to import: a thread has at least its thread.created record")
        if self._inherited is not None and self.count < self._inherited.until:
            raise IntegrityError(
                self.thread_id, self.count + 1, "the log ends inside the records its fork inherited"
            )
        return self._state

    def _start(self, first: Record) -> None:
        thread_id = first.thread
        if first.type != "thread.created" or first.ord != 1:
            raise UsageError(f"thread {thread_id}: the first record to import is not its ord 1")
        try:
            created = from_data(first.type, first.data)
            if not isinstance(created, ThreadCreated):  # pragma: no cover - from_data's contract
                raise UsageError("not a thread.created")
            self._inherited = copied_prefix(created.lineage)
        except (UsageError, ValueError) as exc:
            raise IntegrityError(
                thread_id, 1, f"ord 1 is not a valid thread.created: {exc}"
            ) from None
        self.thread_id = thread_id


class SparseIndex:
    """The sparse index of a thread written whole (adopted, or built by an import), a run
    of its lines at a time from ord 1: the offset of the line of every ``every``-th record,
    the id block of the records that end there (`threadlog.store.iddigest`) and the digest
    of the lines before it since the entry before, as `Checkpointed.sparse` holds them. The
    lines must be checked ones (built by the store's checks, or adopted after them)."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.entries: list[tuple[int, int, bytes | None, bytes | None]] = []
        self.size = 0
        """The bytes of the lines added so far (where the next one starts)."""
        self._ids: list[str] = []
        self._chunk = hashlib.sha256()

    def add(self, records: Sequence[Record], lines: Sequence[bytes]) -> None:
        """Index the next records, with their lines."""
        every, ids, offset, chunk = self.every, self._ids, self.size, self._chunk
        for record, line in zip(records, lines, strict=True):
            ids.append(record.id)
            if record.ord % every == 0:
                block = iddigest.block(ids[-every:])
                self.entries.append((record.ord, offset, block, chunk.digest()))
                ids.clear()
                chunk = hashlib.sha256()
            chunk.update(line)
            offset += len(line)
        self.size, self._chunk = offset, chunk


def _well_typed(record: Record) -> bool:
    """Whether each field of ``record`` has its envelope's type (`record_from_obj`'s checks,
    on a record given rather than decoded: a copy's or an import's)."""
    parent, prev = record.parent, record.prev
    return (
        record.v.__class__ is int
        and record.ord.__class__ is int
        and record.id.__class__ is str
        and record.thread.__class__ is str
        and record.ts.__class__ is str
        and record.hash.__class__ is str
        and (parent is None or parent.__class__ is str)
        and (prev is None or prev.__class__ is str)
        and record.type.__class__ is str
        and (record.type in _TYPES_SEEN or _type_name(record.type))
    )


_TYPES_SEEN: set[str] = set()


def _type_name(name: str) -> bool:
    """`valid_type_name`, remembered (a few names serve a whole log)."""
    if not valid_type_name(name):
        return False
    if len(_TYPES_SEEN) < 4096:
        _TYPES_SEEN.add(name)
    return True


def _id_key(id_: str) -> int:
    """An 8-byte digest of an event id: two ids of one log share one with a chance of about
    n²/2⁶⁵ (a copy refused for nothing, never a duplicate let through)."""
    return int.from_bytes(hashlib.blake2b(id_.encode(), digest_size=8).digest(), "big")


def first_difference(held: Sequence[Record], records: Sequence[Record]) -> int | None:
    """The first ordinal at which two logs of a thread differ (by hash; a missing record
    differs), or None when they are the same."""
    for i in range(max(len(held), len(records))):
        if i >= len(held) or i >= len(records) or held[i].hash != records[i].hash:
            return i + 1
    return None


def same_log(held: Sequence[Record], records: Sequence[Record]) -> bool:
    """Whether a store holds exactly ``records`` already (every hash equal)."""
    return first_difference(held, records) is None


def conflict_message(thread_id: str, held: Sequence[Record], records: Sequence[Record]) -> str:
    """Why an import of ``records`` over the ``held`` log is refused."""
    return conflict_text(thread_id, first_difference(held, records), len(held), len(records))


def conflict_text(thread_id: str, at: int | None, held: int, records: int) -> str:
    """`conflict_message` from the first ordinal at which the logs differ and their
    lengths (what a comparison a page at a time knows)."""
    if at is not None and at == min(held, records) + 1:
        behind, ahead = (held, records) if held < records else (records, held)
        where = "here" if held < records else "in the source"
        return (
            f"thread {thread_id} exists here with other content (from ord {at}): {where} it "
            f"ends at ord {behind}, a prefix of the other side's {ahead} records "
            "(a copy adopts a whole thread and does not extend one); nothing was written"
        )
    return (
        f"thread {thread_id} exists here with other content (its {held} records differ "
        f"from the {records} to import from ord {at}); nothing was written"
    )


def first_page(
    pages: Iterable[Sequence[Record]],
) -> tuple[Sequence[Record], Iterator[Sequence[Record]]]:
    """The first page that holds records, and an iterator over the rest (`adopt_pages`);
    `UsageError` if no page does."""
    stream = iter(pages)
    first = next((page for page in stream if page), None)
    if first is None:
        raise UsageError("nothing to import: a thread has at least its thread.created record")
    return first, stream


def compare_pages(
    thread_id: str,
    held: Callable[[int, int], Sequence[Record]],
    length: int,
    pages: Iterable[Sequence[Record]],
    check: ImportCheck,
) -> bool:
    """For a store that holds ``thread_id`` already (``length`` records), given the thread to
    adopt as ``pages`` (each checked with ``check``, as an adoption checks them): True if it
    holds exactly these records, else `ConflictError` (nothing is written either way).
    ``held(after, limit)`` reads the held log a page at a time (`Store.read`)."""
    at: int | None = None
    count = 0
    for page in pages:
        check.feed(page)
        if at is None:
            mine = held(count, len(page)) if count < length else []
            for i, record in enumerate(page):
                if i >= len(mine) or mine[i].hash != record.hash:
                    at = count + i + 1
                    break
        count += len(page)
    check.finish()
    if at is None and length > count:
        at = count + 1
    if at is None:
        return True
    raise ConflictError(conflict_text(thread_id, at, length, count))
