"""The embedded store's `Transfer`: a copied thread written as a new rollout, all or nothing.

Theory of operation
-------------------
`Importer.adopt_thread` checks the records as every backend does
(`threadlog.store.transfer.check_import`: hashes, chain, ordinals, lineage, legality), which
also yields each record's rollout line: the line is rebuilt from the record's fields and the
canonical JSON of its data, and its hash must be the one the record carries, so the file holds
exactly the bytes the source's hashes are over.

The lines are written to a temporary file beside the rollout's place (named so that a crash's
leftover is swept, `remove_orphan_temp`), fsynced, then *linked* to the rollout's name:
``link`` fails if the name exists, so an import never replaces a thread that appeared
meanwhile (another process importing or creating it), where a rename would. The temporary
name is removed and the folder fsynced: after a crash the thread is there whole or not at
all, and durable on return. The lines are written a MiB at a time (never the whole log
joined in memory), and the index learns of the thread from what its records change
(`threadlog.model.projection.project_log` of the records at hand, at the next drain), not
from its bytes parsed again.

A thread already there is read (verified) and compared by hash: the same records are a
re-run (False, nothing written); anything else is refused with `ConflictError`.

`NewThreads` is the same write for many *new* threads whose lines the caller built itself, as
the store's own writer does (``threadlog import``: `threadlog.importers._bulk` encodes each
record with `encode_record` and admits it with the reducer): each is written to its temporary
file by `NewThreads.add`, and `NewThreads.commit` makes the whole batch durable at once (the
files fsynced concurrently, so that the file system's journal commits them together instead of
one journal commit each), links each into place, fsyncs each folder once, and hands the threads
to the index. Until `commit` returns, none of them is a thread; after a crash each is whole or
absent (its temporary file is swept).

An import's worker processes write the threads they build themselves (`NewThreads.spool`: a
`FolderSpool`, handed to each worker), instead of sending their lines to the importing
process to write: each thread's rollout goes to the very temporary file `add` would have
written, named for the importing process (so that a sweep by another process leaves it while
the importer lives, and takes it once it died), and `NewThreads.adopt` takes it into the batch
(opened, its size checked) as `add` would have. From there it is the same file: `commit`
fsyncs it (an fsync makes a file's data durable whichever process wrote it) and links it.
A batch's temporary files are named ``.<id>.new.<pid>.tmp``, apart from the process's other
temporary files, so that `NewThreads.sweep` can remove, once the workers are done, what one
killed after writing (or an answer given up) left, without touching a fork's or a copy's. This
spares the importing process the pipe and the write of every thread's bytes, the import's
largest cost in the process that owns its crash safety.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import stat
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from threadlog._clock import new_id, wall_ns
from threadlog._dataclass import dataclass
from threadlog.errors import ConflictError, StorageError, UsageError
from threadlog.model import snapshot
from threadlog.model.projection import Projected, ProjectedLog, as_projected
from threadlog.store._fileops import DEFAULT_FILEOPS, temporary_path
from threadlog.store.embedded.fork import Forked
from threadlog.store.embedded.streamscan import StreamScan
from threadlog.store.transfer import (
    END,
    Checkpointed,
    ImportCheck,
    SparseIndex,
    Spooled,
    compare_pages,
    first_page,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from threadlog.model.envelope import Record
    from threadlog.store._fileops import FileOps
    from threadlog.store.embedded.layout import Layout
    from threadlog.store.embedded.reader import Reader
    from threadlog.store.embedded.schema import IndexBatch

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

__all__ = ["FolderSpool", "Importer", "NewThreads"]


class Importer:
    """Writes imported threads (see the module docstring).

    Args:
        reader: reads a thread already there, to compare it.
        written: called with each thread written, for the index (`Indexer.add_fork`).
    """

    def __init__(
        self,
        layout: Layout,
        fops: FileOps,
        reader: Reader,
        written: Callable[[Forked], None],
        *,
        checkpoint: Callable[[str, Checkpointed, int], None] | None = None,
        checkpoint_records: int = 10_000,
        sparse_every: int = 1000,
    ) -> None:
        self._layout = layout
        self._fops = fops
        self._reader = reader
        self._written = written
        self._checkpoint = checkpoint
        """Keeps a checkpoint of a thread written (`Checkpoints.put`), as `NewThreads` does."""
        self._checkpoint_records = checkpoint_records
        """From this many records, an adopted thread gets a checkpoint and sparse index."""
        self._sparse_every = sparse_every

    def adopt_thread(self, records: Sequence[Record]) -> bool:
        """`threadlog.store.protocol.Transfer.adopt_thread` (module docstring): `adopt_pages`
        of one page. A long thread (`checkpoint_records` or more) is kept with a checkpoint
        and its sparse index, as the store would have taken them: its first open for
        writing, and a read after an ordinal, start there instead of reading the whole log."""
        return self.adopt_pages([records])

    def adopt_pages(self, pages: Iterable[Sequence[Record]]) -> bool:
        """`threadlog.store.protocol.Transfer.adopt_pages`: `adopt_thread` of a thread given
        a page of records at a time, holding one page at a time (each checked, written to the
        temporary file and folded into the index's changes, the checkpoint's sparse index and
        the reduced state, then let go)."""
        first, stream = first_page(pages)
        thread_id = first[0].thread
        check = ImportCheck()
        if self._layout.exists(thread_id):
            return self._held_pages(thread_id, check, itertools.chain([first], stream))
        adopted = check.feed(first)  # (checked before anything is created)
        path = self._layout.path_of(thread_id)
        directory = os.path.dirname(path)
        tmp = _adopt_temporary(directory, thread_id)
        fops = self._fops
        fd = _write_temporary(fops, thread_id, tmp)
        projected, sparse = ProjectedLog(), SparseIndex(self._sparse_every)
        try:
            while True:
                records, lines = [a.record for a in adopted], [a.line for a in adopted]
                for chunk in _chunks(lines):
                    fops.write_all(fd, chunk)
                projected.add(records)
                sparse.add(records, lines)
                page = next(stream, None)
                if page is None:
                    break
                adopted = check.feed(page)
            state = check.finish()
            fops.fsync(fd)
            closing, fd = fd, -1
            fops.close(closing)
            try:
                os.link(tmp, path)  # never replaces a thread that appeared meanwhile
            except FileExistsError:
                if _same_bytes(path, tmp):  # the same records (lines are canonical)
                    return False
                raise ConflictError(
                    f"thread {thread_id} appeared here while it was copied, with other "
                    "content; nothing was written"
                ) from None
            finally:
                with contextlib.suppress(OSError):
                    fops.unlink(tmp)
            fops.fsync_dir(directory)
        except BaseException as exc:
            _discard(fops, fd, tmp)
            if isinstance(exc, OSError):
                raise StorageError(f"cannot import thread {thread_id}: {exc}") from exc
            raise
        self._written(_Built.of(thread_id, path, projected.result(), sparse.size))
        last = check.last
        if self._checkpoint is not None and last is not None:
            if check.count >= self._checkpoint_records:
                payload = snapshot.dump_trimmed(state)  # (nothing more is checked against it)
                taken = Checkpointed(last.ord, last.hash, payload, sparse.entries)
                self._checkpoint(thread_id, taken, sparse.size)
        return True

    def _held_pages(
        self, thread_id: str, check: ImportCheck, pages: Iterable[Sequence[Record]]
    ) -> bool:
        """`compare_pages` against the thread this store holds: False if it holds exactly
        these records (a copy run again), `ConflictError` if not."""
        tail = self._reader.read(thread_id, before=END, limit=1)
        length = tail[0].ord if tail else 0
        # the held log streamed once, a chunk at a time (`StreamScan`), not read a window at
        # a time: a thread without a sparse index (a short one, or one copied by an older
        # threadlog) would be read whole for every window, quadratic in time and holding it
        # all at once
        stream = StreamScan(
            self._layout.path_of(thread_id), thread_id, end=self._reader.durable_end(thread_id)
        )
        chunks = iter(stream)
        buffered: list[Record] = []
        at = 0  # the ordinal of the last held record handed out

        def held(after: int, limit: int) -> list[Record]:
            nonlocal buffered, at
            if after != at:  # (compare_pages asks for consecutive windows)
                return self._reader.read(thread_id, after, limit=limit)
            while len(buffered) < limit:
                chunk = next(chunks, None)
                if chunk is None:
                    if stream.error is not None:
                        raise stream.error
                    break
                buffered.extend(chunk)
            out, buffered = buffered[:limit], buffered[limit:]
            at += len(out)
            return out

        try:
            compare_pages(thread_id, held, length, pages, check)
        finally:
            stream.close()
        return False


def _same_bytes(path: str, other: str) -> bool:
    """Whether two files hold the same bytes (read a MiB at a time)."""
    try:
        with open(path, "rb") as a, open(other, "rb") as b:
            while True:
                x, y = a.read(1 << 20), b.read(1 << 20)
                if x != y:
                    return False
                if not x:
                    return True
    except OSError:
        return False


def _adopt_temporary(directory: str, thread_id: str) -> str:
    """The temporary file of a thread being adopted, ``.<id>.<random>.<pid>.tmp``: unique
    even within the process (`Importer.adopt_pages` holds it for the whole copy, and two
    adoptions of one thread at once must meet at the ``link``, not at the ``open``)."""
    return temporary_path(directory, f"{thread_id}.{secrets.token_hex(4)}")


def _new_temporary(directory: str, thread_id: str, pid: int | None = None) -> str:
    """The temporary file of a new thread of a batch (`NewThreads`), ``.<id>.new.<pid>.tmp``:
    named for the batch's process as every temporary file is (`temporary_path`), and told
    apart from the others a process writes (a fork's, a copy's), so that `NewThreads.sweep`
    can remove what the batch's workers left without touching them."""
    return temporary_path(directory, f"{thread_id}{_NEW}", pid)


_NEW = ".new"


def _write_temporary(fops: FileOps, thread_id: str, tmp: str, *parts: bytes) -> int:
    """Create ``tmp`` (never over an existing file), with its folder, and write a thread's
    lines (``parts``, one after another) to it; its open descriptor. On a failure nothing is
    left: what was created is closed and removed (`StorageError` for an I/O error)."""
    fd = -1
    try:
        fops.makedirs(os.path.dirname(tmp))
        fd = fops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        for part in parts:
            fops.write_all(fd, part)
    except BaseException as exc:
        if fd >= 0:  # (a file not created is not this write's to remove)
            _discard(fops, fd, tmp)
        if isinstance(exc, OSError):
            raise StorageError(f"cannot import thread {thread_id}: {exc}") from exc
        raise
    return fd


def _chunks(lines: list[bytes], size: int = 1 << 20) -> Iterator[bytes]:
    """``lines`` joined into pieces of about ``size`` bytes (one write each)."""
    start = total = 0
    for i, line in enumerate(lines):
        total += len(line)
        if total >= size:
            yield b"".join(lines[start : i + 1])
            start, total = i + 1, 0
    if start < len(lines):
        yield b"".join(lines[start:])


def _discard(fops: FileOps, fd: int, tmp: str) -> None:
    """Close ``fd`` (unless it is -1: closed already) and remove the temporary file ``tmp``,
    ignoring errors: what a write of a thread that failed, or was given up, leaves."""
    if fd >= 0:
        with contextlib.suppress(OSError):
            fops.close(fd)
    with contextlib.suppress(OSError):
        fops.unlink(tmp)


@dataclass(frozen=True, slots=True)
class FolderSpool:
    """`threadlog.store.transfer.Spool` for a batch of the embedded store: a thread's
    temporary file beside its rollout's place, named for the batch's process (module
    docstring)."""

    layout: Layout
    pid: int
    """The process that holds the batch (and will take the files)."""

    def temporary_of(self, thread_id: str) -> str:
        """The temporary file of a new thread's rollout."""
        return _new_temporary(os.path.dirname(self.layout.path_of(thread_id)), thread_id, self.pid)

    def write(self, thread_id: str, lines: Sequence[bytes]) -> Spooled:
        tmp = self.temporary_of(thread_id)
        body = b"".join(lines)
        fd = _write_temporary(DEFAULT_FILEOPS, thread_id, tmp, body)
        try:
            DEFAULT_FILEOPS.close(fd)
        except OSError as exc:
            _discard(DEFAULT_FILEOPS, -1, tmp)
            raise StorageError(f"cannot import thread {thread_id}: {exc}") from exc
        return Spooled(tmp, len(body))


SYNC_WORKERS = 8
"""How many files `NewThreads.commit` fsyncs at once."""


class NewThreads:
    """A batch of new threads written whole, durable and visible together (module docstring).

    Not thread-safe: one caller fills and commits a batch. Use as a context manager, or call
    `discard` when giving up: what was added and not committed is removed.
    """

    def __init__(
        self,
        layout: Layout,
        fops: FileOps,
        written: Callable[[Forked], None],
        *,
        encode: Callable[[str, Any], tuple[Any, bytes]],
        max_record_bytes: int,
        artifact_threshold: int,
        checkpoint: Callable[[str, Checkpointed, int], None] | None = None,
        checkpoint_records: int = 1 << 62,
        sparse_every: int = 1000,
    ) -> None:
        self._layout = layout
        self._fops = fops
        self._written = written
        self._checkpoint = checkpoint
        self.checkpoint_records = checkpoint_records if checkpoint is not None else 1 << 62
        """A thread of at least this many records is given with its checkpoint, which
        ``checkpoint(thread_id, checkpointed, end)`` keeps once the thread is written."""
        self.sparse_every = sparse_every
        """The sparse index's spacing (`threadlog.store.embedded.checkpoint.SPARSE_EVERY`)."""
        self.encode = encode
        """``encode(type, data)``: the data as stored and its canonical JSON (look-alike
        references escaped, large values moved to the artifact store), as an append does."""
        self.max_record_bytes = max_record_bytes
        """The largest record line the store accepts."""
        self.artifact_threshold = artifact_threshold
        """Data larger than this (canonical JSON bytes) goes to the artifact store (`encode`)."""
        self._pending: list[tuple[str, str, str, int, Forked]] = []
        """``(thread id, rollout path, temporary path, fd, what the index is given)``."""
        self._pending_ids: set[str] = set()
        """The ids of ``_pending``'s threads (`pending`)."""
        self._taken: dict[str, tuple[Checkpointed, int]] = {}
        """Thread id → the checkpoint it came with and its rollout's size."""
        self._folders: set[str] = set()
        """The folders of the threads added or adopted (where `sweep` looks)."""

    def __enter__(self) -> NewThreads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()

    def __len__(self) -> int:
        return len(self._pending)

    def pending(self, thread_id: str) -> bool:
        """Whether ``thread_id`` was added and is not committed yet."""
        return thread_id in self._pending_ids

    def add(
        self,
        thread_id: str,
        lines: Sequence[bytes],
        records: Sequence[Record] | Projected | None = None,
        checkpoint: Checkpointed | None = None,
    ) -> None:
        """Write a new thread's rollout ``lines`` (its ``thread.created`` first, each line
        encoded by `encode_record` and admitted by the reducer) to its temporary file.
        ``records``, the records of those lines if the caller holds them, or what they change
        in the index (`project_log` of them all: built where they were), spare the index
        parsing the lines again. ``checkpoint`` (a long thread's, built with its lines) is
        kept once the thread is written, as if the store had taken it.

        Raises `UsageError` (a malformed id, no lines, or a line not of this thread),
        `ConflictError` (the thread exists already), `StorageError`; nothing is added then.
        """
        path = self._layout.path_of(thread_id)
        if (
            not lines
            or not lines[0].endswith(b"\n")
            or f'"thread":"{thread_id}"'.encode() not in lines[0]
        ):
            raise UsageError(f"thread {thread_id}: its first line is not its own record")
        if os.path.exists(path) or self.pending(thread_id):
            raise ConflictError(f"thread {thread_id} exists already; nothing was written")
        directory = os.path.dirname(path)
        tmp = _new_temporary(directory, thread_id)
        body = b"".join(lines[1:])
        fd = _write_temporary(self._fops, thread_id, tmp, lines[0], body)
        if records:
            projected = as_projected(records)
            indexed: Forked = _Built.of(thread_id, path, projected, len(lines[0]) + len(body))
        else:
            indexed = Forked(thread_id, path, lines[0], body, 0, len(body), b"")
        self._pending.append((thread_id, path, tmp, fd, indexed))
        self._pending_ids.add(thread_id)
        self._folders.add(directory)
        if checkpoint is not None and self._checkpoint is not None:
            self._taken[thread_id] = (checkpoint, len(lines[0]) + len(body))

    def spool(self) -> FolderSpool:
        """Where another process writes a new thread for `adopt` (module docstring)."""
        return FolderSpool(self._layout, os.getpid())

    def adopt(
        self,
        thread_id: str,
        spooled: Spooled,
        records: Sequence[Record] | Projected,
        checkpoint: Checkpointed | None = None,
    ) -> None:
        """`add` for a thread whose lines another process wrote (`spool`): its temporary
        file is taken as it is, once its name and size are checked. The file is the batch's
        from here: on an error it is removed and nothing is added (`UsageError`, a file not
        of this batch; `ConflictError`, the thread exists; `StorageError`). A file that is
        not this thread's temporary file, or is that of a thread pending in the batch, is
        refused and left alone: it is not the one this batch would have written for it (it
        may be another thread's, or a rollout)."""
        path = self._layout.path_of(thread_id)
        directory = os.path.dirname(path)
        self._folders.add(directory)
        if spooled.path != _new_temporary(directory, thread_id):
            raise UsageError(f"thread {thread_id}: {spooled.path} is not its temporary file")
        if self.pending(thread_id):  # (its temporary file is that of the pending one)
            raise ConflictError(f"thread {thread_id} is in the batch already; nothing was written")
        fd = -1
        try:
            if os.path.exists(path):
                raise ConflictError(f"thread {thread_id} exists already; nothing was written")
            try:
                fd = self._fops.open(spooled.path, os.O_WRONLY | _NOFOLLOW)
                info = os.fstat(fd)
            except OSError as exc:
                raise StorageError(f"cannot import thread {thread_id}: {exc}") from exc
            if not stat.S_ISREG(info.st_mode) or info.st_size != spooled.size:
                raise StorageError(
                    f"cannot import thread {thread_id}: its temporary file holds "
                    f"{info.st_size} bytes, not the {spooled.size} written"
                )
        except BaseException:
            _discard(self._fops, fd, spooled.path)
            raise
        projected = as_projected(records)
        indexed = _Built.of(thread_id, path, projected, spooled.size)
        self._pending.append((thread_id, path, spooled.path, fd, indexed))
        self._pending_ids.add(thread_id)
        if checkpoint is not None and self._checkpoint is not None:
            self._taken[thread_id] = (checkpoint, spooled.size)

    def commit(self) -> list[str]:
        """Make every thread added durable and visible, and queue it for the index (at the
        store's next flush); their ids. On an error none of those not linked yet is written
        (`StorageError`, or `ConflictError` if one appeared meanwhile), the batch is empty."""
        pending, self._pending = self._pending, []
        self._pending_ids = set()
        taken, self._taken = self._taken, {}
        if not pending:
            return []
        fops = self._fops
        linked: list[tuple[str, str, str, int, Forked]] = []
        try:
            with ThreadPoolExecutor(min(SYNC_WORKERS, len(pending))) as pool:
                list(pool.map(fops.fsync, [p[3] for p in pending]))
            directories: dict[str, None] = {}
            for item in pending:
                thread_id, path, tmp, _, _ = item
                try:
                    os.link(tmp, path)  # never replaces a thread that appeared meanwhile
                except FileExistsError:
                    raise ConflictError(
                        f"thread {thread_id} appeared while it was imported; nothing was "
                        "written for it"
                    ) from None
                linked.append(item)
                directories[os.path.dirname(path)] = None
            for directory in directories:
                fops.fsync_dir(directory)
        except BaseException as exc:
            if isinstance(exc, OSError):
                exc = StorageError(f"cannot import {len(pending)} threads: {exc}")
            self._cleanup(pending, linked)
            raise exc from None
        self._cleanup(pending, [])
        for *_, indexed in pending:
            self._written(indexed)
        if self._checkpoint is not None:
            for thread_id, (checkpoint, end) in taken.items():
                self._checkpoint(thread_id, checkpoint, end)  # (durable and linked: now)
        return [p[0] for p in pending]

    def drop(self, thread_ids: Sequence[str]) -> None:
        """Remove threads added and not committed (the others stay in the batch)."""
        gone = set(thread_ids)
        for thread_id in gone:
            self._taken.pop(thread_id, None)
        self._cleanup([p for p in self._pending if p[0] in gone], [])
        self._pending = [p for p in self._pending if p[0] not in gone]
        self._pending_ids -= gone

    def sweep(self) -> int:
        """Remove the new-thread temporary files named for this process that the batch does
        not hold, in the folders of the threads it was given and in this month's: what a
        worker killed after writing, or an answer given up, left (`FolderSpool`); how many.
        Call it once nothing more is coming from the workers, and only while this is the
        process's one batch of the store (as an import's is, under the import lock): another
        batch's pending files would look the same."""
        held = {p[2] for p in self._pending}
        suffix = f"{_NEW}.{os.getpid()}.tmp"
        this_month = os.path.dirname(self._layout.path_of(new_id(wall_ns())))
        removed = 0
        for folder in {*self._folders, this_month}:
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for name in names:
                path = os.path.join(folder, name)
                if name.startswith(".") and name.endswith(suffix) and path not in held:
                    with contextlib.suppress(OSError):
                        self._fops.unlink(path)
                        removed += 1
        return removed

    def discard(self) -> None:
        """Remove what was added and not committed."""
        pending, self._pending = self._pending, []
        self._pending_ids = set()
        self._taken = {}
        self._cleanup(pending, [])

    def _cleanup(
        self,
        pending: list[tuple[str, str, str, int, Forked]],
        linked: list[tuple[str, str, str, int, Forked]],
    ) -> None:
        """Close and remove the temporary files; unlink rollouts linked by a failed commit
        (not durable, never acknowledged: no thread at all)."""
        for _, _, tmp, fd, _ in pending:
            _discard(self._fops, fd, tmp)
        for _, path, _, _, _ in linked:
            with contextlib.suppress(OSError):
                self._fops.unlink(path)


@dataclass(frozen=True, slots=True)
class _Built(Forked):
    """A new thread written from records its writer holds: indexed from what they change
    (`project_log`), without parsing its lines again."""

    projected: Projected | None = None
    size: int = 0

    @classmethod
    def of(cls, thread_id: str, path: str, projected: Projected, size: int) -> _Built:
        """The thread at ``path``, ``size`` bytes long, indexed from ``projected``."""
        return cls(thread_id, path, b"", b"", 0, 0, b"", projected, size)

    def batch(self) -> IndexBatch:
        assert self.projected is not None
        return self.thread_id, self.path, self.projected, self.size
