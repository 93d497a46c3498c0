"""``threadlog copy`` between embedded stores and PostgreSQL: byte-identical logs, blobs,
forks, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.postgres.server import Schemas, pg_schemas, pg_server  # noqa: F401 - fixtures

from threadlog import open_store
from threadlog.cli import cli
from threadlog.errors import ConflictError
from threadlog.store.copy import copy_thread
from threadlog.store.protocol import Maintenance


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def _populate(home: str) -> dict[str, str]:
    """A plain thread, one with a blob, a fork of a fork (inherited prefix)."""
    with open_store(home) as store:
        plain = store.create_thread("alice", title="plain")
        store.append(plain, "turn.started", {"turn_id": "t", "input": "hello"})
        for i in range(20):
            store.append(plain, "custom.note", {"i": i, "text": "é" * i})
        big = store.create_thread("bob")
        store.append(big, "custom.dump", {"blob": "x" * 200_000})
        child = store.fork(plain, 10, changes={"model": "m2"})
        store.append(child, "custom.note", {"child": True})
        grandchild = store.fork(child)
    return {"plain": plain, "big": big, "child": child, "grandchild": grandchild}


def _rollout(home: str, thread: str) -> bytes:
    with open_store(home) as store:
        assert isinstance(store, Maintenance)
        return Path(store.path_of(thread)).read_bytes()


def test_copy_everything_byte_for_byte_and_again_as_a_no_op(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    threads = _populate(src)
    code, out, err = run("copy", "--from", src, "--to", dst, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["ok"], doc["copied"], doc["skipped"], doc["failed"]) == (True, 4, 0, 0)
    by_thread = {t["thread"]: t for t in doc["threads"]}
    assert by_thread[threads["big"]]["artifacts"] == 1
    for thread in threads.values():
        assert _rollout(dst, thread) == _rollout(src, thread)  # the very bytes
    code, out, _ = run("verify", "--store", dst, "--json")
    assert code == 0 and all(r["ok"] for r in json.loads(out))
    with open_store(src) as a, open_store(dst) as b:
        for thread in threads.values():
            assert b.read(thread) == a.read(thread)
            assert b.resolve(b.read(thread)[-1].data) == a.resolve(a.read(thread)[-1].data)
            assert b.state(thread) == a.state(thread)
        lineage = b.read(threads["grandchild"])[0].data["lineage"]
        assert lineage["thread"] == threads["child"]
        assert b.thread_info(threads["plain"]).title == "plain"  # the index knows it
    # run again: nothing to do
    code, out, _ = run("copy", "--from", src, "--to", dst, "--json")
    assert code == 0 and json.loads(out)["skipped"] == 4
    # and the copy is a live store: appending continues the chain
    with open_store(dst) as b:
        last = b.read(threads["plain"])[-1]
        more = b.append(threads["plain"], "custom.note", {"after": "copy"})
        assert (more.ord, more.prev) == (last.ord + 1, last.hash)


def test_copy_named_threads_with_a_human_summary(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    threads = _populate(src)
    code, out, _ = run("copy", "--store", src, "--to", dst, threads["grandchild"])
    assert code == 0
    assert out.splitlines()[-1] == "1 copied, 0 skipped, 0 failed"
    assert out.startswith(f"copied   {threads['grandchild']}  12 records")
    with open_store(dst) as b:
        assert b.thread_ids() == [threads["grandchild"]]
        assert b.verify(threads["grandchild"]).ok  # a fork verifies without its sources


def test_a_thread_held_with_other_content_is_refused(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    threads = _populate(src)
    assert run("copy", "--from", src, "--to", dst, threads["plain"])[0] == 0
    with open_store(dst) as b:
        b.append(threads["plain"], "custom.note", {"only": "here"})
        before = b.read(threads["plain"])
    code, out, _ = run("copy", "--from", src, "--to", dst, "--json")
    assert code == 3
    doc = json.loads(out)
    assert (doc["copied"], doc["failed"]) == (3, 1)
    (failed,) = [t for t in doc["threads"] if t["status"] == "failed"]
    assert failed["thread"] == threads["plain"] and "other content" in failed["error"]
    with open_store(dst) as b, open_store(src) as a:
        assert b.read(threads["plain"]) == before
        with pytest.raises(ConflictError, match="from ord 23"):
            copy_thread(a, b, threads["plain"])


def test_a_damaged_source_is_not_copied(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    threads = _populate(src)
    with open_store(src) as store:
        assert isinstance(store, Maintenance)
        path = Path(store.path_of(threads["plain"]))
    data = bytearray(path.read_bytes())
    at = data.index(b'"i":5')
    data[at + 4] = ord("6")  # one byte of ord 8, in the middle of the log
    path.write_bytes(bytes(data))
    code, out, _ = run("copy", "--from", src, "--to", dst, "--json")
    assert code == 3
    (failed,) = [t for t in json.loads(out)["threads"] if t["status"] == "failed"]
    assert failed["thread"] == threads["plain"] and "ord 8" in failed["error"]
    with open_store(dst) as b:
        assert not b.exists(threads["plain"]) and b.exists(threads["big"])


def test_copy_refuses_bad_targets_and_unknown_threads(tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    threads = _populate(src)
    code, _, err = run("copy", "--from", src, "--to", "memory://")
    assert code == 2 and "in-memory" in err
    code, _, err = run("copy", "--from", src, "--to", "s3://bucket")
    assert code == 2 and "no store backend" in err
    missing = threads["plain"][:-4] + "0000"
    code, _, err = run("copy", "--from", src, "--to", str(tmp_path / "d"), missing)
    assert code == 2 and "no thread" in err
    code, _, err = run("copy", "--from", src, "--to", str(tmp_path / "d"), *[threads["big"]] * 2)
    assert code == 2 and "twice" in err
    typo = tmp_path / "srcc"  # a mistyped source: refused, and no store made there or at --to
    code, _, err = run("copy", "--from", str(typo), "--to", str(tmp_path / "e"))
    assert code == 2 and "is not a threadlog store" in err
    assert not typo.exists() and not (tmp_path / "e").exists()


def test_embedded_to_postgres_and_back_keeps_every_byte(
    tmp_path: Path,
    pg_schemas: Schemas,  # noqa: F811
) -> None:
    src, back = str(tmp_path / "src"), str(tmp_path / "back")
    threads = _populate(src)
    pg = pg_schemas.new()
    code, out, err = run("copy", "--from", src, "--to", pg, "--json")
    assert code == 0, err
    assert json.loads(out)["copied"] == 4
    with open_store(src) as a, open_store(pg) as b:
        for thread in threads.values():
            assert b.read(thread) == a.read(thread)
            assert b.verify(thread).ok  # verify on the PostgreSQL side
            assert b.state(thread) == a.state(thread)
        assert b.resolve(b.read(threads["big"])[-1].data) == a.resolve(
            a.read(threads["big"])[-1].data
        )
    code, out, _ = run("verify", "--store", pg, "--json")  # and through the command line
    assert code == 0 and len(json.loads(out)) == 4 and all(r["ok"] for r in json.loads(out))
    code, out, _ = run("copy", "--from", src, "--to", pg, "--json")  # again: nothing to do
    assert code == 0 and json.loads(out)["skipped"] == 4
    code, out, err = run("copy", "--from", pg, "--to", back, "--json")
    assert code == 0, err
    for thread in threads.values():
        assert _rollout(back, thread) == _rollout(src, thread)  # the very bytes, round trip
    code, out, _ = run("verify", "--store", back, "--json")
    assert code == 0 and all(r["ok"] for r in json.loads(out))
    # a thread that grew on PostgreSQL no longer matches the embedded copy: refused
    with open_store(pg) as b:
        b.append(threads["plain"], "custom.note", {"on": "pg"})
    code, out, _ = run("copy", "--from", pg, "--to", back, "--json")
    assert code == 3 and json.loads(out)["failed"] == 1


def test_a_long_copy_reports_progress_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    _populate(src)
    clock = iter(range(0, 1000, 2))  # every look at the clock: two seconds later
    monkeypatch.setattr("threadlog.cli.copy.time.monotonic", lambda: float(next(clock)))
    code, out, err = run("copy", "--from", src, "--to", dst, "--json")
    assert code == 0
    assert err.splitlines() == ["copy: 1/4 threads", "copy: 2/4 threads", "copy: 3/4 threads"]
    assert json.loads(out)["copied"] == 4  # stdout holds the summary alone
