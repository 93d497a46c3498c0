"""Fixtures of the importer tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ._helpers import FIXTURES


@pytest.fixture
def sources(tmp_path: Path) -> Path:
    """A private copy of the fixtures (tests that grow or rewrite files use it)."""
    target = tmp_path / "sources"
    shutil.copytree(FIXTURES, target)
    return target
