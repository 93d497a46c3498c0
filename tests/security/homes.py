"""Homes as a crash leaves them, for the adversarial tests (issue 9)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from threadlog import open_store
from threadlog.model.envelope import Record


@dataclass
class Crashed:
    """A home whose store died after one group commit through the journal: the records of
    ``thread`` (and one of ``other``) are in the dead journal only, not in the rollouts."""

    home: Path
    thread: str
    other: str
    acked: list[Record]
    """The records of ``thread`` that only the journal holds."""

    def journals(self) -> list[Path]:
        directory = self.home / "journal"
        return sorted(directory.glob("*.wal")) if directory.is_dir() else []

    def write_to_journal(self, line: bytes) -> None:
        """Write ``line`` into the journal where its next record would go: after its last
        record, over the zeros it wrote ahead (appended after those, recovery would never
        read it: a journal's records end at its first line that is not one)."""
        (journal,) = self.journals()
        data = journal.read_bytes()
        end = data.find(b"\0")
        with open(journal, "r+b") as f:
            f.seek(len(data) if end < 0 else end)
            f.write(line)

    def rollout(self, thread: str) -> Path:
        (path,) = self.home.glob(f"threads/*/*/{thread}.jsonl")
        return path


def crashed_home(tmp_path: Path, name: str = "crashed") -> Crashed:
    live = tmp_path / f"{name}-live"
    with open_store(live) as store:
        thread = store.create_thread("a")
        other = store.create_thread("b")
    sizes = {t: os.path.getsize(_rollout(live, t)) for t in (thread, other)}
    store = open_store(live, commit_interval=3600)
    # one group commit spanning two threads goes through the journal
    acked = [store.append(thread, "custom.x", {"i": i}, durable=False) for i in range(5)]
    store.append(other, "custom.y", {}, durable=False)
    store.flush()
    home = tmp_path / name
    # what a crash leaves (nobody holds the journal's lock); not the index, which may know
    # records acknowledged through the journal that a refused journal then takes away
    shutil.copytree(live, home, ignore=shutil.ignore_patterns("index.sqlite3*"))
    store.close()
    for t, size in sizes.items():  # a power loss: the unsynced rollout writes are gone
        os.truncate(_rollout(home, t), size)
    crashed = Crashed(home, thread, other, acked)
    assert len(crashed.journals()) == 1
    return crashed


def _rollout(home: Path, thread: str) -> Path:
    (path,) = home.glob(f"threads/*/*/{thread}.jsonl")
    return path


def modes(root: Path) -> dict[str, int]:
    """Every folder and file under ``root`` (and ``root``) → its permission bits."""
    found = {".": os.stat(root).st_mode & 0o7777}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            found[os.path.relpath(path, root)] = os.lstat(path).st_mode & 0o7777
    return found
