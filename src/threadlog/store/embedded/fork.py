"""Forking a thread byte for byte: a new rollout inheriting a prefix of another, all or nothing.

Theory of operation
-------------------
A fork is a new thread whose ``thread.created`` records its lineage (source thread, ordinal,
entry id and hash, and which threads wrote the inherited records) and which inherits the
source's records 2..``at`` *verbatim*: the same bytes, so the same ids, payloads and hashes
(`threadlog.model.lineage` says how such a chain verifies). Nothing is re-encoded, and
artifacts are shared by hash.

`Forker.fork` reads the source up to its durable end (syncing it first when no live writer
vouches for it), finds the fork point by counting lines (or by an entry id: a byte search
confirmed by parsing the one line it finds), and writes the child to a temporary file while a
second thread verifies the inherited lines as a read would (`_verify_source`): the copy costs
no more than the check. The file is fsynced, renamed into place and its folder fsynced, so a
crash leaves either the whole fork or nothing. The index is told of the fork from the bytes
it was written from (`Forked.batch`), without parsing the inherited records that change no
index row.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import TYPE_CHECKING, Any

import orjson

from threadlog import _faults
from threadlog._clock import new_id, rfc3339, wall_ns
from threadlog._dataclass import dataclass
from threadlog.errors import IntegrityError, StorageError, ThreadNotFound, UsageError
from threadlog.model import codec
from threadlog.model.envelope import (
    HASH_TAIL,
    BadRecord,
    Record,
    encode_record,
    parse_line,
    verify_lines,
)
from threadlog.model.eventdata import from_data, to_data
from threadlog.model.events import ThreadCreated
from threadlog.model.lineage import Copied, copied_prefix
from threadlog.model.projection import PROJECTED
from threadlog.store._fileops import temporary_path
from threadlog.store._forks import child_created
from threadlog.store.embedded.rollout import scan

if TYPE_CHECKING:
    from collections.abc import Callable

    from threadlog.store._fileops import FileOps
    from threadlog.store.embedded.journal import Journal
    from threadlog.store.embedded.layout import Layout
    from threadlog.store.embedded.reader import Reader
    from threadlog.store.embedded.rolloutlog import RolloutLog
    from threadlog.store.embedded.schema import IndexBatch

__all__ = ["Forked", "Forker"]


class Forker:
    """Writes forks (see the module docstring).

    Args:
        logs: the threads this store has open for writing (a source open here has its
            journal flushed first, so that what was acknowledged is in its file).
        reader: how far a source is durable, and the sync of one nobody writes.
        written: called with each fork written, for the index (`Indexer.add_fork`).
    """

    def __init__(
        self,
        layout: Layout,
        fops: FileOps,
        journal: Journal,
        logs: dict[str, RolloutLog],
        reader: Reader,
        written: Callable[[Forked], None],
    ) -> None:
        self._layout = layout
        self._fops = fops
        self._journal = journal
        self._logs = logs
        self._reader = reader
        self._written = written

    def fork(
        self,
        thread_id: str,
        at: int | str | None = None,
        *,
        principal: str | None = None,
        title: str | None = None,
        kind: str = "fork",
        changes: dict[str, Any] | None = None,
    ) -> str:
        """A new thread holding a copy of ``thread_id``'s records up to ord ``at`` (default:
        all), with ``thread.created`` recording the lineage; returns its id.

        The child inherits ords 2..``at`` byte for byte (same ids, payloads, hashes; see
        `threadlog.model.lineage`), verified on the way; artifacts are shared by hash, not
        copied. The whole new rollout — its ``thread.created``, the inherited records and the
        child's settings (``changes`` become a ``config.changed`` record) — is written to a
        temporary file, fsynced and renamed into place: after a crash either the whole fork
        exists or none of it. With ``kind="salvage"``, ``at`` may be the last valid ordinal of
        a damaged log. ``at`` may also name the last record to inherit by its event id
        (`UsageError` naming it when no record of the thread has it).
        """
        source = self._layout.path_of(thread_id)
        if thread_id in self._logs:
            self._journal.flush()  # what is acknowledged is in the file
        try:
            durable = self._reader.durable_end(thread_id)  # never copy what may not be on disk yet
            with open(source, "rb") as f:
                data = f.read() if durable is None else f.read(durable)
        except FileNotFoundError:
            raise ThreadNotFound(thread_id) from None
        if durable is None:
            # no live writer: a killed one may have left records it never synced, which the
            # child is about to inherit durably; make them durable in the source too (as
            # `read` does), or a power cut could leave the child naming a lost record
            self._reader.sync_file(source)
        if b"\n" not in data:
            raise ThreadNotFound(thread_id)
        second = data.index(b"\n") + 1
        complete = data.count(b"\n")  # complete lines; what follows the last newline is torn
        first, created, inherited = _fork_source(thread_id, data[:second])
        if isinstance(at, str):
            at = _line_of_entry(thread_id, data, at)
        at, end, last = _fork_point(thread_id, data, complete, at, first, second)
        head = child_created(
            thread_id,
            created,
            first,
            inherited,
            at,
            last,
            principal=principal,
            title=title,
            kind=kind,
        )
        now = wall_ns()
        child = new_id(now)
        header, digest = encode_record(
            id=new_id(now),
            thread=child,
            ord=1,
            parent=None,
            ts=rfc3339(now),
            type=head.type,
            data_json=codec.canonical(to_data(head)[1]),
            prev=None,
        )
        settings = b""
        if changes:
            settings, _ = encode_record(
                id=new_id(now),
                thread=child,
                ord=at + 1,
                parent=last.id,
                ts=rfc3339(now),
                type="config.changed",
                data_json=codec.canonical({"changes": changes}),
                prev=last.hash if at > 1 else digest,
            )
        path = self._layout.path_of(child)
        directory = os.path.dirname(path)
        tmp = temporary_path(directory, child)
        fops = self._fops
        fd, writer, renamed = -1, None, False
        try:
            fops.makedirs(directory)
            fd = fops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            # a second thread copies the prefix into the new file while this one verifies it
            writer = _Background(_write_both, fops, fd, header, memoryview(data)[second:end])
            try:
                if at > 1:
                    _verify_source(thread_id, data, complete, inherited, first.hash, second, end)
            finally:
                written = writer.wait()
            if written is not None:
                raise written
            fops.write_all(fd, settings)
            fops.fsync(fd)
            closing, fd = fd, -1
            fops.close(closing)
            _faults.point("fork.copied")
            fops.rename(tmp, path)
            renamed = True
            fops.fsync_dir(directory)
        except BaseException as exc:
            if writer is not None:
                writer.finish()  # never close the file under a write in progress
            if fd >= 0:
                with contextlib.suppress(OSError):
                    fops.close(fd)
            with contextlib.suppress(OSError):
                fops.unlink(path if renamed else tmp)  # a fork that fails leaves nothing
            if isinstance(exc, OSError):
                raise StorageError(f"cannot write fork {child} of {thread_id}: {exc}") from exc
            raise
        self._written(Forked(child, path, header, data, second, end, settings))
        return child


def _fork_source(thread_id: str, line: bytes) -> tuple[Record, ThreadCreated, Copied | None]:
    """A fork source's ord 1, checked and decoded, and the prefix it inherited, if any."""
    try:
        first = parse_line(line)
    except BadRecord as exc:
        raise IntegrityError(thread_id, 1, str(exc), offset=0) from None
    created = from_data(first.type, first.data) if first.type == "thread.created" else None
    if not isinstance(created, ThreadCreated) or first.thread != thread_id or first.ord != 1:
        raise IntegrityError(thread_id, 1, "ord 1 is not this thread's thread.created", offset=0)
    try:
        return first, created, copied_prefix(created.lineage)
    except ValueError as exc:
        raise IntegrityError(thread_id, 1, str(exc), offset=0) from None


def _fork_point(
    thread_id: str, data: bytes, complete: int, at: int | None, first: Record, second: int
) -> tuple[int, int, Record]:
    """The fork point (in ``data``, of ``complete`` lines): its ord, the offset just past its
    line, and its record."""
    if at is None:
        end = data.rfind(b"\n") + 1
        start = data.rfind(b"\n", 0, end - 1) + 1
        try:
            last = parse_line(data[start:end]) if complete > 1 else first
            if last.ord != complete:
                raise IntegrityError(
                    thread_id, complete, f"line {complete} holds ord {last.ord}", offset=start
                )
            return complete, end, last
        except BadRecord:
            # debris that readers take for a torn write (it may hold a newline) is not part
            # of the thread: fork what they read
            scanned = scan(data, thread_id)
            if scanned.error is not None:
                raise scanned.error from None
            return len(scanned.records), scanned.end, scanned.records[-1]
    if not 1 <= at <= complete:
        raise UsageError(f"thread {thread_id} has no ord {at} (it has {complete} records)")
    end = _after_line(data, at, second, 1)
    start = data.rfind(b"\n", 0, end - 1) + 1
    try:
        last = parse_line(data[start:end]) if at > 1 else first
    except BadRecord as exc:
        raise IntegrityError(thread_id, at, str(exc), offset=start) from None
    if last.ord != at:
        raise IntegrityError(thread_id, at, f"line {at} holds ord {last.ord}", offset=start)
    return at, end, last


def _line_of_entry(thread_id: str, data: bytes, entry: str) -> int:
    """The line (1-based) of ``data`` holding the record whose id is ``entry``; `UsageError`
    when no complete line does. A byte search for the id, confirmed by parsing the line it
    lands in (a record's data may spell another record's id), instead of parsing every line.
    `_fork_point` then checks that the line holds that ordinal."""
    needle = b'"id":' + orjson.dumps(entry)
    stop = data.rfind(b"\n") + 1  # what follows the last newline is torn
    pos = data.find(needle, 0, stop)
    while pos >= 0:
        start = data.rfind(b"\n", 0, pos) + 1
        end = data.find(b"\n", pos) + 1
        try:
            record = parse_line(data[start:end])
        except BadRecord:
            record = None
        if record is not None and record.id == entry:
            return data.count(b"\n", 0, start) + 1
        pos = data.find(needle, end, stop)
    raise UsageError(f"no entry {entry!r} in thread {thread_id}")


def _verify_source(
    thread_id: str,
    data: bytes,
    complete: int,
    inherited: Copied | None,
    first_hash: str,
    second: int,
    end: int,
) -> None:
    """Verify a fork source's lines from ord 2 to offset ``end`` as a read would: the ones it
    inherited itself (all of them, so that they end on the hash its lineage names), then its
    own, each of which it must have written."""
    pos, prev = second, first_hash
    try:
        if inherited is not None:
            if complete < inherited.until:
                raise IntegrityError(
                    thread_id,
                    complete + 1,
                    f"the fork's file ends inside its inherited records "
                    f"(lineage ord {inherited.until})",
                    offset=len(data),
                )
            pos = _after_line(data, inherited.until, second, 1)
            if verify_lines(data, second, pos, prev=inherited.prev) != inherited.last:
                raise IntegrityError(
                    thread_id,
                    inherited.until,
                    "the last inherited record is not the one the fork names (lineage hash)",
                    offset=data.rfind(b"\n", 0, pos - 1) + 1,
                )
            prev = inherited.last
        if end > pos:
            verify_lines(data, pos, end, prev=prev, thread=thread_id)
    except BadRecord as exc:
        offset: int = getattr(exc, "offset", second)
        ord_ = data.count(b"\n", 0, offset) + 1
        raise IntegrityError(thread_id, ord_, str(exc), offset=offset) from None


def _write_both(fops: FileOps, fd: int, head: bytes, body: memoryview) -> None:
    fops.write_all(fd, head)
    fops.write_all(fd, body)


@dataclass(frozen=True, slots=True)
class Forked:
    """A fork this store wrote: what the index needs of it, from the bytes it was written from."""

    thread_id: str
    path: str
    header: bytes
    data: bytes
    """The source's bytes; the child inherited ``data[start:end]``."""
    start: int
    end: int
    settings: bytes

    def batch(self) -> IndexBatch:
        """An index batch: ord 1, the inherited records that change index rows (the others
        change nothing but the thread's last ord, so only the last of them is decoded), and
        the child's settings. Parsing every line would cost ~1 s of CPU for 100,000."""
        data, pos, end = self.data, self.start, self.end
        records = [parse_line(self.header)]
        find, rfind, startswith = data.find, data.rfind, data.startswith
        while pos < end:
            nl = find(b"\n", pos, end)
            body_end = nl - HASH_TAIL
            t = rfind(b',"type":"', pos, body_end) + 9
            projected = (
                data[t : find(b'"', t, body_end)] in _PROJECTED_BYTES
                or not startswith(b',"v":1', body_end - 6)  # older format: upcast by project
                or nl + 1 == end
            )
            if projected:
                records.append(parse_line(data[pos : nl + 1]))
            pos = nl + 1
        if self.settings:
            records.append(parse_line(self.settings))
        size = len(self.header) + end - self.start + len(self.settings)
        return self.thread_id, self.path, records, size


_PROJECTED_BYTES = frozenset(name.encode() for name in PROJECTED)


def _after_line(data: bytes, n: int, pos: int, done: int) -> int:
    """The offset just past line ``n`` (1-based), counting on from ``pos``, which is just
    past line ``done``."""
    find = data.find
    for _ in range(n - done):
        pos = find(b"\n", pos) + 1
    return pos


class _Background:
    """Runs ``work(*args)`` on a thread; `wait` waits for it and returns what it raised, if
    anything; `finish` waits for it however often the wait is interrupted.

    Completion is an event the worker sets, not ``Thread.join``: a join interrupted by Ctrl-C
    can leave ``is_alive()`` False while the thread still runs (CPython 3.11).
    """

    def __init__(self, work: Callable[..., None], *args: Any) -> None:
        self._error: BaseException | None = None
        self._done = threading.Event()
        threading.Thread(target=self._run, args=(work, args), daemon=True).start()

    def _run(self, work: Callable[..., None], args: tuple[Any, ...]) -> None:
        try:
            work(*args)
        except BaseException as exc:  # handed to the waiting thread
            self._error = exc
        finally:
            self._done.set()

    def wait(self) -> BaseException | None:
        self._done.wait()
        return self._error

    def finish(self) -> None:
        while not self._done.is_set():
            with contextlib.suppress(BaseException):  # e.g. a second Ctrl-C: wait on
                self._done.wait()
