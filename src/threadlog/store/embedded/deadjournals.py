"""Dead journals: finding, checking and parsing them, and replaying one thread's records.

A journal nobody holds a lock on belongs to a store that crashed before its checkpoint
(`threadlog.store.embedded.journal` describes the protocol). `find_dead_journals` opens each
under a shared lock, replays only those this home wrote (their header, keyed by the home's
secret) and sets any other aside in ``quarantine/``; `recover_rollout` brings one thread's
rollout up to date with the records the journals hold for it, or raises `IntegrityError` when
they cannot be chained on. Deciding which threads to replay when is
`threadlog.store.embedded.recovery`'s job.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING

from threadlog._dataclass import dataclass
from threadlog.errors import InsecureHome, IntegrityError, StorageError
from threadlog.model.envelope import BadRecord, Record, parse_line
from threadlog.store._fileops import move_to_quarantine
from threadlog.store._perms import check_fd, journal_header
from threadlog.store.embedded.rollout import Scan, scan, scan_file, zero_debris
from threadlog.store.embedded.snapshots import tail_after

if TYPE_CHECKING:
    from threadlog.store._fileops import FileOps

__all__ = ["DeadJournal", "find_dead_journals", "recover_rollout"]

log = logging.getLogger("threadlog.store")


@dataclass
class DeadJournal:
    """A journal whose store died before its checkpoint, held with a shared lock."""

    path: str
    fd: int
    entries: dict[str, list[tuple[Record, bytes]]] = field(default_factory=dict)
    """thread id → its ``(record, line)`` pairs in journal order."""
    damaged: str | None = None
    """Why its records end before the file's do, when that is damage and not a torn tail
    (`_parse_journal`): such a journal is reported and never deleted."""

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def try_delete(self, fops: FileOps) -> bool:
        """Delete the journal if no other process is reading it (lock upgrade)."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if os.fstat(self.fd).st_nlink == 0:
            return False  # its live store retired it between our open and our lock
        try:
            fops.unlink(self.path)
        except FileNotFoundError:
            return False
        fops.fsync_dir(os.path.dirname(self.path))
        return True


def _last_ord(path: str, thread_id: str) -> int:
    """The ordinal of the last line of a rollout that is a valid record of the thread (0 if
    none is)."""
    with open(path, "rb") as f:
        data = f.read()
    end = data.rfind(b"\n") + 1
    while end > 0:
        start = data.rfind(b"\n", 0, end - 1) + 1
        try:
            record = parse_line(data[start:end])
        except BadRecord:
            end = start
            continue
        if record.thread == thread_id:
            return record.ord
        end = start
    return 0


Report = Callable[[str, str, str | None], None]
"""``report(kind, message, path)``: how recovery tells the store about a problem it skipped."""


def find_dead_journals(
    directory: str,
    secret: bytes,
    fops: FileOps,
    *,
    legacy_before: int | None = None,
    report: Report | None = None,
) -> list[DeadJournal]:
    """Journals no live store holds, checked and parsed. The caller must `release` each one.

    A journal is replayed only if this home's stores wrote it: a regular file, ours, not
    writable by others, starting with the header `journal_header` gives for its name under
    the home's ``secret``. A journal without a header whose inode last changed before
    ``legacy_before`` (the secret's ``st_ctime_ns``, which no user can set back) was written by
    an older version before the home had a secret: it is accepted too, on every open until it
    is replayed (a failed first replay is retried, not refused). Any other ``*.wal`` is moved to
    ``<home>/quarantine`` and reported, never replayed nor deleted. One that is empty or
    holds part of its header only (and maybe zeros after it: the space its first commit wrote
    ahead, `Journal._reserve`) was cut by a crash as it was created, before its first commit's
    ``fdatasync``, so it holds nothing acknowledged: it is deleted. A journal's records end at
    its first line that is not a record, a torn tail, unless that line is damage
    (`_parse_journal`).

    Raises:
        StorageError: the folder or a journal in it cannot be read (its records may be
            needed before any thread is written).
    """
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".wal"))
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        _report(
            report,
            "journal_folder",
            f"the journal folder {directory} is not a folder: no journal can be replayed "
            "or written; move it away and reopen the store",
            directory,
        )
        return []
    except OSError as exc:
        raise StorageError(f"cannot read the journal folder {directory}: {exc}") from exc
    dead: list[DeadJournal] = []
    for name in names:
        path = os.path.join(directory, name)
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            continue
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise StorageError(f"cannot read the journal {path}: {exc}") from exc
            _quarantine(path, fops, "it is a symbolic link", report)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # a live store's journal
            continue
        except OSError as exc:
            os.close(fd)
            raise StorageError(f"cannot lock the journal {path}: {exc}") from exc
        journal = DeadJournal(path, fd)
        try:
            try:
                check_fd(fd, path, "the journal")
            except InsecureHome as exc:
                _quarantine(path, fops, str(exc), report, journal)
                continue
            try:
                with os.fdopen(os.dup(fd), "rb") as f:
                    data = f.read()
            except OSError as exc:
                raise StorageError(f"cannot read the journal {path}: {exc}") from exc
            header = journal_header(secret, name)
            if data.startswith(header):
                _parse_journal(journal, data, len(header))
            elif header.startswith(data.rstrip(b"\0")):  # (zeros: space written ahead)
                log.info(
                    "deleting the journal %s, cut as it was created (%d bytes)", path, len(data)
                )
                journal.try_delete(fops)
                journal.release()
                continue
            elif (
                legacy_before is not None
                and os.fstat(fd).st_ctime_ns < legacy_before
                and _starts_with_a_record(data)
            ):
                log.warning("replaying the journal %s of an older version (no header)", path)
                _parse_journal(journal, data, 0)
            else:
                _quarantine(path, fops, "its header is not this home's", report, journal)
                continue
        except BaseException:
            journal.release()
            raise
        dead.append(journal)
    return dead


def _starts_with_a_record(data: bytes) -> bool:
    nl = data.find(b"\n")
    try:
        parse_line(data[: nl + 1] if nl >= 0 else data)
    except BadRecord:
        return False
    return True


def _report(report: Report | None, kind: str, message: str, path: str | None) -> None:
    log.error("%s", message)
    if report is not None:
        report(kind, message, path)


def _quarantine(
    path: str,
    fops: FileOps,
    reason: str,
    report: Report | None,
    journal: DeadJournal | None = None,
) -> None:
    """Move a journal this home did not write to ``<home>/quarantine`` (never replay it,
    never delete it: it is somebody's data, or evidence). Releases ``journal``."""
    home = os.path.dirname(os.path.dirname(path))
    try:
        if journal is not None:
            try:
                fcntl.flock(journal.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another store is moving it
            if os.fstat(journal.fd).st_nlink == 0:
                return  # its live store retired it between our open and our lock
        dest = move_to_quarantine(path, home, fops, "refused")
    except OSError as exc:
        _report(
            report,
            "journal_refused",
            f"the journal {path} is refused ({reason}) and left in place (it cannot be "
            f"moved aside: {exc}); it is not replayed: move it away",
            path,
        )
        return
    finally:
        if journal is not None:
            journal.release()
    _report(
        report,
        "journal_refused",
        f"the journal {path} is refused ({reason}); moved to {dest}, not replayed",
        dest,
    )


def _parse_journal(journal: DeadJournal, data: bytes, pos: int) -> None:
    """Its records, up to the first line that is not one. That line ends them as a torn tail
    (nothing after it was acknowledged: a commit's write lands after the last one's, and
    returns only after its fdatasync) when it is what a crash leaves: an unterminated
    fragment, or zeros (the space written ahead, or a page a power cut lost, which reads
    zeros from its first lost byte: a line starting with NUL, or holding a run of
    `ZERO_RUN`; no flipped bit makes either). A complete line that is neither, with a record
    after it, is damage to what may have been acknowledged: the journal is marked
    ``damaged`` (reported, kept), and the records after it are taken too (the replay of a
    thread whose record it was then finds a gap and refuses the thread)."""
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:
            break  # torn tail: never acknowledged
        line = data[pos : nl + 1]
        try:
            record = parse_line(line)
        except BadRecord as exc:
            if line.startswith(b"\0") or zero_debris(line) or not _a_record_follows(data, nl + 1):
                break
            if journal.damaged is None:
                journal.damaged = f"line at byte {pos}: {exc}"
            pos = nl + 1
            continue
        journal.entries.setdefault(record.thread, []).append((record, line))
        pos = nl + 1


def _a_record_follows(data: bytes, pos: int) -> bool:
    """Whether a complete line after ``pos`` is a record."""
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:
            return False
        try:
            parse_line(data[pos : nl + 1])
        except BadRecord:
            pos = nl + 1
            continue
        return True
    return False


Seek = Callable[[str, int], "tuple[int, int, str | None] | None"]
"""``seek(thread_id, ord)``: ``(ord, offset, prev)`` of a known line start at or before record
``ord`` (`threadlog.store.embedded.checkpoint.Checkpoints.seek`), a hint the caller checks."""


def recover_rollout(
    path: str,
    thread_id: str,
    fops: FileOps,
    entries: list[tuple[Record, bytes]],
    seek: Seek | None = None,
    max_record_bytes: int = 0,
) -> Scan:
    """Bring a rollout up to date with journal entries; returns the scan of the result.

    The caller holds the thread's lease. Without entries this is just a scan. With ``seek``,
    the rollout is read from a known line at or before the record the journal's first one
    follows (`_anchored`), not whole: the scan returned then starts there (its first record's
    ord is not 1).
    """
    if not entries:
        return scan_file(path, thread_id)
    by_ord: dict[int, tuple[Record, bytes]] = {}
    for record, line in entries:
        other = by_ord.get(record.ord)
        if other is not None and other[0].hash != record.hash:
            raise IntegrityError(thread_id, record.ord, "two journals disagree on this record")
        by_ord[record.ord] = (record, line)
    ords = sorted(by_ord)
    scanned = None
    if seek is not None and ords[0] > 1:
        scanned = _anchored(path, thread_id, seek, ords[0] - 1, max_record_bytes)
    if scanned is None:
        scanned = scan_file(path, thread_id)
    have = scanned.records
    base = have[0].ord if have else 1  # (the ord of ``have[0]``)
    last = have[-1].ord if have else 0
    if ords[0] > last + 1:
        if scanned.error is not None:
            raise scanned.error
        raise IntegrityError(
            thread_id,
            last + 1,
            f"{ords[0] - last - 1} record(s) missing: the rollout ends at ord {last} but a "
            f"crashed store's journal resumes at ord {ords[0]} (it holds ords {ords[0]}-"
            f"{ords[-1]}, which cannot be chained on)",
            offset=scanned.end,
        )
    for ord_ in ords:
        if base <= ord_ <= last and have[ord_ - base].hash != by_ord[ord_][0].hash:
            raise IntegrityError(
                thread_id, ord_, "the rollout and the journal disagree on this record"
            )
    missing = [by_ord[o] for o in ords if o > last]
    prev_hash = have[-1].hash if have else None
    expected = last + 1
    for record, _ in missing:
        if record.ord != expected or record.prev != prev_hash:
            raise IntegrityError(thread_id, expected, "the journal's records do not chain")
        prev_hash, expected = record.hash, expected + 1
    damaged = scanned.error is not None or scanned.torn is not None
    if scanned.error is not None and (
        last + 1 not in by_ord or _last_ord(path, thread_id) > ords[-1]
    ):
        # Damage with valid records after it, which the journal cannot restore: truncating
        # would delete acknowledged records (A5). Only lost pages inside what the journal
        # covers (an unsynced tail) are restored from it.
        raise scanned.error
    if not missing and not damaged:
        # Everything is there, but possibly only in the page cache (the dead store never
        # reached its checkpoint): make it durable before the journal may be deleted (B2).
        # The journal's lines are written over their own copies first (the same bytes): a
        # failed fsync of this boot may have marked those pages clean without their being
        # on disk ("fsyncgate"), and an fsync alone would not write them.
        fd = fops.open(path, os.O_WRONLY)
        try:
            for at, chunk in _runs(by_ord, ords, scanned, base, last):
                os.lseek(fd, at, os.SEEK_SET)
                fops.write_all(fd, chunk)
            fops.fsync(fd)
        finally:
            fops.close(fd)
        return scanned
    if damaged:
        log.warning(
            "thread %s: rollout damaged after ord %d (%s); restoring from the journal",
            thread_id,
            last,
            scanned.error or (scanned.torn and scanned.torn.reason),
        )
    fd = fops.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        fops.ftruncate(fd, scanned.end)
        if missing:
            fops.write_all(fd, b"".join(line for _, line in missing))
        fops.fsync(fd)
    finally:
        fops.close(fd)
    log.info("thread %s: replayed %d record(s) from the journal", thread_id, len(missing))
    tail = b"".join(line for _, line in missing)
    extra = scan(
        tail,
        thread_id,
        base_offset=scanned.end,
        start_ord=last + 1,
        prev_hash=have[-1].hash if have else None,
    )
    if extra.error is not None:
        raise extra.error
    return Scan(
        records=have + extra.records,
        offsets=scanned.offsets + extra.offsets,
        end=extra.end,
    )


def _runs(
    by_ord: dict[int, tuple[Record, bytes]], ords: list[int], scanned: Scan, base: int, last: int
) -> list[tuple[int, bytes]]:
    """``(offset, bytes)`` of each run of consecutive journal records the rollout holds (at
    ords ``base``..``last``, ``scanned.offsets`` their lines' offsets): the same bytes as
    the rollout's there."""
    runs: list[tuple[int, bytes]] = []
    lines: list[bytes] = []
    start = prev = -1
    for ord_ in ords:
        if not base <= ord_ <= last:
            continue
        if lines and ord_ != prev + 1:
            runs.append((start, b"".join(lines)))
            lines = []
        if not lines:
            start = scanned.offsets[ord_ - base]
        lines.append(by_ord[ord_][1])
        prev = ord_
    if lines:
        runs.append((start, b"".join(lines)))
    return runs


def _anchored(
    path: str, thread_id: str, seek: Seek, before: int, max_record_bytes: int
) -> Scan | None:
    """The rollout from a known line at or before record ``before`` on: that record (found
    through ``seek``, checked by `threadlog.store.embedded.snapshots.tail_after` as a
    checkpoint's anchor is) and the scan of what follows it, damage included; None when
    there is no such line, or any doubt (the caller scans the whole file).

    Everything before the records a dead journal holds is durable in the rollout (a journal
    is retired only once the rollouts it wrote are synced, RELIABILITY B2), so nothing there
    needs the journal; as at any open from a checkpoint, it was verified when it was written
    and is not read again (`threadlog verify` reads it all)."""
    hint = seek(thread_id, before)
    if hint is None or max_record_bytes <= 0:
        return None
    ord_, offset, prev = hint
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            line = f.readline(max_record_bytes + 1)
        record = parse_line(line)
    except (OSError, BadRecord):
        return None
    if record.ord != ord_ or (prev is not None and record.prev != prev):
        return None  # (``prev``: the checkpoint's hash, when the hint is the line after it)
    got = tail_after(
        thread_id, path, ord_, record.hash, offset + len(line), max_record_bytes, keep_damage=True
    )
    if got is None:
        return None
    anchor, tail = got
    return Scan(
        records=[anchor, *tail.records],
        offsets=[offset, *tail.offsets],
        end=tail.end,
        torn=tail.torn,
        error=tail.error,
    )
