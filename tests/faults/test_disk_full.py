"""A real full disk (ENOSPC from a small tmpfs): nothing unacknowledged, recovery after space
returns (RELIABILITY D7). Needs root to mount the tmpfs, as in CI."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from threadlog import StorageError, open_store


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_enospc_acknowledges_nothing_and_the_store_recovers(small_disk: Path) -> None:
    home = small_disk / "home"
    ballast = small_disk / "ballast"
    store = open_store(home)
    thread = store.create_thread("u")
    ballast.write_bytes(b"\0" * 64 * 1024)  # room to give back later
    acked = []
    with pytest.raises(StorageError):
        for i in range(10_000):
            acked.append(store.append(thread, "custom.fill", {"i": i, "pad": "p" * 2000}))
    assert len(acked) > 10
    with pytest.raises(StorageError):  # fail-stop: nothing more is acknowledged
        store.append(thread, "custom.fill", {"i": -1})
    try:
        store.close()
    except StorageError:
        pass  # the final checkpoint may hit the full disk too; the journal stays for replay
    ballast.unlink()
    with open_store(home) as store:
        records = store.read(thread)
        assert records[1 : 1 + len(acked)] == acked  # every acknowledged record, intact
        new = store.append(thread, "custom.after", {"space": "back"})
        assert new.ord == len(records) + 1
        assert store.verify(thread).ok
