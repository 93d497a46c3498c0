"""A command's full output goes to the artifact store (000 §17.2), and verify checks it.

``run_command`` keeps every byte of a large output in a blob streamed to the store, the
result holding only a head/tail summary and the blob's reference; ``artifact.stored`` names
the blob in the log, and `Store.verify` / ``threadlog verify`` report a blob that is gone or
altered, with the ordinal of the record that references it. Resume reports it too.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from threadlog import open_store
from threadlog.cli import cli
from threadlog.model import codec
from threadlog.model.refs import ArtifactRef
from threadlog.runtime import Reply, Runtime, ScriptedModel, ToolCallSpec
from threadlog.store.protocol import Artifacts

MIB = 1 << 20
# 6 MiB of distinct lines on stdout, and a little on stderr
PRINT = (
    "import sys\n"
    "w = sys.stdout.write\n"
    "for i in range(6 * 1024 * 1024 // 32):\n"
    "    w(f'line {i:>10} of the big output\\n'[:31] + '\\n')\n"
    "sys.stderr.write('warned\\n')\n"
)


def expected_stdout() -> bytes:
    return b"".join(
        (f"line {i:>10} of the big output\n"[:31] + "\n").encode() for i in range(6 * MIB // 32)
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def run_big_command(home: str, workspace: Path) -> str:
    model = ScriptedModel(
        [
            Reply("", [ToolCallSpec("run_command", {"command": [sys.executable, "-c", PRINT]})]),
            Reply("printed"),
        ]
    )

    async def main() -> str:
        async with Runtime(home, model=model) as runtime:
            session = await runtime.create(
                "u", cwd=str(workspace), approval_policy={"non_idempotent": "auto"}
            )
            await session.submit("print a lot")
            await session.wait_idle(60)
            return session.thread_id

    return asyncio.run(main())


def finished_record(home: str, thread: str) -> Any:
    with open_store(home) as store:
        return next(r for r in store.read(thread) if r.type == "tool_call.finished")


def stored_ords(home: str, thread: str) -> list[int]:
    with open_store(home) as store:
        return [r.ord for r in store.read(thread) if r.type == "artifact.stored"]


def blob_path(home: str, sha256: str) -> Path:
    return Path(home, "artifacts", "sha256", sha256[:2], sha256)


def test_every_byte_of_a_large_output_is_kept_and_matches_its_hash(
    home: str, workspace: Path
) -> None:
    thread = run_big_command(home, workspace)
    record = finished_record(home, thread)
    result = record.data["result"]
    # the record stays small: a summary and a reference, not the output (nor an offload)
    assert len(codec.canonical(record.data)) < 24 * 1024
    assert result["exit_code"] == 0 and result["stderr"] == "warned\n"
    want = expected_stdout()
    assert len(want) > 5 * MIB
    ref = ArtifactRef.from_data(result["stdout_artifact"])
    assert ref is not None
    assert ref.size == len(want) and ref.sha256 == hashlib.sha256(want).hexdigest()
    head, tail = want[:64].decode(), want[-64:].decode()
    assert result["stdout"].startswith(head) and result["stdout"].endswith(tail)
    assert f"every byte is in artifact {ref.sha256}" in result["stdout"]
    with open_store(home) as store:
        assert isinstance(store, Artifacts)
        assert store.get_artifact(ref.sha256) == want  # every byte, hash checked
        with store.open_artifact(ref.sha256) as f:
            f.seek(len(want) - 64)
            assert f.read() == want[-64:]
        assert store.check_artifact(ref) is None
        records = store.read(thread)
        stored = [r for r in records if r.type == "artifact.stored"]
        assert [r.data["sha256"] for r in stored] == [ref.sha256]
        assert stored[0].ord < record.ord  # named before the result that references it
        assert store.verify(thread).ok


@pytest.mark.parametrize("damage", ["deleted", "altered"])
def test_a_missing_or_altered_blob_fails_verify_naming_the_ordinal(
    home: str, workspace: Path, damage: str
) -> None:
    thread = run_big_command(home, workspace)
    ref = ArtifactRef.from_data(finished_record(home, thread).data["result"]["stdout_artifact"])
    assert ref is not None
    (ord_,) = stored_ords(home, thread)
    path = blob_path(home, ref.sha256)
    if damage == "deleted":
        path.unlink()
    else:
        os.chmod(path, 0o600)
        with open(path, "r+b") as f:
            f.seek(1000)
            f.write(b"#")
    with open_store(home) as store:
        report = store.verify(thread)
        assert not report.ok
        assert report.first_bad_ord == ord_
        assert ref.sha256 in str(report.error)
        assert ("missing" if damage == "deleted" else "does not match") in str(report.error)
    out = CliRunner().invoke(cli, ["verify", thread, "--home", home])
    assert out.exit_code == 1
    assert f"first bad ord {ord_}" in out.output


def test_resume_reports_a_missing_blob(home: str, workspace: Path) -> None:
    thread = run_big_command(home, workspace)
    ref = ArtifactRef.from_data(finished_record(home, thread).data["result"]["stdout_artifact"])
    assert ref is not None
    (ord_,) = stored_ords(home, thread)
    blob_path(home, ref.sha256).unlink()

    async def main() -> Any:
        async with Runtime(home, model=ScriptedModel([])) as runtime:
            session = await runtime.resume(thread, continue_work=False)
            return session.recovery

    report = asyncio.run(main())
    assert [(d["ord"], d["sha256"]) for d in report.damaged_artifacts] == [(ord_, ref.sha256)]
    assert report.to_data()["damaged_artifacts"][0]["ord"] == ord_


def test_read_artifact_pages_through_a_command_output_blob(home: str) -> None:
    from threadlog.runtime.large_values import load_artifact

    with open_store(home) as store:
        text = "line of output\n" * 10_000
        ref = store.put_artifact(text.encode(), media_type="text/plain")
        assert load_artifact(store, ref.sha256) == text
