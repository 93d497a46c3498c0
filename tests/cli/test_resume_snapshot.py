"""`threadlog resume` on a long thread no session has snapshotted (an imported one) saves a
snapshot as it closes, so that the next open starts there; on a short tail it saves none."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from threadlog import EmbeddedStore
from threadlog.cli import cli
from threadlog.cli.live import BRIEF
from threadlog.model.snapshot import SNAPSHOT_VERSION

if TYPE_CHECKING:
    from pathlib import Path


def _thread(home: str, records: int) -> str:
    with EmbeddedStore(home) as store:
        thread = store.create_thread("local")
        for n in range(records):
            store.append(thread, "custom.note", {"n": n}, durable=False)
    return thread


@pytest.mark.parametrize("records", [BRIEF.on_close + 10, 50])
def test_resume_saves_a_snapshot_only_after_reducing_a_long_log(
    tmp_path: Path, records: int
) -> None:
    home = str(tmp_path / "home")
    thread = _thread(home, records)
    for _ in range(2):
        result = CliRunner().invoke(cli, ["--store", home, "resume", thread])
        assert result.exit_code == 0, result.output
    with EmbeddedStore(home) as store:
        saved = store.load_snapshot(thread, SNAPSHOT_VERSION)
    if records > BRIEF.on_close:
        assert saved is not None and saved[0] >= records
    else:
        assert saved is None
