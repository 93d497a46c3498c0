"""Leases lock the rollout itself and are not inherited by fork() (issue 9, point 5).

A lease used to be a flock on ``locks/<thread>.lock``: deleting that file let a second writer
lock a new one, and the two interleaved their records. A child made by ``os.fork()`` shared the
parent's locks, so a parent that died left its threads (and its journal) locked while the
child lived on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from threadlog import EmbeddedStore, LeaseHeld


def test_deleting_the_lock_files_lets_no_second_writer_in(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path) as first:
        thread = first.create_thread("tester")
        first.append(thread, "custom.note", {"by": "first"})
        for notice in (tmp_path / "locks").iterdir():
            notice.unlink()
        with EmbeddedStore(tmp_path) as second, pytest.raises(LeaseHeld):
            second.append(thread, "custom.note", {"by": "second"})
        first.append(thread, "custom.note", {"by": "first"})
        assert first.verify(thread).ok
        assert [r.data.get("by") for r in first.read(thread)[1:]] == ["first", "first"]


def test_a_refused_writer_is_told_who_holds_the_thread(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path) as first:
        thread = first.create_thread("tester")
        with EmbeddedStore(tmp_path) as second, pytest.raises(LeaseHeld) as held:
            second.append(thread, "custom.note", {})
        assert f"pid {os.getpid()}" in str(held.value)


def test_lock_files_are_removed_on_release(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path) as store:
        thread = store.create_thread("tester")
        notice = tmp_path / "locks" / f"{thread}.lock"
        assert notice.exists() and notice.stat().st_mode & 0o777 == 0o600
        store.release(thread)
        assert not notice.exists()
        store.append(thread, "custom.note", {})
        assert notice.exists()
    assert list((tmp_path / "locks").iterdir()) == []


FORKING_WRITER = """
import os, sys, time
from threadlog import EmbeddedStore, UsageError

home, marker = sys.argv[1], sys.argv[2]
store = EmbeddedStore(home, commit_interval=3600)
a = store.create_thread("parent")
b = store.create_thread("parent")
store.append(a, "custom.note", {"n": 1}, durable=False)
store.append(b, "custom.note", {"n": 1}, durable=False)
store.flush()  # one commit of two threads: through the journal, which stays until close
pid = os.fork()
if pid == 0:
    try:
        store.append(a, "custom.note", {"n": 2})
        outcome = "appended"
    except UsageError as exc:
        outcome = "refused: " + str(exc)
    with open(marker, "w") as f:
        f.write(outcome)
    time.sleep(60)
    os._exit(0)
with open(marker + ".ids", "w") as f:
    f.write(f"{a} {b} {pid}")
while not os.path.exists(marker):
    time.sleep(0.01)
os._exit(0)  # the parent dies without closing anything
"""


def test_a_forked_child_does_not_keep_its_parents_leases_or_journal(tmp_path: Path) -> None:
    home, marker = tmp_path / "home", tmp_path / "child-says"
    script = tmp_path / "writer.py"
    script.write_text(textwrap.dedent(FORKING_WRITER))
    with open(tmp_path / "stderr", "wb") as err:  # (the child keeps inherited pipes open)
        done = subprocess.run(
            [sys.executable, str(script), str(home), str(marker)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            timeout=60,
        )
    assert done.returncode == 0, (tmp_path / "stderr").read_text()
    a, b, pid = (tmp_path / "child-says.ids").read_text().split()
    child = int(pid)
    try:
        assert marker.read_text().startswith("refused: "), marker.read_text()
        assert "fork" in marker.read_text()
        assert list((home / "journal").glob("*.wal")), "the parent's journal should be left"
        with EmbeddedStore(home) as store:  # the dead parent's journal is replayed
            assert not list((home / "journal").glob("*.wal"))
            for thread in (a, b):
                record = store.append(thread, "custom.note", {"n": 3})  # no LeaseHeld
                assert record.ord == 3
                assert store.verify(thread).ok
    finally:
        os.kill(child, signal.SIGKILL)
        time.sleep(0.05)
