"""Fixtures of the browser tests: Debian's Chromium driven by Playwright, and a real
``threadlog serve`` (its own process, a free loopback port) with a token for alice.

The browser is the system's (``scripts/install_chromium.py`` installs Debian's package;
``make .venv/.installed`` runs it); Playwright's own browser download is never used. Where
no Chromium can be found the tests are skipped with a loud reason, except under
``CI=true``, where a missing browser is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.service import ROOT, ServerProcess

MODEL = "python:tests.ui.agents:agent"
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The browser: ``$THREADLOG_CHROMIUM``, else the first of `CANDIDATES` on the PATH."""
    named = os.environ.get("THREADLOG_CHROMIUM")
    if named:
        return named if os.path.exists(named) else None
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _missing(reason: str) -> None:
    message = (
        f"BROWSER TESTS NOT RUN: {reason}. Install Debian's chromium "
        "(python scripts/install_chromium.py, or apt-get install chromium) to run them."
    )
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = find_chromium()
    if path is None:
        _missing("no Chromium on this machine")
    assert path is not None
    return path


@pytest.fixture(scope="module")
def browser(chromium_path: str) -> Iterator[object]:
    """Chromium, for one module: Playwright's sync API keeps an event loop running while it
    is started, so it must stop before other modules' tests call ``asyncio.run``."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the playwright package is not installed (pip install -e '.[dev]')")
    with sync_playwright() as pw:
        launched = pw.chromium.launch(
            executable_path=chromium_path,
            # root in a container has no user namespace for the sandbox
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        try:
            yield launched
        finally:
            launched.close()


def add_token(home: str, principal: str) -> str:
    """Mint a token in the store at ``home``; the token."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    out = subprocess.run(
        [sys.executable, "-m", "threadlog", "token", "add", principal, "--home", home],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return out.stdout.split()[-1]


class Service:
    """A ``threadlog serve`` that can be killed and started again on the same port."""

    def __init__(self, home: str) -> None:
        self.home = home
        self.server = ServerProcess(home, "--model", MODEL, "--heartbeat", "2")

    @property
    def url(self) -> str:
        return self.server.url

    def restart(self, sig: int) -> None:
        port = self.server.port
        self.server.stop(sig)
        self.server = ServerProcess(self.home, "--model", MODEL, "--heartbeat", "2", port=port)

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.md").write_text("# Notes\n\nretries: 3\nbackoff: exponential\n")
    return root


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[Service, str]]:
    home = str(tmp_path / "home")
    token = add_token(home, "alice")
    svc = Service(home)
    try:
        yield svc, token
    finally:
        svc.stop()
