"""The shared importer: find the files, read their new lines, hand them to a format, report.

Theory of operation
-------------------
`import_paths` walks the paths given (a file, or a directory tree: the files the format
recognises, in sorted order so that a session's file comes before its ``subagents/``
directory), and imports each file in turn with `import_file`, which never raises for a bad
file: what goes wrong is in its `FileReport`.

One file's import:

1. **Skip if unchanged.** The ledger (`threadlog.importers._ledger`) remembers each file's
   size and modification time at its last import; equal ones mean nothing new, and the file
   is not even opened. That makes a re-run of a large import a matter of ``stat`` calls.
2. **Find the thread.** The format names the file's *import key* from its first line (or its
   name): the format plus the source's session id. A thread already holding the key
   continues; otherwise a thread is created, its ``thread.created`` config naming the key,
   the source path, the format and its version, the session id and cwd.
3. **Find where to start.** The thread's last ``custom.import.progress`` record says how
   many bytes and lines were read; if the file still starts with the same bytes (a checksum
   of its head and of the last line read), reading starts there: a grown file imports only
   its new lines. Otherwise (rewritten, or a format that must re-read its whole file) it is
   read from the start, and the records already imported are recognised by their ids (see
   `threadlog.importers._emit`) and not written again.
4. **Read lines.** A UTF-8 byte-order mark is skipped and reported; each complete line is
   parsed (orjson) and fed to the format's parser; a line that is not JSON is reported and
   kept as a ``custom.import.record`` (nothing is silently dropped); a last line without its
   newline (a writer caught mid-line) is left for the next import and reported (the reading
   itself, lines found without parsing them and parsed as they are fed, is `_lines`).
5. **Finish.** The parser names the active leaf (the source's chosen conversation), moved to
   with ``leaf.moved`` if needed, and a progress record ends the batch. A new thread (the
   file seen for the first time) on a store that writes whole threads was built in memory
   and goes to the import's batch of new threads (`threadlog.importers._bulk`); otherwise
   records are appended buffered (``durable=False``). `import_paths` commits the batch and
   flushes the store once every 100 files (one fsync for all of them) and saves the ledger
   after each flush; a caller of `import_file` does that itself.
"""

from __future__ import annotations

import contextlib
import gc
import io
import multiprocessing
import os
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import field
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, cast

from threadlog._dataclass import dataclass
from threadlog.errors import ThreadlogError, UsageError
from threadlog.importers._bulk import Bulk, BulkStore, NewLog
from threadlog.importers._emit import Emitter
from threadlog.importers._ledger import Ledger
from threadlog.importers._lines import (
    BOM,
    HEAD,
    Line,
    digest,
    head_lines,
    parse,
    read_head,
    spans,
    split,
)
from threadlog.importers._report import FileReport, ImportReport, Problem
from threadlog.model.ids import derived_id

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterable, Iterator

    from threadlog.importers._parallel import Built
    from threadlog.model.envelope import Record
    from threadlog.model.state import ThreadState
    from threadlog.store.protocol import Store

__all__ = [
    "FileContext",
    "Identity",
    "Line",
    "Parser",
    "SourceFormat",
    "import_file",
    "import_paths",
    "walk",
]

PROGRESS = "custom.import.progress"
FLUSH_FILES = 100
FLUSH_BYTES = 64 << 20
"""Flush (one fsync for all their records) and save the ledger after this many files or bytes."""


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a source file is: what its thread is created with."""

    key: str
    """The import key: unique per source session (format + session id)."""
    session: str
    version: str | None = None
    """The source format's version (a CLI version, a header version…)."""
    cwd: str | None = None
    model: str | None = None
    title: str | None = None
    lineage: dict[str, Any] | None = None
    """For a fork's or a sub-agent's file: ``{"key": the parent's import key, "kind": ...}``
    (the thread is created with the parent thread's id if the store holds it)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """More of the source's header, kept in ``config.import``."""


class Parser(Protocol):
    """A format's reader of one file's lines (made per import of a file)."""

    restart: bool
    """True when the next import of a grown file must read it from the start (the parser
    routes lines by state it does not keep across imports)."""
    held: int | None
    """After `finish`: the line an item still being written starts at (the file ends inside
    it), or None. The import stops before that line, and the next one reads it again."""

    def feed(self, line: Line) -> None: ...

    def finish(self) -> str | None:
        """Flush what is pending; the record id of the active leaf (None: leave it)."""
        ...

    def saved(self) -> dict[str, Any]:
        """State to keep in the progress record for the next import of the file."""
        ...


class SourceFormat(Protocol):
    """One source format (see `threadlog.importers.claude_code` and its siblings)."""

    name: str

    def matches(self, path: str) -> bool:
        """Whether a file met while walking a directory is a session file of this format."""
        ...

    def identify(self, path: str, lines: list[Line]) -> Identity:
        """The file's identity, from its name and its first lines."""
        ...

    def parser(self, ctx: FileContext, saved: dict[str, Any] | None) -> Parser:
        """A parser for the file's lines, continuing from ``saved`` (None: from the start)."""
        ...


@dataclass(slots=True)
class FileContext:
    """What a parser writes to: the file's thread, and child threads for side-chains."""

    store: Store
    ledger: Ledger
    identity: Identity
    report: FileReport
    emit: Emitter
    source: str
    format: str
    children: dict[str, Emitter] = field(default_factory=dict)
    bulk: Bulk | None = None
    """The import's batch of new threads (None: every record is appended to the store)."""
    settled: bool = False
    """Whether the file is as the last import left it (its writer done, or gone): a parser
    then writes what it would otherwise wait for (`Parser.held`)."""

    def child(self, suffix: str, *, title: str | None, kind: str = "subagent") -> Emitter:
        """The emitter of side-chain ``suffix`` of this session (its thread created if new)."""
        emitter = self.children.get(suffix)
        if emitter is not None:
            return emitter
        key = f"{self.identity.key}#{suffix}"
        lineage = {"thread": self.emit.thread_id, "kind": kind, "entry": None}
        emitter, _, _ = open_emitter(
            self.store,
            self.ledger,
            self.report,
            Identity(
                key=key,
                session=self.identity.session,
                version=self.identity.version,
                cwd=self.identity.cwd,
                title=title,
            ),
            self.source,
            self.format,
            lineage=lineage,
            bulk=self.bulk,
        )
        emitter.line = self.emit.line
        self.children[suffix] = emitter
        if emitter.thread_id not in self.report.children:
            self.report.children.append(emitter.thread_id)
        return emitter


def open_emitter(
    store: Store,
    ledger: Ledger,
    report: FileReport,
    identity: Identity,
    source: str,
    fmt: str,
    *,
    lineage: dict[str, Any] | None = None,
    bulk: Bulk | None = None,
) -> tuple[Emitter, ThreadState | None, dict[str, Any] | None]:
    """An emitter on the thread of ``identity`` (created if the store has none), starting
    from scratch: items already imported are recognised by their ids. With it, for a thread
    that existed, its state and its last progress record for ``source``.

    With ``bulk``, a new thread's records are kept in a `NewLog` (written whole with the
    batch); a thread of the batch that is asked for again is committed first."""
    thread = ledger.thread_for(store, identity.key)
    if thread is None:
        if bulk is not None:
            log = bulk.open(**thread_settings(store, ledger, identity, source, fmt, lineage))
            ledger.created(identity.key, log.thread_id)
            emitter = Emitter(log, log.thread_id, identity.key, log.root, report)
        else:
            thread = new_thread(store, ledger, identity, source, fmt, lineage=lineage)
            first = store.read(thread, limit=1)[0]
            emitter = Emitter(store, thread, identity.key, first.id, report)
        root = emitter.root
        emitter.known, emitter.parents, emitter.leaf = {root}, {root: None}, root
        return emitter, None, None
    if bulk is not None and bulk.pending(thread):
        bulk.commit()  # the session's thread is in the batch: make it readable
        store.flush()
    # The thread's state as it stands and its latest records, back to the last import of
    # this file (a crashed import of it may have written records past its progress record:
    # the lines read again find them there, or the store returns them as replays, see
    # `Emitter.floor`). The rest is read only if a line names an older record
    # (`Emitter.holds`), e.g. when the file must be read again from the start.
    state = store.state(thread, history=False)
    recent, progress = _latest(store, thread, source)
    first = recent[0] if recent and recent[0].ord == 1 else store.read(thread, limit=1)[0]
    emitter = Emitter(store, thread, identity.key, first.id, report)
    emitter.known = {first.id, *(r.id for r in recent)}
    emitter.parents = {first.id: first.parent, **{r.id: r.parent for r in recent}}
    if (recent[0].ord if recent else state.last_ord + 1) > 2:  # not all of them
        emitter.rest = lambda: store.read(thread)
    emitter.floor = state.last_ord
    emitter.leaf = state.leaf
    return emitter, state, progress


PAGE = 256
"""Records read at a time, from the end, looking for a file's last progress record."""


def _latest(store: Store, thread: str, source: str) -> tuple[list[Record], dict[str, Any] | None]:
    """``thread``'s records read from its end, a page at a time, back to the page that holds
    its last progress record for ``source`` (the last items that import wrote, which the new
    lines continue, are in it), and that record's data; every record and None if there is
    none."""
    pages: list[list[Record]] = []
    before = 2**62
    progress: dict[str, Any] | None = None
    while progress is None:
        page = store.read(thread, before=before, limit=PAGE)
        pages.append(page)
        for record in reversed(page):
            if (
                record.type == PROGRESS
                and isinstance(record.data, dict)
                and record.data.get("path") == source
            ):
                progress = record.data
                break
        if not page or page[0].ord <= 1:
            break
        before = page[0].ord
    return [r for page in reversed(pages) for r in page], progress


def new_thread(
    store: Store,
    ledger: Ledger,
    identity: Identity,
    source: str,
    fmt: str,
    *,
    lineage: dict[str, Any] | None = None,
) -> str:
    """Create the thread of ``identity`` (`thread_settings`)."""
    settings = thread_settings(store, ledger, identity, source, fmt, lineage)
    thread = store.create_thread(
        settings["principal"],
        title=settings["title"],
        lineage=settings["lineage"],
        **settings["config"],
    )
    ledger.created(identity.key, thread)
    return thread


def thread_settings(
    store: Store,
    ledger: Ledger,
    identity: Identity,
    source: str,
    fmt: str,
    lineage: dict[str, Any] | None,
) -> dict[str, Any]:
    """`Store.create_thread`'s arguments for the thread of ``identity``: ``config.import``
    names the source; a fork's or a sub-agent's lineage names its parent's thread if the
    store holds it."""
    config: dict[str, Any] = {
        "import": {
            "key": identity.key,
            "format": fmt,
            "version": identity.version,
            "session": identity.session,
            "source": source,
            **identity.extra,
        }
    }
    if identity.cwd:
        config["cwd"] = identity.cwd
    if identity.model:
        config["model"] = identity.model
    if lineage is None and identity.lineage is not None:
        lineage = {k: v for k, v in identity.lineage.items() if k != "key"}
        lineage["thread"] = ledger.thread_for(store, str(identity.lineage.get("key")))
        lineage["source_key"] = identity.lineage.get("key")
    return {"principal": "local", "title": identity.title, "lineage": lineage, "config": config}


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
"""The first bytes of a zstd frame (Codex keeps its older rollouts as ``.jsonl.zst``)."""


def _decompressed(f: BinaryIO, source: str, size: int) -> tuple[BinaryIO, int]:
    """``f`` and its length, or, for a zstd-compressed file, its decompressed bytes and
    theirs (held in memory, as a plain file's are read whole). The decoder is the standard
    library's (Python 3.14) or the ``zstandard`` package's (``threadlog[zstd]``); with
    neither, the file is refused with what to do, never read as lines."""
    if f.read(len(ZSTD_MAGIC)) != ZSTD_MAGIC:
        f.seek(0)
        return f, size
    f.seek(0)
    decompress = _zstd_decoder(source)
    try:
        data = decompress(f.read())
    except Exception as exc:  # a damaged or cut frame: the decoder's own error types
        raise UsageError(f"the zstd-compressed file cannot be read: {exc}") from None
    return io.BytesIO(data), len(data)


def _zstd_decoder(source: str) -> Callable[[bytes], bytes]:
    """A function that decompresses a whole zstd stream (one frame or several, with or
    without their sizes in the header); `UsageError` when no decoder is installed."""
    try:
        from compression import zstd  # type: ignore[import-not-found, unused-ignore]

        return cast("Callable[[bytes], bytes]", zstd.decompress)
    except ImportError:
        pass
    try:
        import zstandard
    except ImportError:
        raise UsageError(
            "the file is compressed with zstd (Codex keeps older rollouts as .jsonl.zst) "
            "and no zstd decoder is installed: pip install 'threadlog[zstd]', or "
            f"decompress it (zstd -d {source}) and import the .jsonl"
        ) from None

    def decompress(raw: bytes) -> bytes:
        reader = zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(raw), read_across_frames=True
        )
        return reader.readall()

    return decompress


def walk(paths: Iterable[str], fmt: SourceFormat) -> Iterator[str]:
    """The files to import: each path that is a file, and the format's files under each
    directory (sorted, symlinked directories not followed)."""
    for path in paths:
        if os.path.isdir(path):
            found: list[str] = []
            for root, dirs, files in os.walk(path):
                dirs.sort()
                found.extend(
                    os.path.join(root, f) for f in files if fmt.matches(os.path.join(root, f))
                )
            yield from sorted(found)
        else:
            yield path


def import_file(
    store: Store, fmt: SourceFormat, path: str, ledger: Ledger, bulk: Bulk | None = None
) -> FileReport:
    """Import one file (see the module docstring); problems are in the report, never raised.
    With ``bulk``, new threads go to its batch (the caller commits it before saving the
    ledger)."""
    source = os.path.abspath(path)
    report = FileReport(source, fmt.name)
    try:
        _import(store, fmt, source, ledger, report, bulk)
    except (ThreadlogError, OSError, ValueError) as exc:
        report.status = "failed"
        report.problem(0, "error", f"{type(exc).__name__}: {exc}")
    return report


def _import(
    store: Store,
    fmt: SourceFormat,
    source: str,
    ledger: Ledger,
    report: FileReport,
    bulk: Bulk | None = None,
) -> None:
    st = os.stat(source)
    entry = ledger.files.get(source)
    settled = (
        entry is not None
        and entry.get("size") == st.st_size
        and entry.get("mtime_ns") == st.st_mtime_ns
    )
    if (
        settled
        and entry is not None
        and not entry.get("held")
        and (entry.get("thread") in ledger.pending or store.exists(entry.get("thread", "")))
    ):
        report.status = "unchanged"
        report.thread = entry["thread"]
        report.children = list(entry.get("children") or [])
        return
    with open(source, "rb") as raw:
        f, length = _decompressed(raw, source, st.st_size)
        head = read_head(f)
        base = len(BOM) if head.startswith(BOM) else 0
        first_lines = split(head_lines(head, base), base, 0, report)
        identity = fmt.identify(source, first_lines)
        emit, state, progress = open_emitter(
            store, ledger, report, identity, source, fmt.name, bulk=bulk
        )
        report.thread = emit.thread_id
        if state is not None and state.archived:
            # the thread takes no new turn: nothing is read, and the ledger keeps the file's
            # old size, so the import after it is unarchived reads the new lines
            report.status = "skipped"
            report.problem(
                0,
                "archived",
                f"thread {emit.thread_id} is archived: the file's new lines are imported "
                "once it is unarchived (threadlog archive THREAD --undo)",
            )
            return
        # ``data`` is the file from byte ``at``: all of it, or for a file that only grew,
        # from a little before where the last import stopped (never read or hashed again)
        data, at, start, lineno, saved = b"", 0, base, 0, None
        if state is not None:
            report.status = "grown"
            offset = progress.get("offset") if progress is not None else None
            if (
                progress is not None
                and not progress.get("restart")
                and isinstance(offset, int)
                and base <= offset <= length
                and digest(head[: min(offset, HEAD)]) == progress.get("head")
            ):
                at = max(0, offset - HEAD)
                f.seek(at)
                data = f.read()
                if digest(data[: offset - at]) == progress.get("tail"):
                    start, lineno = offset - at, int(progress.get("lines", 0))
                    saved = progress.get("parser") or {}
                    emit.resume_from(state)
                    emit.last_anchor = progress.get("last_anchor")
                else:
                    data, at = b"", 0
        if not data and at == 0:
            f.seek(0)
            data = f.read()
    if base and lineno == 0:  # (said when the file is read from its start, not at each growth)
        report.problems.insert(
            0, Problem(1, "bom", "the file starts with a UTF-8 byte-order mark (skipped)")
        )
    todo, end, last_no = spans(data, start, lineno, report)
    report.bytes = end - start
    report.lines = last_no - lineno
    ctx = FileContext(
        store, ledger, identity, report, emit, source, fmt.name, bulk=bulk, settled=settled
    )
    parser = fmt.parser(ctx, saved)
    # the first lines were parsed to name the file: read from the start, they are not again
    parsed = {line.no: line for line in first_lines} if at == 0 and lineno == 0 else {}
    for span in todo:
        line = parsed.pop(span[0], None) or parse(data, *span)
        emit.line = line.no
        for child in ctx.children.values():
            child.line = line.no
        if line.error is not None:
            report.problem(line.no, "malformed", f"not JSON: {line.error}")
            emit.note(
                f"L{line.no}",
                emit.parent_of(None, previous=True),
                "malformed",
                line.raw.decode("utf-8", "replace"),
            )
            continue
        if line.replaced:
            report.problem(
                line.no, "encoding", "not valid UTF-8: the bad bytes were read as U+FFFD"
            )
        try:
            parser.feed(line)
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
            # a line of a shape no format module foresaw: reported and kept, never fatal
            report.problem(line.no, "unreadable", f"{type(exc).__name__}: {exc}")
            emit.note(f"L{line.no}", emit.parent_of(None, previous=True), "unreadable", line.obj)
    leaf = parser.finish()
    held = parser.held
    if held is not None:  # the file ends inside an item: stop before its first line
        for number, begins, _ in todo:
            if number == held:
                end, last_no = begins, held - 1
                break
    offset_end = at + end
    if leaf is not None:
        emit.move_leaf(leaf, f"leaf@{offset_end}")
    for suffix, child in ctx.children.items():
        if child.last_anchor is not None:
            child.move_leaf(child.last_anchor, f"leaf@{offset_end}:{suffix}")
    appended = emit.appended + sum(c.appended for c in ctx.children.values())
    if appended or state is None:
        first = head if at > 0 or len(head) >= min(offset_end, HEAD) else data
        progress_data = {
            "path": source,
            "offset": offset_end,
            "lines": last_no,
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "head": digest(first[: min(offset_end, HEAD)]),
            "tail": digest(data[max(0, end - HEAD) : end]),
            "last_anchor": emit.last_anchor,
            "parser": parser.saved(),
            "restart": parser.restart,
            "times": emit.times,
            "problems": len(report.problems),
        }
        pid = derived_id(
            "threadlog.import", identity.key, f"progress@{offset_end}:{st.st_mtime_ns}", "p"
        )
        emit.store.append(emit.thread_id, PROGRESS, progress_data, durable=False, id=pid)
        appended += 1
    elif report.status == "grown":
        report.status = "unchanged"
    report.records = appended
    if bulk is not None:
        emitters = [emit, *ctx.children.values()]
        logs = [e.store for e in emitters if isinstance(e.store, NewLog)]
        if logs:
            bulk.add(report, logs)
    ledger.files[source] = {
        "key": identity.key,
        "thread": emit.thread_id,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "children": report.children,
        **({"held": held} if held is not None else {}),
    }


def import_paths(
    store: Store,
    fmt: SourceFormat,
    paths: Iterable[str],
    *,
    progress: Callable[[str, int], None] | None = None,
    sizes: dict[str, int] | None = None,
    pause_gc: bool = False,
    workers: int = 0,
) -> ImportReport:
    """Import every session file under ``paths`` into ``store``.

    ``progress(path, bytes)`` is called after each file. ``pause_gc`` turns Python's cyclic
    garbage collector off for the import (and back on after it), for a process whose job is
    the import (``threadlog import``): an import allocates millions of objects and forms no
    cycles, and the collector's passes over them cost a tenth of its time. ``workers``: how
    many worker processes build the new threads of a store that writes them whole
    (`threadlog.importers._parallel`; 0: this process does; used from `PARALLEL_FILES` files
    on).

    A file seen for the first time is written as a whole new thread (with its side-chains'
    threads) by a store that can (`threadlog.importers._bulk`: the embedded store); records
    of the others are appended buffered (``durable=False``). Every `FLUSH_FILES` files or
    `FLUSH_BYTES` bytes of source and at the end, the new threads are committed and the store
    flushed, and only then is the ledger saved, so the ledger never claims a file whose
    records are not durable (a crash loses at most the files since the last flush, which the
    next run imports again).
    """
    collecting = gc.isenabled()
    if pause_gc:
        gc.disable()
    try:
        return _import_paths(store, fmt, paths, progress, sizes, workers)
    finally:
        if collecting:
            gc.enable()


def _import_paths(
    store: Store,
    fmt: SourceFormat,
    paths: Iterable[str],
    progress: Callable[[str, int], None] | None,
    sizes: dict[str, int] | None,
    workers: int,
) -> ImportReport:
    files = list(walk(paths, fmt))
    batch = store.new_threads() if isinstance(store, BulkStore) else None
    ledger = Ledger.open(store)
    report = ImportReport()
    pending_files = pending_bytes = 0
    bulk = Bulk(batch, ledger) if batch is not None else None
    reports: Generator[tuple[str, FileReport], None, None]
    if (
        bulk is not None
        and workers > 0
        and len(files) >= PARALLEL_FILES
        and "forkserver" in multiprocessing.get_all_start_methods()
    ):
        reports = _in_workers(store, fmt, files, ledger, bulk, workers)
    else:
        reports = ((path, import_file(store, fmt, path, ledger, bulk)) for path in files)
    try:
        for path, done in reports:
            report.files.append(done)
            pending_files += 1
            pending_bytes += done.bytes
            if pending_files >= FLUSH_FILES or pending_bytes >= FLUSH_BYTES:
                _durable(store, ledger, bulk)
                pending_files = pending_bytes = 0
            if progress is not None:
                progress(path, (sizes or {}).get(path, 0))
    finally:
        reports.close()  # (the workers' pool is shut down)
        try:
            _durable(store, ledger, bulk)
        finally:
            try:
                if bulk is not None:
                    bulk.discard()  # only after a failed commit: nothing is left pending
            finally:
                ledger.close()
    return report


def default_workers() -> int:
    """The worker processes an import uses by default: one per core, at most 4."""
    return max(1, min(4, os.cpu_count() or 1))


PARALLEL_FILES = 100
"""Fewer files than this are imported in this process (starting the workers costs about a
second, what importing ~100 files costs in one process)."""
WINDOW = 4
"""Files handed to the workers ahead of the one being written, per worker."""


def _import_in_worker(*args: Any) -> FileReport:
    """`import_file`, as a worker process runs it (`threadlog.importers._parallel.build` is
    handed this function, pickled by its name, so that module imports nothing of this one)."""
    return import_file(*args)


def _in_workers(
    store: Store, fmt: SourceFormat, files: list[str], ledger: Ledger, bulk: Bulk, workers: int
) -> Generator[tuple[str, FileReport], None, None]:
    """``(path, report)`` of each file in order, the new ones built by worker processes
    (`threadlog.importers._parallel`) and written here as `import_file` would have."""
    from threadlog.importers._parallel import build, watch

    batch = bulk.batch
    threshold = batch.artifact_threshold
    spool = batch.spool()  # (the workers write the threads they build there)
    window: deque[tuple[str, Future[Built] | None]] = deque()
    context = multiprocessing.get_context("forkserver")
    # the workers fork from a server that imported what they run once, instead of each
    # importing the package (~0.18 s of CPU a worker); ``__main__`` is the default's. (A
    # forkserver this process started before keeps what it preloaded.)
    context.set_forkserver_preload(["__main__", build.__module__, type(fmt).__module__])
    try:
        with ProcessPoolExecutor(
            workers, mp_context=context, initializer=watch, initargs=(os.getpid(),)
        ) as pool:
            try:
                for path in files:
                    source = os.path.abspath(path)
                    job = None
                    if source not in ledger.files:  # (a file imported before may have grown)
                        args = (
                            _import_in_worker,
                            fmt,
                            source,
                            threshold,
                            batch.max_record_bytes,
                            batch.checkpoint_records,
                            batch.sparse_every,
                            spool,
                        )
                        with contextlib.suppress(Exception):  # a broken pool: imported here
                            job = pool.submit(build, *args)
                    window.append((path, job))
                    while len(window) > WINDOW * workers or (window and window[0][1] is None):
                        yield _take(store, fmt, ledger, bulk, *window.popleft())
                while window:
                    yield _take(store, fmt, ledger, bulk, *window.popleft())
            finally:
                for _, job in window:
                    if job is not None:
                        job.cancel()
    finally:
        for _, job in window:  # given up (the pool has finished what it ran): their files
            _drop(job)
        # and what a worker killed after writing, or an answer given up, left (the batch is
        # committed or discarded by the caller only after this: what it holds is kept)
        batch.sweep()


def _drop(job: Future[Built] | None) -> None:
    """A worker's answer that is not taken: the files it wrote are removed. (A job still
    running leaves them to `NewThreads.sweep`, or to the store's sweep of temporary files
    once this process is gone.)"""
    if job is None or not job.done() or job.cancelled() or job.exception() is not None:
        return
    for thread in job.result().threads:
        if thread.spooled is not None:
            thread.spooled.remove()


def _take(
    store: Store,
    fmt: SourceFormat,
    ledger: Ledger,
    bulk: Bulk,
    path: str,
    job: Future[Built] | None,
) -> tuple[str, FileReport]:
    """A file's report: its worker's threads written, or the file imported here."""
    built = None
    if job is not None:
        try:
            built = job.result()
        except Exception:  # a worker that died, or failed: the file is imported here
            built = None
    if (
        built is None
        or built.report is None
        or any(ledger.thread_for(store, key) is not None for key in built.asked)
    ):
        _drop(job)
        return path, import_file(store, fmt, path, ledger, bulk)
    report = built.report
    try:
        if built.threads:
            bulk.add(report, built.threads)
    except (ThreadlogError, OSError) as exc:
        report.status = "failed"
        report.problem(0, "error", f"{type(exc).__name__}: {exc}")
        return path, report
    for key, thread in built.keys.items():
        ledger.created(key, thread)
    if built.entry is not None:
        ledger.files[report.path] = built.entry
    return path, report


def _durable(store: Store, ledger: Ledger, bulk: Bulk | None) -> None:
    """Make what was imported durable (the batch of new threads committed, the store
    flushed), then save the ledger, which may name it now."""
    if bulk is not None:
        bulk.commit()
    store.flush()
    ledger.save()
