"""`threadlog verify` for the embedded store: the whole log checked, one chunk in memory.

The rollout is scanned as a stream (`threadlog.store.embedded.streamscan`); each chunk's
records are replayed through the reducer (one state kept, as `threadlog.model.reducer.replay`
does) and their blobs checked, then dropped. The verdict is the one a scan of the whole file
gives, in the same order of precedence: damage in the file, then acknowledged records gone
(`lost_acknowledged`), then a dead journal that could not be replayed, then the first event
the reducer refuses, and the first missing or damaged blob if it is at a lower ordinal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from threadlog.errors import IntegrityError, InvalidTransition, ThreadNotFound, UsageError
from threadlog.model.eventdata import from_data
from threadlog.model.reducer import apply
from threadlog.store.artifact_check import first_bad_artifact, worse
from threadlog.store.embedded.rollout import Scan
from threadlog.store.embedded.streamscan import StreamScan
from threadlog.store.protocol import VerifyReport

if TYPE_CHECKING:
    from collections.abc import Callable

    from threadlog.model.envelope import Record
    from threadlog.model.refs import ArtifactRef
    from threadlog.model.state import ThreadState
    from threadlog.store.embedded.schema import AckMark

__all__ = ["verify_log"]


def verify_log(
    thread_id: str,
    path: str,
    *,
    end: int | None,
    known: AckMark | None,
    journal_problem: str | None,
    missing: bool,
    check_events: bool,
    check_artifact: Callable[[ArtifactRef], str | None] | None,
    lost: Callable[[str, Scan, AckMark | None], IntegrityError | None],
) -> VerifyReport:
    """Verify one thread's rollout (see the module docstring). ``missing``: the file is gone
    though the index saw records acknowledged (then it is reported, not `ThreadNotFound`);
    ``lost`` is `lost_acknowledged`."""
    try:
        stream: StreamScan | None = StreamScan(path, thread_id, end=end)
    except FileNotFoundError:
        if not missing:
            raise ThreadNotFound(thread_id) from None
        stream = None
    state: ThreadState | None = None
    event_error: IntegrityError | InvalidTransition | None = None
    undecodable: UsageError | None = None
    bad_blob: IntegrityError | None = None
    marked: tuple[Record, int] | None = None  # the record at the acknowledged ord, its offset
    if stream is not None:
        for batch in stream:
            if known is not None and batch[0].ord <= known[0] <= batch[-1].ord:
                at = known[0] - batch[0].ord
                marked = (batch[at], stream.offsets[at])
            if check_events and event_error is None and undecodable is None:
                for record in batch:
                    try:
                        state = apply(state, record)
                    except (InvalidTransition, IntegrityError) as exc:
                        event_error = exc
                        break
                    except UsageError as exc:  # data that does not fit its type
                        undecodable = exc
                        break
            if check_artifact is not None and bad_blob is None:
                bad_blob = first_bad_artifact(thread_id, batch, check_artifact)
    count = stream.count if stream is not None else 0
    scan_error = stream.error if stream is not None else None
    error: IntegrityError | InvalidTransition | None = scan_error
    if error is None:
        error = lost(thread_id, _summary(stream, marked), known)
    if error is None and journal_problem is not None:
        # a crashed store's journal holds records of the thread that could not be replayed
        error = IntegrityError(thread_id, count + 1, journal_problem)
    if error is None and not count:
        raise ThreadNotFound(thread_id)  # never born: its first record was never acknowledged
    if error is None and check_events:
        if undecodable is not None:
            error = InvalidTransition(
                str(undecodable), ord=_first_undecodable(path, thread_id, end)
            )
        else:
            error = event_error
    if check_artifact is not None and scan_error is None:
        error = worse(error, bad_blob)
    torn = stream.torn if stream is not None else None
    return VerifyReport(thread_id, error is None, count, count, torn, error)


def _summary(stream: StreamScan | None, marked: tuple[Record, int] | None) -> Scan:
    """What `lost_acknowledged` looks at: the last record and the one at the mark."""
    if stream is None or stream.last is None:
        return Scan(end=stream.end if stream is not None else 0)
    if marked is None:
        return Scan(records=[stream.last], offsets=[stream.end], end=stream.end)
    return Scan(records=[marked[0], stream.last], offsets=[marked[1], stream.end], end=stream.end)


def _first_undecodable(path: str, thread_id: str, end: int | None) -> int | None:
    """The first record whose data does not fit its type (a second pass; an error path)."""
    stream = StreamScan(path, thread_id, end=end)
    for batch in stream:
        for record in batch:
            try:
                from_data(record.type, record.data)
            except UsageError:
                stream.close()
                return record.ord
    return None
