"""docs/cli.md's reference section is the commands' real ``--help`` (issue 11: a thin CLI
whose documentation cannot drift)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from threadlog.cli import cli
from threadlog.cli._reference import BEGIN, reference, rewrite

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_docs_cli_md_holds_every_commands_current_help() -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert BEGIN in doc
    assert doc == rewrite(doc), (
        "docs/cli.md is out of date: run `python -m threadlog.cli._reference --write`"
    )


def test_the_reference_is_what_help_prints() -> None:
    text = reference()
    result = CliRunner().invoke(
        cli, ["verify", "--help"], prog_name="threadlog", terminal_width=100
    )
    assert result.exit_code == 0
    assert result.output.rstrip() in text
    for name in ("ls", "verify", "resume", "memory ls"):
        assert f"### `threadlog {name}`" in text
