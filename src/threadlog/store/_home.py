"""Where the embedded store lives unless told otherwise (no backend import needed to ask)."""

from __future__ import annotations

import os

__all__ = ["default_home"]


def default_home() -> str:
    """``$THREADLOG_HOME``, else ``~/.threadlog``."""
    return os.environ.get("THREADLOG_HOME") or os.path.join(os.path.expanduser("~"), ".threadlog")
