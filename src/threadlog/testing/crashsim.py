"""A simulated disk for power-loss tests: what survives when the power goes (RELIABILITY D3/D4).

`CrashSimFS` is a `FileOps` (the store's file-operation seam). It performs every operation on a
real directory, so the store, which also reads through plain ``os`` and ``open``, runs exactly
as it does in production; beside that, it keeps a *model* of the directory tree that knows what
a power cut would leave of it, and a *trace* of every logical operation. After the workload, the
trace is replayed into the model, and at any point of it the model materializes *legal crash
images*: directories holding what a disk could contain if the power had failed just there.

The persistence model
---------------------
It follows the abstract persistence model of ALICE (Pillai et al., OSDI '14) and SQLite's crash
VFS (``src/test6.c``), and keeps, per inode:

* a **file**: its *durable* content (as the last ``fsync``/``fdatasync`` of it left it) and its
  *pending* operations since, in order: writes (offset and bytes) and truncations;
* a **directory**: its *durable* entries (as the last `fsync_dir` of it left them) and its
  pending entry operations since: link (a create, a ``mkdir``, the target half of a rename
  across directories), unlink, and rename within the directory.

A crash image is the durable state of every inode plus, for each inode independently, a prefix
of its pending operations:

* the first operation left out of a file's prefix, if it is a write, may be **torn**: a prefix
  of its bytes, or a prefix followed by zeros up to its full length (the new size reached the
  disk before the data), or by garbage (ALICE: an append is "grow with zeros, garbage, data");
* optionally (``pages=True``) a file may instead keep all its operations with random 4 KiB pages
  of the changed region back at their durable content (zeros past the durable end): writes that
  span pages are not atomic, and the new size may persist before the data (ext4
  ``data=writeback``, SQLite's crash tests at sector granularity);
* the first operation left out of a directory's prefix, if it is a rename, may be **half done**:
  its target's old entry gone and the source still there (ALICE splits a rename into "unlink
  destination, unlink source, link destination");
* an entry that no `fsync_dir` covered may be absent, which drops its whole subtree, whatever
  its file's own fsyncs made durable (RELIABILITY A3).

Syncs are barriers for their own inode only: nothing orders two files, or a file and its
directory, unless a sync that returned before says so, so every combination of per-inode
prefixes is a legal state. Between two syncs the durable state does not change and the pending
lists only grow, so the crash states just before a sync include every state between it and the
previous sync; `CrashSimFS.points` therefore names the trace positions just before each sync,
plus the end.

Simplifications
---------------
* Only operations made through this object are modelled. Files the store creates with plain
  ``os`` calls (lease lock files, the SQLite index and its WAL) are not in the model and are
  absent from every image: lock files are recreated on demand and the index is a projection
  that a store rebuilds from the rollouts (its own crash safety is SQLite's).
* The real ``fsync`` is never called: durability is the model's, so the tests run at memory
  speed (and the real disk's state after a test means nothing).
* Renames across directories become an unlink in one directory and a link in the other, each
  persisted independently; hard links, ``O_TRUNC`` of an existing file's durable data beyond
  the truncation, and directory renames are not used by the store and only modelled simply.
* Garbage is random bytes from a seeded generator, without newlines: a complete line that
  is not a record (and not zero-filled) is damage by design, never a torn tail (a flipped bit
  must not pass for a crash, `threadlog.store.embedded.rollout`). Stale-block garbage needs ext4
  ``data=writeback``; the file systems threadlog supports leave a prefix, or zeros.
* Metadata other than names and content (modes, times, sizes of holes) is not modelled;
  images are materialized with the store's own modes (folders 0700, files 0600).

Everything random comes from a `random.Random` the caller passes, so a trace and a seed give the
same images every time. ``threadlog.testing`` may do I/O; the pure core (`threadlog.model`) does
not, and this module does not touch it.
"""

from __future__ import annotations

import copy
import errno
import linecache
import os
import random
import sys
import threading
from collections import Counter
from dataclasses import field
from typing import TYPE_CHECKING, Literal

from threadlog._dataclass import dataclass
from threadlog.store._fileops import FileOps

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

__all__ = [
    "CrashSimFS",
    "CrashState",
    "Disk",
    "Link",
    "Mark",
    "Op",
    "Rename",
    "SimulatedCrash",
    "Site",
    "Sync",
    "Truncate",
    "Unlink",
    "Write",
]

PAGE = 4096
ROOT = 0
"""The inode number of the simulated tree's root directory."""

Tear = Literal["", "prefix", "zeros", "garbage", "pages"]
SyncCall = Literal["fsync", "fdatasync", "fsync_dir"]


# -- the trace ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Write:
    """``data`` written to file ``ino`` at ``offset``."""

    ino: int
    offset: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Truncate:
    """File ``ino`` cut (or extended with zeros) to ``length`` bytes."""

    ino: int
    length: int


@dataclass(frozen=True, slots=True)
class Link:
    """Entry ``name`` of directory ``dir`` made to point at ``ino``; ``new`` says that the
    inode is created by this operation (a file or a directory), None for an existing one."""

    dir: int
    name: str
    ino: int
    new: Literal["file", "dir"] | None = None


@dataclass(frozen=True, slots=True)
class Unlink:
    """Entry ``name`` of directory ``dir`` removed."""

    dir: int
    name: str


@dataclass(frozen=True, slots=True)
class Rename:
    """Entry ``src`` of directory ``dir`` renamed to ``dst`` (replacing it), in one directory."""

    dir: int
    src: str
    dst: str
    ino: int


@dataclass(frozen=True, slots=True)
class Sync:
    """``call`` made inode ``ino`` durable, or, with ``skipped``, would have (the call site
    was disabled by a mutation test); ``site`` is the caller's ``file:line (function)``."""

    ino: int
    call: SyncCall
    site: str
    path: str
    skipped: bool = False


@dataclass(frozen=True, slots=True)
class Mark:
    """A label in the trace (an acknowledgement, a phase of the workload); no effect."""

    label: str


Op = Write | Truncate | Link | Unlink | Rename | Sync | Mark
FileOp = Write | Truncate
DirOp = Link | Unlink | Rename


class SimulatedCrash(OSError):
    """Raised by every operation once the simulated machine has crashed (see `crash_at`)."""

    def __init__(self, what: str) -> None:
        super().__init__(errno.EIO, f"simulated crash ({what})")


# -- the model ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _File:
    durable: bytes = b""
    live: bytearray = field(default_factory=bytearray)
    pending: list[FileOp] = field(default_factory=list)


@dataclass(slots=True)
class _Dir:
    durable: dict[str, int] = field(default_factory=dict)
    live: dict[str, int] = field(default_factory=dict)
    pending: list[DirOp] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class CrashState:
    """One legal crash image, as choices over a `Disk`'s pending operations.

    ``files`` maps an inode to ``(kept, tear, cut)``: the first ``kept`` pending operations
    persist, and the next one, a write, persists torn as ``tear`` after ``cut`` of its bytes
    (``"pages"``: every operation kept, then pages lost). ``dirs`` maps an inode to ``(kept,
    half)``: the next operation, a rename, half done. Inodes not named keep none of their
    pending operations, unless ``everything`` (the image of a process crash: all of them).
    """

    label: str
    files: dict[int, tuple[int, Tear, int]] = field(default_factory=dict)
    dirs: dict[int, tuple[int, bool]] = field(default_factory=dict)
    seed: int = 0
    everything: bool = False

    def describe(self, disk: Disk) -> str:
        """A readable account of what the state keeps and loses, path by path."""
        parts = [self.label]
        for ino, node in sorted(disk._nodes.items()):
            if not node.pending:
                continue
            name = disk.path_of(ino) or f"<inode {ino}, unlinked>"
            total = len(node.pending)
            if isinstance(node, _File):
                kept, tear, cut = self.files.get(ino, (total if self.everything else 0, "", 0))
                torn = f", next torn ({tear} after {cut} bytes)" if tear else ""
                if tear == "pages":
                    torn = ", then pages lost"
                parts.append(f"{name}: {kept}/{total} ops{torn}")
            else:
                kept, half = self.dirs.get(ino, (total if self.everything else 0, False))
                parts.append(
                    f"{name}/: {kept}/{total} entry ops{', next half done' if half else ''}"
                )
        return "; ".join(parts)


class Disk:
    """The modelled tree: durable and pending state of every inode (see the module docstring).

    A `Disk` is mutated by `apply`; a `CrashSimFS` keeps one for the live run and replays its
    trace into a copy of its starting `Disk` to materialize crash images at earlier points.
    """

    def __init__(self) -> None:
        self._nodes: dict[int, _File | _Dir] = {ROOT: _Dir()}
        self._next = ROOT + 1

    @classmethod
    def from_directory(cls, root: str) -> Disk:
        """A disk holding ``root``'s current tree, all of it durable (symlinks are skipped)."""
        disk = cls()

        def load(path: str, ino: int) -> None:
            node = disk._nodes[ino]
            assert isinstance(node, _Dir)
            for entry in sorted(os.scandir(path), key=lambda e: e.name):
                child = disk._new()
                if entry.is_dir(follow_symlinks=False):
                    disk._nodes[child] = _Dir()
                    load(entry.path, child)
                elif entry.is_file(follow_symlinks=False):
                    with open(entry.path, "rb") as f:
                        data = f.read()
                    disk._nodes[child] = _File(data, bytearray(data))
                else:
                    continue
                node.durable[entry.name] = child
                node.live[entry.name] = child

        load(root, ROOT)
        return disk

    def _new(self) -> int:
        ino, self._next = self._next, self._next + 1
        return ino

    def copy(self) -> Disk:
        return copy.deepcopy(self)

    # -- the live tree ---------------------------------------------------------------------

    def lookup(self, parts: Iterable[str]) -> int | None:
        """The inode at a path (components relative to the root) in the live tree."""
        ino = ROOT
        for part in parts:
            node = self._nodes.get(ino)
            if not isinstance(node, _Dir):
                return None
            child = node.live.get(part)
            if child is None:
                return None
            ino = child
        return ino

    def is_dir(self, ino: int) -> bool:
        return isinstance(self._nodes.get(ino), _Dir)

    def path_of(self, ino: int) -> str | None:
        """A live path of an inode, relative to the root ("" for the root itself)."""
        if ino == ROOT:
            return ""
        for parent, node in self._nodes.items():
            if isinstance(node, _Dir):
                for name, child in node.live.items():
                    if child == ino:
                        above = self.path_of(parent)
                        return None if above is None else os.path.join(above, name)
        return None

    def live_files(self) -> dict[str, bytes]:
        """Every file of the live tree: relative path → content."""
        out: dict[str, bytes] = {}

        def walk(ino: int, path: str) -> None:
            node = self._nodes[ino]
            assert isinstance(node, _Dir)
            for name, child in node.live.items():
                sub = os.path.join(path, name)
                target = self._nodes[child]
                if isinstance(target, _Dir):
                    walk(child, sub)
                else:
                    out[sub] = bytes(target.live)

        walk(ROOT, "")
        return out

    def pending_count(self) -> int:
        return sum(len(node.pending) for node in self._nodes.values())

    # -- applying operations ---------------------------------------------------------------

    def next_ino(self) -> int:
        """The inode number the next created file or directory gets."""
        return self._next

    def apply(self, op: Op) -> None:
        """Apply one traced operation to the live tree (and, for a sync, the durable one)."""
        if isinstance(op, Write | Truncate):
            node = self._nodes[op.ino]
            assert isinstance(node, _File)
            _apply_file_op(node.live, op)
            node.pending.append(op)
        elif isinstance(op, Link | Unlink | Rename):
            if isinstance(op, Link) and op.new is not None:
                assert op.ino == self._next, "inodes are created in trace order"
                self._next += 1
                self._nodes[op.ino] = _Dir() if op.new == "dir" else _File()
            directory = self._nodes[op.dir]
            assert isinstance(directory, _Dir)
            _apply_dir_op(directory.live, op)
            directory.pending.append(op)
        elif isinstance(op, Sync):
            if op.skipped:
                return
            target = self._nodes[op.ino]
            if isinstance(target, _File):
                target.durable = bytes(target.live)
            else:
                target.durable = dict(target.live)
            target.pending.clear()

    # -- crash states ----------------------------------------------------------------------

    def durable_state(self, label: str = "durable only") -> CrashState:
        """The harshest image: nothing that was not synced."""
        return CrashState(label)

    def live_state(self, label: str = "process crash") -> CrashState:
        """The image a kill -9 leaves (every operation reached the page cache)."""
        return CrashState(label, everything=True)

    def torn_state(self, label: str = "every write but the last of each file") -> CrashState:
        """Every pending operation persists except each file's last, which, if it is a
        write, persists torn after half its bytes (directories: everything persists)."""
        files: dict[int, tuple[int, Tear, int]] = {}
        dirs: dict[int, tuple[int, bool]] = {}
        for ino, node in self._nodes.items():
            if isinstance(node, _File) and node.pending:
                last = node.pending[-1]
                half = len(last.data) // 2 if isinstance(last, Write) else 0
                files[ino] = (len(node.pending) - 1, "prefix", half)
            elif isinstance(node, _Dir) and node.pending:
                dirs[ino] = (len(node.pending), False)
        return CrashState(label, files, dirs)

    def pages_state(self, seed: int, label: str = "pages lost") -> CrashState:
        """Every pending operation persists, then each changed page of a file is lost with
        probability 1/2 (the ``pages`` mode of the module docstring; directories: all kept)."""
        files: dict[int, tuple[int, Tear, int]] = {}
        dirs: dict[int, tuple[int, bool]] = {}
        for ino, node in self._nodes.items():
            if isinstance(node, _File) and node.pending:
                files[ino] = (len(node.pending), "pages", 0)
            elif isinstance(node, _Dir) and node.pending:
                dirs[ino] = (len(node.pending), False)
        return CrashState(label, files, dirs, seed)

    def random_state(self, rng: random.Random, label: str, *, pages: bool = False) -> CrashState:
        """A random legal crash image (choices favour the extremes: none or all kept)."""
        files: dict[int, tuple[int, Tear, int]] = {}
        dirs: dict[int, tuple[int, bool]] = {}
        for ino in sorted(self._nodes):
            node = self._nodes[ino]
            total = len(node.pending)
            if not total:
                continue
            roll = rng.random()
            kept = 0 if roll < 0.3 else total if roll < 0.55 else rng.randint(0, total)
            if isinstance(node, _File):
                tear: Tear = ""
                cut = 0
                following = node.pending[kept] if kept < total else None
                if isinstance(following, Write) and following.data and rng.random() < 0.6:
                    tear = rng.choice(("prefix", "zeros", "garbage"))
                    cut = rng.randrange(len(following.data))
                elif pages and rng.random() < 0.25:
                    kept, tear = total, "pages"
                files[ino] = (kept, tear, cut)
            else:
                following_dir = node.pending[kept] if kept < total else None
                half = isinstance(following_dir, Rename) and rng.random() < 0.5
                dirs[ino] = (kept, half)
        return CrashState(label, files, dirs, rng.getrandbits(32))

    def materialize(self, state: CrashState, dest: str) -> None:
        """Write the image ``state`` describes into the (empty or missing) directory ``dest``."""
        os.makedirs(dest, 0o700, exist_ok=True)
        seen: set[int] = set()

        def walk(ino: int, path: str) -> None:
            if ino in seen:
                return  # a directory reachable twice (not made by the store): once is enough
            seen.add(ino)
            for name, child in sorted(self._entries(ino, state).items()):
                node = self._nodes[child]
                sub = os.path.join(path, name)
                if isinstance(node, _Dir):
                    os.mkdir(sub, 0o700)
                    walk(child, sub)
                else:  # the store's modes (not modelled: see Simplifications)
                    fd = os.open(sub, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with open(fd, "wb") as f:
                        f.write(self._content(child, state))

        walk(ROOT, dest)

    def _entries(self, ino: int, state: CrashState) -> dict[str, int]:
        node = self._nodes[ino]
        assert isinstance(node, _Dir)
        total = len(node.pending)
        kept, half = state.dirs.get(ino, (total if state.everything else 0, False))
        entries = dict(node.durable)
        for op in node.pending[:kept]:
            _apply_dir_op(entries, op)
        following = node.pending[kept] if kept < total else None
        if half and isinstance(following, Rename):
            entries.pop(following.dst, None)
        return entries

    def _content(self, ino: int, state: CrashState) -> bytes:
        node = self._nodes[ino]
        assert isinstance(node, _File)
        total = len(node.pending)
        kept, tear, cut = state.files.get(ino, (total if state.everything else 0, "", 0))
        buf = bytearray(node.durable)
        for op in node.pending[:kept]:
            _apply_file_op(buf, op)
        rng = random.Random(f"{state.seed}/{ino}")
        following = node.pending[kept] if kept < total else None
        if tear in ("prefix", "zeros", "garbage") and isinstance(following, Write):
            rest = len(following.data) - cut
            piece = following.data[:cut]
            if tear == "zeros":
                piece += bytes(rest)
            elif tear == "garbage":
                piece += rng.randbytes(rest).replace(b"\n", b"?")
            _apply_file_op(buf, Write(ino, following.offset, piece))
        elif tear == "pages":
            old = node.durable
            for page in range(0, len(buf), PAGE):
                end = min(page + PAGE, len(buf))
                before = old[page:end].ljust(end - page, b"\0")
                if buf[page:end] != before and rng.random() < 0.5:
                    buf[page:end] = before
        return bytes(buf)


def _apply_file_op(buf: bytearray, op: FileOp) -> None:
    if isinstance(op, Write):
        end = op.offset + len(op.data)
        if len(buf) < op.offset:
            buf.extend(bytes(op.offset - len(buf)))
        buf[op.offset : end] = op.data
    elif len(buf) > op.length:
        del buf[op.length :]
    else:
        buf.extend(bytes(op.length - len(buf)))


def _apply_dir_op(entries: dict[str, int], op: DirOp) -> None:
    if isinstance(op, Link):
        entries[op.name] = op.ino
    elif isinstance(op, Unlink):
        entries.pop(op.name, None)
    else:
        ino = entries.pop(op.src, None)
        if ino is not None:
            entries[op.dst] = ino


# -- the file operations -----------------------------------------------------------------------

_HERE = os.path.normcase(os.path.abspath(__file__))
_PACKAGE = os.path.dirname(os.path.dirname(_HERE))


@dataclass(frozen=True, slots=True)
class Site:
    """Where a sync was called from: the first frame outside this module."""

    filename: str
    line: int
    function: str
    first_line: int
    """The line of the function's ``def`` (to tell apart identical calls in one function)."""

    def __str__(self) -> str:
        return f"{self.short}:{self.line} ({self.function})"

    @property
    def short(self) -> str:
        """The file name relative to the ``threadlog`` package, when it is in it."""
        if self.filename.startswith(_PACKAGE + os.sep):
            return os.path.relpath(self.filename, _PACKAGE)
        return self.filename

    @property
    def key(self) -> str:
        """A name that survives edits elsewhere in the file: ``file function: source text``,
        with ``#n`` when the same text occurs more than once in the function."""
        text = linecache.getline(self.filename, self.line).strip()
        same = [
            n
            for n in range(self.first_line, self.line + 1)
            if linecache.getline(self.filename, n).strip() == text
        ]
        nth = f" #{len(same)}" if len(same) > 1 else ""
        return f"{self.short} {self.function}: {text}{nth}"


def _call_site() -> Site:
    """The first caller outside this module."""
    frame = sys._getframe(1)
    while frame.f_back is not None and os.path.normcase(frame.f_code.co_filename) == _HERE:
        frame = frame.f_back
    code = frame.f_code
    return Site(code.co_filename, frame.f_lineno, code.co_qualname, code.co_firstlineno)


class CrashSimFS(FileOps):
    """File operations on a real directory, traced into a `Disk` that knows what survives.

    Args:
        root: an existing directory; operations on paths under it are modelled (paths outside
            it are performed but not modelled).
        disk: the model of ``root``'s tree as it is now (default: read from the directory,
            everything durable).

    Attributes:
        trace: every modelled operation, in the order it was performed.
        sites: how many times each sync call site ran.
        disabled_sites: sync call sites to turn into no-ops (the mutation test of D4); their
            calls are traced as skipped `Sync` operations.
        untracked: operations on paths under ``root`` that the model does not know (a file
            created behind the seam's back); a test should expect none.
    """

    def __init__(self, root: str, disk: Disk | None = None) -> None:
        self.root = os.path.abspath(root)
        if not os.path.isdir(self.root):
            raise FileNotFoundError(errno.ENOENT, "no such directory", self.root)
        self.disk = disk if disk is not None else Disk.from_directory(self.root)
        self._initial = self.disk.copy()
        self.trace: list[Op] = []
        self.sites: Counter[Site] = Counter()
        self.disabled_sites: set[Site] = set()
        self.untracked: list[str] = []
        self._fds: dict[int, int] = {}
        self._lock = threading.RLock()
        self._crash_when: Callable[[str, str | None], bool] | None = None
        self.crashed = False

    # -- bookkeeping -----------------------------------------------------------------------

    def _parts(self, path: str) -> list[str] | None:
        """``path``'s components below the root, or None if it is not under the root."""
        full = os.path.abspath(path)
        if full == self.root:
            return []
        if not full.startswith(self.root + os.sep):
            return None
        return full[len(self.root) + 1 :].split(os.sep)

    def _record(self, op: Op) -> None:
        self.disk.apply(op)
        self.trace.append(op)

    def _check(self, call: str, path: str | None) -> None:
        """Raise `SimulatedCrash` if the machine is down, or goes down at this operation."""
        if self.crashed:
            raise SimulatedCrash(f"{call} after the crash")
        if self._crash_when is not None and self._crash_when(call, path):
            self.crashed = True
            raise SimulatedCrash(f"at {call} {path or ''}".strip())

    def _fd_path(self, fd: int) -> str | None:
        ino = self._fds.get(fd)
        if ino is None:
            return None
        rel = self.disk.path_of(ino)
        return None if rel is None else os.path.join(self.root, rel)

    def crash_at(self, when: Callable[[str, str | None], bool]) -> None:
        """Crash the machine at the first operation for which ``when(call, path)`` is true.

        That operation is not performed; it and every later one (except ``close``) raise
        `SimulatedCrash`, and nothing more is traced. ``call`` is the `FileOps` method name;
        ``path`` the file's absolute path (None when unknown).
        """
        with self._lock:
            self._crash_when = when

    def mark(self, label: str) -> int:
        """Add a label to the trace; returns its position (what was traced before it)."""
        with self._lock:
            self.trace.append(Mark(label))
            return len(self.trace) - 1

    def position(self) -> int:
        """How many operations were traced so far."""
        with self._lock:
            return len(self.trace)

    # -- FileOps ---------------------------------------------------------------------------

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        with self._lock:
            self._check("open", os.path.abspath(path))
            parts = self._parts(path)
            before = self.disk.lookup(parts) if parts else None
            parent = self.disk.lookup(parts[:-1]) if parts else None
            fd = super().open(path, flags, mode)
            if parts is None:
                return fd
            if before is None and parent is not None and flags & os.O_CREAT:
                ino = self.disk.next_ino()
                self._record(Link(parent, parts[-1], ino, "file"))
                before = ino
            elif before is None:
                self.untracked.append(f"open {path}")
                return fd
            elif flags & os.O_TRUNC:
                self._record(Truncate(before, 0))
            self._fds[fd] = before
            return fd

    def write(self, fd: int, data: bytes | memoryview) -> int:
        with self._lock:
            self._check("write", self._fd_path(fd))
            n = super().write(fd, data)
            ino = self._fds.get(fd)
            if ino is not None and n > 0:
                offset = os.lseek(fd, 0, os.SEEK_CUR) - n
                self._record(Write(ino, offset, bytes(data[:n])))
            return n

    def _sync(self, call: SyncCall, ino: int | None, path: str | None) -> None:
        site = _call_site()
        self.sites[site] += 1
        if ino is None:
            if path is not None and self._parts(path) is not None:
                self.untracked.append(f"{call} {path}")
            return
        rel = self.disk.path_of(ino) or f"<inode {ino}>"
        skipped = site in self.disabled_sites
        self._record(Sync(ino, call, str(site), rel, skipped))

    def fsync(self, fd: int) -> None:
        with self._lock:
            path = self._fd_path(fd)
            self._check("fsync", path)
            os.fstat(fd)  # a closed descriptor still fails as it would
            self._sync("fsync", self._fds.get(fd), path)

    def fdatasync(self, fd: int) -> None:
        with self._lock:
            path = self._fd_path(fd)
            self._check("fdatasync", path)
            os.fstat(fd)
            self._sync("fdatasync", self._fds.get(fd), path)

    def fsync_dir(self, path: str) -> None:
        with self._lock:
            full = os.path.abspath(path)
            self._check("fsync_dir", full)
            if not os.path.isdir(full):
                raise FileNotFoundError(errno.ENOENT, "no such directory", full)
            parts = self._parts(full)
            ino = self.disk.lookup(parts) if parts is not None else None
            self._sync("fsync_dir", ino, full)

    def ftruncate(self, fd: int, length: int) -> None:
        with self._lock:
            self._check("ftruncate", self._fd_path(fd))
            super().ftruncate(fd, length)
            ino = self._fds.get(fd)
            if ino is not None:
                self._record(Truncate(ino, length))

    def rename(self, src: str, dst: str) -> None:
        with self._lock:
            self._check("rename", os.path.abspath(src))
            sparts, dparts = self._parts(src), self._parts(dst)
            ino = self.disk.lookup(sparts) if sparts else None
            super().rename(src, dst)
            if sparts is None or dparts is None or not sparts or not dparts or ino is None:
                if sparts is not None or dparts is not None:
                    self.untracked.append(f"rename {src} {dst}")
                return
            sdir = self.disk.lookup(sparts[:-1])
            ddir = self.disk.lookup(dparts[:-1])
            assert sdir is not None and ddir is not None
            if sdir == ddir:
                self._record(Rename(sdir, sparts[-1], dparts[-1], ino))
            else:
                self._record(Link(ddir, dparts[-1], ino))
                self._record(Unlink(sdir, sparts[-1]))

    def unlink(self, path: str) -> None:
        with self._lock:
            self._check("unlink", os.path.abspath(path))
            super().unlink(path)
            parts = self._parts(path)
            if not parts:
                return
            parent = self.disk.lookup(parts[:-1])
            if parent is None or self.disk.lookup(parts) is None:
                self.untracked.append(f"unlink {path}")
                return
            self._record(Unlink(parent, parts[-1]))

    def mkdir(self, path: str) -> None:
        with self._lock:
            self._check("mkdir", os.path.abspath(path))
            super().mkdir(path)
            parts = self._parts(path)
            if not parts:
                return
            parent = self.disk.lookup(parts[:-1])
            if parent is None:
                self.untracked.append(f"mkdir {path}")
                return
            self._record(Link(parent, parts[-1], self.disk.next_ino(), "dir"))

    def close(self, fd: int) -> None:
        with self._lock:
            self._fds.pop(fd, None)
            super().close(fd)

    # -- after the run ---------------------------------------------------------------------

    def points(self) -> list[int]:
        """Trace positions worth crashing at: just before each sync (skipped ones too), and
        the end. Each includes every crash state since the previous sync (module docstring)."""
        with self._lock:
            found = [i for i, op in enumerate(self.trace) if isinstance(op, Sync)]
            return [*found, len(self.trace)]

    def replay(self, points: Iterable[int]) -> Iterator[tuple[int, Disk]]:
        """The disk as it was at each of ``points`` (trace positions), in order.

        The same `Disk` object is yielded each time, advanced: use it before the next one.
        """
        disk = self._initial.copy()
        done = 0
        for point in sorted(set(points)):
            for op in self.trace[done:point]:
                disk.apply(op)
            done = max(done, point)
            yield point, disk

    def mirror_errors(self) -> list[str]:
        """Differences between the modelled live tree and the real directory (should be none:
        a difference means an operation bypassed the seam or the model is wrong)."""
        errors = []
        for rel, content in sorted(self.disk.live_files().items()):
            path = os.path.join(self.root, rel)
            try:
                with open(path, "rb") as f:
                    real = f.read()
            except FileNotFoundError:
                errors.append(f"{rel}: in the model, not on disk")
                continue
            if real != content:
                errors.append(f"{rel}: {len(content)} bytes in the model, {len(real)} on disk")
        return errors

    def after_kill(self, new_root: str) -> CrashSimFS:
        """The machine after a process crash, moved to ``new_root``: the live tree (what the
        page cache holds) is copied there, and the new object's model keeps what was pending
        pending, so a later power loss can still lose it. Lock files and the index are left
        behind (see Simplifications)."""
        with self._lock:
            disk = self.disk.copy()
        disk.materialize(disk.live_state(), new_root)
        return CrashSimFS(new_root, disk)

    def after_power_loss(self, new_root: str, state: CrashState) -> CrashSimFS:
        """The machine after a power loss leaving ``state`` (a state of the current disk),
        moved to ``new_root``, where everything is durable."""
        with self._lock:
            self.disk.materialize(state, new_root)
        return CrashSimFS(new_root)
