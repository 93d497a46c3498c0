"""Reading the log back: `read`, `verify` and `fork`, over the events table.

Each row keeps the record's canonical line (the bytes an embedded rollout would hold), and
every read parses and checks it (`threadlog.model.envelope.parse_line`: framing, canonical
JSON, the hash over the bytes) and that the ordinals run without a gap; `verify` also checks
the chain (each ``prev`` is the previous hash; a fork's ord 2 follows what its lineage names),
which thread wrote each record, and by default that the reducer accepts every event and that
every blob a record references is sound. A fork copies the inherited rows' lines verbatim,
with their ids, hashes and writing thread, in one transaction with its new header.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threadlog._clock import new_id, rfc3339, wall_ns
from threadlog.errors import IntegrityError, InvalidTransition, ThreadNotFound, UsageError
from threadlog.model import codec
from threadlog.model.envelope import FORMAT_VERSION, Record, encode_record
from threadlog.model.eventdata import from_data, to_data
from threadlog.model.events import ThreadCreated
from threadlog.model.ids import is_uuid
from threadlog.model.lineage import Copied, copied_prefix
from threadlog.model.reducer import apply
from threadlog.store._forks import child_created
from threadlog.store.artifact_check import first_bad_artifact, worse
from threadlog.store.postgres.projections import insert_records
from threadlog.store.postgres.writer import decode_line
from threadlog.store.protocol import VerifyReport

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from contextlib import AbstractContextManager

    import psycopg

    from threadlog.model.refs import ArtifactRef
    from threadlog.model.state import ThreadState
    from threadlog.store.postgres.projections import Row
    from threadlog.store.postgres.schema import Target
    from threadlog.store.transfer import Adopted

__all__ = ["VERIFY_PAGE", "Logs", "chain_error", "new_row"]

VERIFY_PAGE = 5_000
"""Rows `Logs.verify` reads at a time (its memory does not grow with the thread)."""


class Logs:
    """Read, verify and fork (module docstring); a base class of `PostgresStore`."""

    _target: Target
    _origin: str

    def _conn(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        raise NotImplementedError

    def _check_open(self) -> None:
        raise NotImplementedError

    def _on_durable(self, thread_id: str, records: list[Record]) -> None:
        raise NotImplementedError

    if TYPE_CHECKING:

        def check_artifact(self, ref: ArtifactRef) -> str | None: ...

    def _rows(
        self, thread_id: str, after: int = 0, limit: int | None = None, before: int | None = None
    ) -> list[Any]:
        """``(ord, line)`` rows with ``after < ord < before``, ascending (``limit`` keeps the
        first ones, or with ``before`` those nearest it); `ThreadNotFound` for no such
        thread."""
        if not is_uuid(thread_id):
            raise ThreadNotFound(thread_id)
        with self._conn() as conn:
            if before is None:
                rows = conn.execute(
                    "SELECT ord, line FROM events WHERE thread_id = %s AND ord > %s "
                    "ORDER BY ord LIMIT %s",
                    (thread_id, max(after, 0), limit),
                ).fetchall()
            else:
                rows = conn.execute(
                    "SELECT ord, line FROM events WHERE thread_id = %s AND ord > %s "
                    "AND ord < %s ORDER BY ord DESC LIMIT %s",
                    (thread_id, max(after, 0), before, limit),
                ).fetchall()
                rows.reverse()
            if not rows:
                found = conn.execute(
                    "SELECT 1 FROM threads WHERE thread_id = %s", (thread_id,)
                ).fetchone()
                if found is None:
                    raise ThreadNotFound(thread_id)
        return rows

    def read(
        self,
        thread_id: str,
        after: int = 0,
        *,
        limit: int | None = None,
        before: int | None = None,
    ) -> list[Record]:
        """Durable records with ``after < ord < before``, in order, at most ``limit`` (the
        first ones, or with ``before`` those nearest it); each row's line parsed and its hash
        checked (`IntegrityError` naming the ordinal), the ords consecutive."""
        if limit is not None and limit <= 0:
            if limit < 0:
                raise UsageError("limit must be >= 0")
            self._rows(thread_id, 0, 1)  # ThreadNotFound still
            return []
        records = []
        rows = self._rows(thread_id, after, limit, before)
        expect = max(after, 0) + 1 if before is None or limit is None or not rows else rows[0][0]
        for ord_, line in rows:
            if ord_ != expect:
                raise IntegrityError(thread_id, expect, f"ord {expect} is missing from the log")
            records.append(decode_line(thread_id, ord_, line))
            expect += 1
        return records

    def exists(self, thread_id: str) -> bool:
        """Whether the store holds the thread."""
        if not is_uuid(thread_id):
            return False
        with self._conn() as conn:
            row = conn.execute("SELECT 1 FROM threads WHERE thread_id = %s", (thread_id,))
            return row.fetchone() is not None

    def thread_ids(self) -> list[str]:
        """Every thread, in id order (UUIDv7: creation order)."""
        with self._conn() as conn:
            rows = conn.execute("SELECT thread_id FROM threads ORDER BY thread_id").fetchall()
        return [str(r[0]) for r in rows]

    def verify(self, thread_id: str, *, check_events: bool = True) -> VerifyReport:
        """Recompute every hash and check the chain and ordinals (and, by default, that the
        reducer accepts every event and that referenced blobs are sound). Reports; never
        repairs. The log is read a page at a time (`VERIFY_PAGE` rows), so memory stays
        bounded however long the thread is; the verdict is the first problem by ordinal,
        structural damage taking precedence over an illegal event."""
        error: IntegrityError | InvalidTransition | None = None  # framing, hash, gap, chain
        event_error: IntegrityError | InvalidTransition | None = None
        bad_blob: IntegrityError | None = None
        state: ThreadState | None = None
        chain = _Chain(thread_id)
        last = count = 0
        after = 0
        while error is None:
            rows = self._rows(thread_id, after, VERIFY_PAGE)
            if not rows:
                break
            page: list[Record] = []
            for ord_, line in rows:
                count += 1
                after = ord_
                expect = last + 1
                if ord_ != expect:
                    error = IntegrityError(
                        thread_id, expect, f"ord {expect} is missing from the log"
                    )
                    break
                try:
                    record = decode_line(thread_id, ord_, line)
                except IntegrityError as exc:
                    error = exc
                    break
                error = chain.check(record)
                if error is not None:
                    break
                last = ord_
                page.append(record)
                if check_events and event_error is None:
                    try:
                        state = apply(state, record)
                    except (InvalidTransition, IntegrityError) as exc:
                        event_error = exc
                    except UsageError as exc:
                        event_error = InvalidTransition(str(exc))
            if bad_blob is None:
                bad_blob = first_bad_artifact(thread_id, page, self.check_artifact)
            if len(rows) < VERIFY_PAGE:
                break
        if error is not None:  # the rows after the damage still count, as a whole read's do
            count += self._count_after(thread_id, after)
        elif check_events and event_error is None and state is None:
            event_error = InvalidTransition(
                "an empty log has no state: ord 1 must be thread.created"
            )
        found = error if error is not None else (event_error if check_events else None)
        found = worse(found, bad_blob)
        return VerifyReport(thread_id, found is None, count, last, None, found)

    def _count_after(self, thread_id: str, after: int) -> int:
        """How many rows the thread has after ``after``."""
        with self._conn() as conn:
            row = conn.execute(
                "SELECT count(*) FROM events WHERE thread_id = %s AND ord > %s",
                (thread_id, after),
            ).fetchone()
        return int(row[0]) if row else 0

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
        """A new thread inheriting ords 2..``at`` verbatim (same ids, hashes and writing
        threads), its lineage in ``thread.created`` and ``changes`` as a ``config.changed``;
        all or nothing, in one transaction."""
        self._check_open()
        rows = self._rows(thread_id)
        if isinstance(at, str):
            ids = {r.id: r.ord for r in self._decode_all(thread_id, rows)}
            found = ids.get(at)
            if found is None:
                raise UsageError(f"no entry {at!r} in thread {thread_id}")
            at = found
        if at is None:
            at = len(rows)
        if not 1 <= at <= len(rows):
            raise UsageError(f"thread {thread_id} has no ord {at} (it has {len(rows)} records)")
        source = [(decode_line(thread_id, o, line), bytes(line)) for o, line in rows[:at]]
        first = source[0][0]
        created = from_data(first.type, first.data)
        assert isinstance(created, ThreadCreated)
        try:
            inherited = copied_prefix(created.lineage)
        except ValueError as exc:
            raise IntegrityError(thread_id, 1, str(exc)) from None
        last = source[at - 1][0]
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
        head_data = to_data(head)[1]
        header = new_row(child, 1, None, rfc3339(now), head.type, head_data, None, new_id(now))
        out: list[Row] = [header, *((r, line, None) for r, line in source[1:at])]
        if changes:
            out.append(
                new_row(
                    child,
                    at + 1,
                    last.id,
                    rfc3339(now),
                    "config.changed",
                    {"changes": changes},
                    last.hash if at > 1 else header[0].hash,
                    new_id(now),
                )
            )
        with self._conn() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute("INSERT INTO threads (thread_id) VALUES (%s)", (child,))
            insert_records(cur, {child: out}, channel=self._target.channel, origin=self._origin)
        self._on_durable(child, [r for r, _, _ in out])
        return child

    def thread_lines(self, thread_id: str, after: int = 0) -> list[bytes]:
        """The thread's records after ``after`` as their canonical lines, byte for byte what
        an embedded rollout holds (``threadlog copy`` writes them out verbatim)."""
        return [bytes(line) for _, line in self._rows(thread_id, after)]

    def import_thread(self, lines: list[bytes]) -> str:
        """Add a whole thread given as its canonical lines (an embedded rollout's, in order),
        verbatim: same ids, timestamps and hashes; returns its id (ord 1's ``thread``).

        Every line is parsed and its hash checked, the ordinals must run from 1 and the
        chain hold (`chain_error`) before anything is written; then the thread's rows and
        projections go in in one transaction. Raises `IntegrityError` (a bad line, a broken
        chain; nothing written), `UsageError` (no lines, or a thread the store already holds).
        """
        self._check_open()
        if not lines:
            raise UsageError("import_thread: a thread has at least its thread.created line")
        first = decode_line("-", 1, lines[0])
        thread_id = first.thread
        if not is_uuid(thread_id) or first.type != "thread.created":
            raise IntegrityError(thread_id, 1, "ord 1 must be the thread's thread.created")
        records = [decode_line(thread_id, i + 1, line) for i, line in enumerate(lines)]
        error = chain_error(thread_id, records)
        if error is not None:
            raise error
        return self._insert_new_thread(thread_id, records, lines)

    def _insert_new_thread(
        self, thread_id: str, records: list[Record], lines: Sequence[bytes]
    ) -> str:
        """Insert a whole new thread whose records were checked (`import_thread`, or
        `threadlog.store.transfer.check_import`), with ``lines`` their canonical lines: in
        one transaction, `IMPORT_ROWS` rows a statement (the statement's parameters are a
        copy of its rows: never the whole log's at once). `UsageError` if the store holds
        the thread already."""
        with self._conn() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute(
                "INSERT INTO threads (thread_id) VALUES (%s) ON CONFLICT DO NOTHING", (thread_id,)
            )
            if cur.rowcount == 0:
                raise UsageError(f"the store already holds thread {thread_id}")
            for start in range(0, len(records), IMPORT_ROWS):
                end = start + IMPORT_ROWS
                rows: list[Row] = [
                    (r, bytes(line), None)
                    for r, line in zip(records[start:end], lines[start:end], strict=True)
                ]
                insert_records(
                    cur, {thread_id: rows}, channel=self._target.channel, origin=self._origin
                )
        self._on_durable(thread_id, records)
        return thread_id

    def _insert_pages(
        self, thread_id: str, pages: Iterable[Sequence[Adopted]], finish: Callable[[], object]
    ) -> int:
        """`_insert_new_thread` of a thread given a page of checked records at a time (each
        page's statements sent as it comes, `IMPORT_ROWS` rows a statement), in one
        transaction that ``finish()`` (the checks that need the whole log) must pass before
        it commits; how many records. The store's listeners hear of them after the commit, a
        page at a time, read back from the table (only if there are listeners)."""
        count = 0
        with self._conn() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute(
                "INSERT INTO threads (thread_id) VALUES (%s) ON CONFLICT DO NOTHING", (thread_id,)
            )
            if cur.rowcount == 0:
                raise UsageError(f"the store already holds thread {thread_id}")
            for adopted in pages:
                for start in range(0, len(adopted), IMPORT_ROWS):
                    rows: list[Row] = [
                        (a.record, bytes(a.line), None)
                        for a in adopted[start : start + IMPORT_ROWS]
                    ]
                    insert_records(
                        cur, {thread_id: rows}, channel=self._target.channel, origin=self._origin
                    )
                count += len(adopted)
            finish()
        if getattr(self, "_listeners", None):
            for start in range(0, count, IMPORT_ROWS):
                more = min(IMPORT_ROWS, count - start)  # (not what was appended since)
                self._on_durable(thread_id, self.read(thread_id, start, limit=more))
        return count

    def _decode_all(self, thread_id: str, rows: list[Any]) -> list[Record]:
        return [decode_line(thread_id, o, line) for o, line in rows]


IMPORT_ROWS = 5000
"""Rows of a new thread inserted by one statement (`_insert_new_thread`)."""


def chain_error(thread_id: str, records: list[Record]) -> IntegrityError | None:
    """The first record of ``records`` (ords 1.. of ``thread_id``, each hash already checked)
    that breaks the chain: a ``prev`` that is not the previous hash (a fork's ord 2 follows
    what its lineage names), or a record another thread wrote that the thread did not
    inherit; None when the chain holds."""
    chain = _Chain(thread_id)
    for record in records:
        error = chain.check(record)
        if error is not None:
            return error
    return None


class _Chain:
    """A thread's records checked one after another from ord 1 (`chain_error`, and `verify`
    a page at a time): the order, the hash chain (a fork's ord 2 follows what its lineage
    names) and who wrote each record."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        self.seen = 0
        self.inherited: Copied | None = None
        self.prev: str | None = None

    def check(self, record: Record) -> IntegrityError | None:
        """Why ``record``, the next one, breaks the chain; None if it does not."""
        thread_id, n = self.thread_id, self.seen
        if n == 0:
            try:
                created = from_data(record.type, record.data)
                if isinstance(created, ThreadCreated):
                    self.inherited = copied_prefix(created.lineage)
            except (UsageError, IntegrityError, ValueError) as exc:
                return IntegrityError(thread_id, 1, f"ord 1 is not a valid thread.created: {exc}")
        inherited = self.inherited
        prev = None if n == 0 else inherited.prev if n == 1 and inherited else self.prev
        writers = inherited.threads if inherited and 2 <= record.ord <= inherited.until else ()
        if record.ord != n + 1:
            return IntegrityError(thread_id, n + 1, f"record {n + 1} holds ord {record.ord}")
        if record.prev != prev:
            return IntegrityError(thread_id, record.ord, "the hash chain is broken here")
        if record.thread != thread_id and record.thread not in writers:
            return IntegrityError(thread_id, record.ord, f"a record of thread {record.thread}")
        self.seen, self.prev = n + 1, record.hash
        return None


def new_row(
    thread_id: str,
    ord_: int,
    parent: str | None,
    ts: str,
    type_name: str,
    data: Any,
    prev: str | None,
    event_id: str,
) -> Row:
    """A new record of ``thread_id`` as a row to insert (no fencing token)."""
    data_json = codec.canonical(data)
    line, digest = encode_record(
        id=event_id,
        thread=thread_id,
        ord=ord_,
        parent=parent,
        ts=ts,
        type=type_name,
        data_json=data_json,
        prev=prev,
    )
    record = Record(
        FORMAT_VERSION,
        event_id,
        thread_id,
        ord_,
        parent,
        ts,
        type_name,
        codec.loads(data_json),
        prev,
        digest,
    )
    return record, line, None
