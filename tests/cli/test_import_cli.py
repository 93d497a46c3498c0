"""``threadlog import``: the per-file JSON report, the re-run, and the exports of the result."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from threadlog.cli import cli

FIXTURES = Path(__file__).resolve().parents[1] / "importers" / "fixtures"


def _import(home: str, fmt: str, path: Path) -> dict:
    result = CliRunner().invoke(cli, ["import", fmt, str(path), "--json", "--store", home])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_import_reports_every_file_then_does_nothing_again(home: str, tmp_path: Path) -> None:
    sources = tmp_path / "claude"
    shutil.copytree(FIXTURES / "claude-code", sources)
    report = _import(home, "claude-code", sources)
    totals = report["totals"]
    assert (totals["files"], totals["imported"], totals["problems"]) == (3, 3, 4)
    main = next(f for f in report["files"] if f["children"])
    assert {p["kind"] for p in main["problems"]} == {"malformed", "broken_parent", "torn_tail"}
    # Claude Code's bookkeeping lines: counted by type, not problems
    assert main["bookkeeping"] == {
        "file-history-snapshot": 1,
        "queue-operation": 1,
        "summary": 1,
        "system:informational": 1,
    }
    assert totals["bookkeeping"] == 4
    again = _import(home, "claude-code", sources)
    assert again["totals"]["unchanged"] == 3 and again["totals"]["records"] == 0

    for fmt in ("openai", "anthropic", "responses", "trajectory"):
        out = CliRunner().invoke(cli, ["export", main["thread"], "--format", fmt, "--store", home])
        assert out.exit_code == 0, out.output
        json.loads(out.stdout)
    shown = CliRunner().invoke(cli, ["show", main["thread"], "--tree", "--store", home])
    assert "active leaf" in shown.output


def test_import_prints_a_line_per_new_file(home: str) -> None:
    result = CliRunner().invoke(cli, ["import", "pi", str(FIXTURES / "pi"), "--store", home])
    assert result.exit_code == 0, result.output
    assert result.output.count(" imported ") == 4
    assert "4 files: 4 new, 0 grown, 0 unchanged, 0 failed" in result.output
    assert "2 bookkeeping lines (not conversation)" in result.output
    assert "line 17: unknown_type: entry type 'mystery_entry' kept as a note" in result.output


def test_a_file_that_cannot_be_read_fails_with_exit_3(home: str, tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (sessions / "rollout-2025-01-01T00-00-00-gone.jsonl").symlink_to(tmp_path / "nowhere")
    good = sessions / "rollout-2025-01-02T00-00-00-bytes.jsonl"
    good.write_bytes(b'{"type":"session_meta","payload":{"id":"s1"}}\n\xff\xfe not utf-8\n')
    result = CliRunner().invoke(cli, ["import", "codex", str(sessions), "--json", "--store", home])
    assert result.exit_code == 3
    gone, read = json.loads(result.stdout)["files"]
    assert gone["status"] == "failed" and gone["problems"][0]["kind"] == "error"
    # the other file is imported, its undecodable line reported and kept
    assert read["status"] == "imported"
    assert [(p["line"], p["kind"]) for p in read["problems"]] == [(2, "malformed")]
