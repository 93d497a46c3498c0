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
all, and durable on return. The index learns of it as of a fork written by this store
(`Forked.batch`, at the next drain).

A thread already there is read (verified) and compared by hash: the same records are a
re-run (False, nothing written); anything else is refused with `ConflictError`.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

from threadlog.errors import ConflictError, StorageError
from threadlog.store.embedded.fork import Forked
from threadlog.store.transfer import check_import, conflict_message, same_log

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from threadlog.model.envelope import Record
    from threadlog.store._fileops import FileOps
    from threadlog.store.embedded.layout import Layout
    from threadlog.store.embedded.reader import Reader

__all__ = ["Importer"]


class Importer:
    """Writes imported threads (see the module docstring).

    Args:
        reader: reads a thread already there, to compare it.
        written: called with each thread written, for the index (`Indexer.add_fork`).
    """

    def __init__(
        self, layout: Layout, fops: FileOps, reader: Reader, written: Callable[[Forked], None]
    ) -> None:
        self._layout = layout
        self._fops = fops
        self._reader = reader
        self._written = written

    def adopt_thread(self, records: Sequence[Record]) -> bool:
        """`threadlog.store.protocol.Transfer.adopt_thread` (module docstring)."""
        adopted = check_import(records)
        thread_id = adopted[0].record.thread
        path = self._layout.path_of(thread_id)
        if self._held(thread_id, records):
            return False
        directory = os.path.dirname(path)
        tmp = os.path.join(directory, f".{thread_id}.{os.getpid()}.tmp")
        fops = self._fops
        fd = -1
        body = b"".join(a.line for a in adopted[1:])
        try:
            fops.makedirs(directory)
            fd = fops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            fops.write_all(fd, adopted[0].line)
            fops.write_all(fd, body)
            fops.fsync(fd)
            closing, fd = fd, -1
            fops.close(closing)
            try:
                os.link(tmp, path)  # never replaces a thread that appeared meanwhile
            except FileExistsError:
                if self._held(thread_id, records):
                    return False
                raise
            finally:
                with contextlib.suppress(OSError):
                    fops.unlink(tmp)
            fops.fsync_dir(directory)
        except BaseException as exc:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    fops.close(fd)
            with contextlib.suppress(OSError):
                fops.unlink(tmp)
            if isinstance(exc, OSError):
                raise StorageError(f"cannot import thread {thread_id}: {exc}") from exc
            raise
        self._written(Forked(thread_id, path, adopted[0].line, body, 0, len(body), b""))
        return True

    def _held(self, thread_id: str, records: Sequence[Record]) -> bool:
        """Whether the store holds exactly ``records`` already; `ConflictError` if it holds
        the thread with other content."""
        if not self._layout.exists(thread_id):
            return False
        held = self._reader.read(thread_id)
        if same_log(held, records):
            return True
        raise ConflictError(conflict_message(thread_id, held, records))
