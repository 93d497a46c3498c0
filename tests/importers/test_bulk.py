"""The bulk path: a file seen for the first time is written as a whole new thread.

What it writes must be what appending record by record writes (the same records, refused
ones reported the same way), verify, index as a rebuild would, and stay correct when the
import is killed or its commit fails: the ledger names a file only once its threads are
durable, and a thread is whole or absent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threadlog import open_store
from threadlog.errors import StorageError
from threadlog.importers import SOURCES, ImportReport, import_file, import_paths, source_format
from threadlog.importers._ledger import Ledger
from threadlog.store._fileops import FileOps
from threadlog.store.embedded import EmbeddedStore

from ._helpers import FIXTURES
from .test_robustness import _fixture_lines, _line

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _threads(store: Any, report: ImportReport) -> list[list[tuple[Any, ...]]]:
    """Every imported thread's records, as tuples in which thread ids and root ids (chosen
    at random when a thread is created) are replaced by their place in the report."""
    threads = [t for f in report.files for t in [f.thread, *f.children] if t]
    names: dict[str, str] = {}
    logs = []
    for i, thread in enumerate(dict.fromkeys(threads)):
        records = store.read(thread)
        names[thread] = f"T{i}"
        names[records[0].id] = f"R{i}"
        logs.append(records)
    out = []
    for records in logs:
        text = json.dumps(
            [(r.ord, r.type, r.id, r.parent, r.data) for r in records], sort_keys=True
        )
        for real, name in names.items():
            text = text.replace(real, name)
        out.append([tuple(r) for r in json.loads(text)])
    return out


def _problems(report: ImportReport) -> list[tuple[str, str, int, str]]:
    return [
        (os.path.basename(f.path), f.status, p.line, p.kind)
        for f in report.files
        for p in f.problems
    ]


def _record_by_record(store: EmbeddedStore, fmt: str, paths: list[str]) -> ImportReport:
    """The same import through the store's append path (no batch of new threads)."""
    from threadlog.importers._core import walk

    ledger = Ledger.open(store)
    report = ImportReport()
    try:
        for path in walk(paths, source_format(fmt)):
            report.files.append(import_file(store, source_format(fmt), path, ledger))
        store.flush()
        ledger.save()
    finally:
        ledger.close()
    return report


@pytest.mark.parametrize("fmt", SOURCES)
def test_bulk_writes_what_appending_writes(tmp_path: Path, fmt: str) -> None:
    source = str(FIXTURES / fmt)
    with open_store(tmp_path / "bulk") as bulk, open_store(tmp_path / "slow") as slow:
        assert isinstance(bulk, EmbeddedStore) and isinstance(slow, EmbeddedStore)
        fast = import_paths(bulk, source_format(fmt), [source])
        slow_report = _record_by_record(slow, fmt, [source])
        assert [f.status for f in fast.files] == ["imported"] * len(fast.files)
        assert _threads(bulk, fast) == _threads(slow, slow_report)
        assert _problems(fast) == _problems(slow_report)
        assert fast.records == slow_report.records > 0
        for thread in bulk.thread_ids():
            assert bulk.verify(thread).ok
            bulk.state(thread)
        # the index it was given is the one a rebuild from the rollouts makes
        indexed = bulk.index.dump()
        bulk.rebuild()
        assert bulk.index.dump() == indexed
        assert sorted(t.turns for t in bulk.index.threads()) == sorted(
            t.turns for t in slow.index.threads()
        )
        assert sorted(t.tool_calls for t in bulk.index.threads()) == sorted(
            t.tool_calls for t in slow.index.threads()
        )


@pytest.mark.parametrize("fmt", SOURCES)
def test_a_rerun_is_a_no_op_even_without_the_ledger(tmp_path: Path, fmt: str) -> None:
    source = str(FIXTURES / fmt)
    with open_store(tmp_path / "store") as store:
        first = import_paths(store, source_format(fmt), [source])
        ords = {t: store.read(t)[-1].ord for t in store.thread_ids()}
        again = import_paths(store, source_format(fmt), [source])
        assert again.records == 0
        assert {f.status for f in again.files} == {"unchanged"}
        os.unlink(tmp_path / "store" / "imports" / "ledger.json")
        cold = import_paths(store, source_format(fmt), [source])
        assert cold.records == 0
        assert {t: store.read(t)[-1].ord for t in store.thread_ids()} == ords
        assert [f.thread for f in cold.files] == [f.thread for f in first.files]


def test_a_grown_file_continues_its_bulk_written_thread(tmp_path: Path, sources: Path) -> None:
    [path] = sorted((sources / "pi").rglob("*.jsonl"))[:1]
    with open_store(tmp_path / "store") as store:
        [first] = import_paths(store, source_format("pi"), [str(path)]).files
        last = store.read(first.thread)[-1]
        entry = {
            "type": "message",
            "id": "zz000001",
            "parentId": None,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "message": {"role": "user", "content": "and one more thing"},
        }
        with path.open("a") as f:
            f.write(json.dumps(entry) + "\n")
        [grown] = import_paths(store, source_format("pi"), [str(path)]).files
        assert grown.status == "grown" and grown.thread == first.thread and grown.records > 0
        assert store.read(first.thread)[last.ord].prev == last.hash
        assert store.verify(first.thread).ok


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    fmt=st.sampled_from(SOURCES),
    extra=st.lists(_line, max_size=12),
    picks=st.lists(st.integers(0, 60), max_size=10),
)
def test_any_lines_write_what_appending_writes(
    tmp_path_factory: pytest.TempPathFactory, fmt: str, extra: list[str], picks: list[int]
) -> None:
    """Lines of any shape (repeated ids, orphan results, wrong fields): the records the store
    refuses one by one are refused the same way in bulk, and the thread verifies."""
    tmp = tmp_path_factory.mktemp("any")
    known = _fixture_lines(fmt)
    lines = [known[i % len(known)] for i in picks] + extra
    path = tmp / f"rollout-2026-01-01T00-00-00-{len(lines)}.jsonl"
    path.write_text("".join(line.replace("\n", " ") + "\n" for line in lines))
    with open_store(tmp / "bulk") as bulk, open_store("memory://") as slow:
        fast = import_paths(bulk, source_format(fmt), [str(path)])
        slow_report = import_paths(slow, source_format(fmt), [str(path)])
        assert [f.status for f in fast.files] == [f.status for f in slow_report.files]
        assert _problems(fast) == _problems(slow_report)
        assert _threads(bulk, fast) == _threads(slow, slow_report)
        for thread in bulk.thread_ids():
            assert bulk.verify(thread).ok
            bulk.state(thread)


class _FailingSync(FileOps):
    """An fsync of a new thread's temporary file fails."""

    def fsync(self, fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        if f"{os.sep}threads{os.sep}" in name and name.endswith(".tmp"):
            raise OSError(5, "Input/output error")
        super().fsync(fd)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_a_failed_commit_writes_nothing_and_the_ledger_forgets_it(tmp_path: Path) -> None:
    source = str(FIXTURES / "claude-code")
    with EmbeddedStore(tmp_path / "store", fops=_FailingSync()) as store:
        with pytest.raises(StorageError, match="cannot import"):
            import_paths(store, source_format("claude-code"), [source])
        assert store.thread_ids() == []
    saved = tmp_path / "store" / "imports" / "ledger.json"
    assert not saved.exists() or json.loads(saved.read_bytes())["files"] == {}
    leftovers = [f for _, _, fs in os.walk(tmp_path / "store" / "threads") for f in fs]
    assert leftovers == []
    with open_store(tmp_path / "store") as store:
        report = import_paths(store, source_format("claude-code"), [source])
        assert {f.status for f in report.files} == {"imported"}
        for thread in store.thread_ids():
            assert store.verify(thread).ok


_KILLED = """
import os, signal, sys
from threadlog import open_store
from threadlog.importers import _core, import_paths, source_format
from threadlog.importers._ledger import Ledger
from threadlog.store.embedded.transfer import NewThreads

_core.FLUSH_FILES = 1  # a commit (and a ledger save) after every file
where, store_dir, source = sys.argv[1:]
commits = saves = 0
commit, save = NewThreads.commit, Ledger.save

def killing_commit(self):
    global commits
    commits += 1
    if where == "commit" and commits == 2 and len(self):
        os.kill(os.getpid(), signal.SIGKILL)  # the second file written, not committed
    return commit(self)

def killing_save(self):
    global saves
    saves += 1
    if where == "save" and saves == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # the second file committed, not in the ledger
    return save(self)

NewThreads.commit, Ledger.save = killing_commit, killing_save
with open_store(store_dir) as store:
    import_paths(store, source_format("pi"), [source])
"""


@pytest.mark.parametrize("where", ["commit", "save"])
def test_a_kill_midway_leaves_whole_threads_and_a_rerun_completes(
    tmp_path: Path, where: str
) -> None:
    source = str(FIXTURES / "pi")
    store_dir = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": SRC}
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_KILLED), where, str(store_dir), source],
        env=env,
        capture_output=True,
    )
    assert run.returncode == -9, run.stderr.decode()
    with open_store(tmp_path / "clean") as clean:
        expected = import_paths(clean, source_format("pi"), [source])
        want = _threads(clean, expected)
    with open_store(store_dir) as store:
        survivors = store.thread_ids()
        assert len(survivors) == (1 if where == "commit" else 2)
        for thread in survivors:
            assert store.verify(thread).ok
        temps = [f for _, _, fs in os.walk(store_dir / "threads") for f in fs if f.endswith(".tmp")]
        assert temps == []  # swept: the killed writer's half is no thread
        report = import_paths(store, source_format("pi"), [source])
        assert len(store.thread_ids()) == len(expected.files)
        assert _threads(store, report) == want
        again = import_paths(store, source_format("pi"), [source])
        assert again.records == 0


_KILLED_WITH_WORKERS = """
import os, signal, sys
from threadlog import open_store
from threadlog.importers import _core, import_paths, source_format
from threadlog.store.embedded.transfer import NewThreads

_core.FLUSH_FILES = _core.PARALLEL_FILES = 1  # workers for any import; a commit a file
store_dir, source = sys.argv[1:]
commits = 0
commit = NewThreads.commit

def killing_commit(self):
    global commits
    commits += 1
    if commits == 2 and len(self):
        os.kill(os.getpid(), signal.SIGKILL)  # workers' files written, one batch not taken
    return commit(self)

NewThreads.commit = killing_commit
with open_store(store_dir) as store:
    import_paths(store, source_format("claude-code"), [source], workers=2)
"""


def _wait_for_processes_marked(mark: str, timeout: float = 60.0) -> None:
    """Wait until no process carries ``mark`` in its environment (a killed import's workers,
    which finish the file in hand and exit)."""
    import time

    deadline = time.monotonic() + timeout
    needle = f"THREADLOG_TEST_MARK={mark}".encode()
    while True:
        alive = []
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        if needle in f.read().split(b"\0"):
                            alive.append(pid)
                except OSError:
                    pass  # gone, or not ours
        if not alive:
            return
        assert time.monotonic() < deadline, f"the killed import's workers live on: {alive}"
        time.sleep(0.05)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the workers in /proc")
def test_an_import_killed_while_workers_write_leaves_whole_threads_and_no_files(
    tmp_path: Path,
) -> None:
    """The importing process killed with its workers' files written and not all taken: its
    workers exit (they would wait for work for ever), the committed threads are whole, the
    rest absent, every temporary file is swept (named for the dead importer), and a re-run
    imports exactly what a clean import does."""
    import uuid

    source = str(FIXTURES / "claude-code")
    store_dir = tmp_path / "store"
    mark = uuid.uuid4().hex
    env = {**os.environ, "PYTHONPATH": SRC, "THREADLOG_TEST_MARK": mark}
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_KILLED_WITH_WORKERS), str(store_dir), source],
        env=env,
        capture_output=True,  # (closed by the workers too: they must not outlive the import)
        timeout=120,
    )
    assert run.returncode == -9, run.stderr.decode()
    _wait_for_processes_marked(mark)
    assert [f for _, _, fs in os.walk(store_dir / "threads") for f in fs if f.endswith(".tmp")]
    with open_store(tmp_path / "clean") as clean:
        expected = import_paths(clean, source_format("claude-code"), [source])
        want, threads = _threads(clean, expected), len(clean.thread_ids())
    with open_store(store_dir) as store:
        survivors = store.thread_ids()
        assert 0 < len(survivors) < threads
        for thread in survivors:
            assert store.verify(thread).ok
        temps = [f for _, _, fs in os.walk(store_dir / "threads") for f in fs if f.endswith(".tmp")]
        assert temps == []  # swept: written for an importer that died, never threads
        report = import_paths(store, source_format("claude-code"), [source], workers=2)
        assert len(store.thread_ids()) == threads
        assert _threads(store, report) == want
        assert import_paths(store, source_format("claude-code"), [source]).records == 0


@pytest.mark.parametrize("fmt", SOURCES)
def test_worker_processes_write_what_one_process_writes(
    tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New threads built in worker processes: the same threads, reports and ledger; a file
    whose session names a parent (or continues one) is imported by the importing process."""
    from threadlog.importers import _core

    monkeypatch.setattr(_core, "PARALLEL_FILES", 1)
    monkeypatch.setattr(_core, "WINDOW", 1)
    source = str(FIXTURES / fmt)
    with open_store(tmp_path / "one") as one, open_store(tmp_path / "many") as many:
        alone = import_paths(one, source_format(fmt), [source])
        here = _counting(monkeypatch)
        shared = import_paths(many, source_format(fmt), [source], workers=2)
        assert 0 < len(shared.files) - len(here)  # some were built by the workers
        assert [(f.path, f.status, f.records) for f in shared.files] == [
            (f.path, f.status, f.records) for f in alone.files
        ]
        assert _problems(shared) == _problems(alone)
        assert _threads(many, shared) == _threads(one, alone)
        for thread in many.thread_ids():
            assert many.verify(thread).ok
        # the workers wrote their threads' files; those of answers not taken are removed
        temps = [f for _, _, fs in os.walk(tmp_path / "many") for f in fs if f.endswith(".tmp")]
        assert temps == []
        indexed = many.index.dump()
        many.rebuild()
        assert many.index.dump() == indexed
        again = import_paths(many, source_format(fmt), [source], workers=2)
        assert again.records == 0


def test_a_value_for_the_artifact_store_is_imported_by_the_importing_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from threadlog.importers import _core

    monkeypatch.setattr(_core, "PARALLEL_FILES", 1)
    source = str(FIXTURES / "claude-code")
    with (
        EmbeddedStore(tmp_path / "one", artifact_threshold=200) as one,
        EmbeddedStore(tmp_path / "many", artifact_threshold=200) as many,
    ):
        alone = import_paths(one, source_format("claude-code"), [source])
        here = _counting(monkeypatch)
        shared = import_paths(many, source_format("claude-code"), [source], workers=2)
        assert len(here) == len(shared.files)  # every one came back to the importing process
        assert _threads(many, shared) == _threads(one, alone)
        assert any(
            "$artifact" in json.dumps(r.data) for t in many.thread_ids() for r in many.read(t)
        )


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files the importing process imports itself from now on."""
    from threadlog.importers import _core

    here: list[str] = []
    real = _core.import_file

    def counted(store: Any, fmt: Any, path: str, *args: Any) -> Any:
        here.append(path)
        return real(store, fmt, path, *args)

    monkeypatch.setattr(_core, "import_file", counted)
    return here


def test_the_command_builds_many_files_in_workers(tmp_path: Path) -> None:
    """``threadlog import`` of more files than `PARALLEL_FILES`, as a process of its own
    (its workers start from the command's main module): every thread verifies, and a re-run
    imports nothing."""
    from threadlog.importers._core import PARALLEL_FILES

    sessions = tmp_path / "projects" / "-home-user-project"
    sessions.mkdir(parents=True)
    [fixture] = sorted((FIXTURES / "claude-code" / "-home-user-other").glob("*.jsonl"))
    for i in range(PARALLEL_FILES + 4):
        (sessions / f"{i:08x}-5a49-4382-9170-6f5e4d3c2b1a.jsonl").write_bytes(fixture.read_bytes())
    home = str(tmp_path / "store")
    command = [sys.executable, "-m", "threadlog", "import", "claude-code", str(sessions)]
    env = {**os.environ, "PYTHONPATH": SRC}

    def run() -> dict[str, Any]:
        done = subprocess.run(
            [*command, "--json", "--store", home], env=env, capture_output=True, timeout=300
        )
        assert done.returncode == 0, done.stderr.decode()
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    first = run()
    assert first["totals"]["imported"] == PARALLEL_FILES + 4
    with open_store(home) as store:
        assert len(store.thread_ids()) == PARALLEL_FILES + 4
        counts = {len(store.read(t)) for t in store.thread_ids()}
        assert len(counts) == 1  # the same session each time: the same records
        for thread in store.thread_ids():
            assert store.verify(thread).ok
    again = run()
    assert again["totals"]["unchanged"] == PARALLEL_FILES + 4 and again["totals"]["records"] == 0


@given(item=st.text(max_size=40), n=st.integers(min_value=0, max_value=200))
def test_an_emitters_record_ids_are_derived_ids(item: str, n: int) -> None:
    """`Emitter.record_id`, computed from a cached prefix hash, is `derived_id` bit for bit."""
    from threadlog.importers._emit import Emitter
    from threadlog.importers._report import FileReport
    from threadlog.model.ids import derived_id

    key = "claude-code:5a49-ü"
    emitter = Emitter(None, "thread", key, "root", FileReport("x", "claude-code"))  # type: ignore[arg-type]
    assert emitter.record_id(item, n) == derived_id("threadlog.import", key, item, str(n))


@given(
    asks=st.lists(
        st.tuples(st.sampled_from(["a", "b", "", "ü~results"]), st.integers(0, 70)), max_size=20
    )
)
def test_record_ids_asked_item_after_item_are_derived_ids(asks: list[tuple[str, int]]) -> None:
    """`Emitter.record_id`'s cached hash of the last item never leaks into another item's
    ids: asked in any order, each id is `derived_id` bit for bit."""
    from threadlog.importers._emit import Emitter
    from threadlog.importers._report import FileReport
    from threadlog.model.ids import derived_id

    key = "claude-code:s"
    emitter = Emitter(None, "thread", key, "root", FileReport("x", "claude-code"))  # type: ignore[arg-type]
    for item, n in asks:
        assert emitter.record_id(item, n) == derived_id("threadlog.import", key, item, str(n))


@given(rest=st.lists(st.binary(max_size=30).map(lambda b: b + b"\n"), max_size=8))
def test_a_workers_thread_keeps_its_lines_bytes(rest: list[bytes]) -> None:
    """A worker sends a thread's first line and the others joined in one: the same bytes,
    the first line still its own (what `NewThreads.add` checks and writes)."""
    from threadlog.importers._parallel import _Batch
    from threadlog.model.projection import Projected

    first = b'{"thread":"t"}\n'
    batch = _Batch(1 << 20, 1 << 24, 10_000, 1000)
    batch.add("t", [first, *rest], Projected(1, (1, "h", "ts"), {}, {}, {}, [], 0, 0))
    (finished,) = batch.threads
    assert finished.lines[0] == first
    assert b"".join(finished.lines) == first + b"".join(rest)
    assert len(finished.lines) == 2
