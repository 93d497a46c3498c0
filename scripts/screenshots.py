"""Regenerate the UI's screenshots in docs/images/ (the thread list and the thread page, each
at desktop and phone width; the HTML export).

It starts ``threadlog serve`` (open mode, a free loopback port) on a temporary store with the
browser tests' scripted agent, makes a few threads (one waiting for approval, one with a
steering message queued, one forked), and photographs them with Playwright on the system's
Chromium (``scripts/install_chromium.py``).

Usage: python scripts/screenshots.py [--out docs/images]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from tests.harness.service import ServerProcess  # noqa: E402
from tests.ui.conftest import MODEL, find_chromium  # noqa: E402


def _wait(http: httpx.Client, thread: str, done: str) -> None:
    for _ in range(400):
        view = http.get(f"/v1/threads/{thread}/view").json()
        if view["status"] == done:
            return
        time.sleep(0.05)
    raise SystemExit(f"thread {thread} never became {done}")


def _threads(http: httpx.Client, ws: Path) -> str:
    """Make the threads; the one to photograph."""
    first = http.post(
        "/v1/threads",
        json={"title": "Summarise the on-call notes", "cwd": str(ws), "input": "demo: notes"},
    ).json()["thread_id"]
    _wait(http, first, "idle")
    http.post(f"/v1/threads/{first}/fork", json={"title": "On-call notes (second try)"})
    main = http.post(
        "/v1/threads",
        json={
            "title": "Document the retry policy",
            "cwd": str(ws),
            "input": "demo: read the notes and document the retry policy",
        },
    ).json()["thread_id"]
    _wait(http, main, "idle")
    http.post(f"/v1/threads/{main}/turns", json={"input": "pay the vendor invoice"})
    _wait(http, main, "waiting")
    http.post(f"/v1/threads/{main}/steer", json={"text": "Use the EUR account, please."})
    other = http.post(
        "/v1/threads",
        json={"title": "Rotate the staging keys", "cwd": str(ws), "input": "pay the key vault"},
    ).json()["thread_id"]
    _wait(http, other, "waiting")
    return main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "images"))
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    chromium = find_chromium()
    if chromium is None:
        raise SystemExit("no Chromium: run python scripts/install_chromium.py")
    from playwright.sync_api import sync_playwright

    tmp = Path(tempfile.mkdtemp(prefix="threadlog-shots-"))
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "notes.md").write_text("# Notes\n\nretries: 3\nbackoff: exponential\ncap: 30s\n")
    server = ServerProcess(str(tmp / "home"), "--model", MODEL)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            thread = _threads(http, ws)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            try:
                shots = [
                    ("threads.png", "/ui/#/", 1280, 480, ".thread", False),
                    ("thread.png", f"/ui/#/t/{thread}", 1280, 1000, ".call", True),
                    ("threads-phone.png", "/ui/#/", 390, 700, ".thread", False),
                    ("thread-phone.png", f"/ui/#/t/{thread}", 390, 844, ".call", False),
                ]
                for name, path, width, height, ready, full in shots:
                    page = browser.new_page(viewport={"width": width, "height": height})
                    page.goto(server.url + path)
                    page.locator(ready).first.wait_for()
                    page.wait_for_timeout(800)  # let the live view settle (a script, not a test)
                    page.screenshot(path=str(out / name), full_page=full)
                    page.close()
                    print("wrote", out / name)
                exported = subprocess.run(
                    [sys.executable, "-m", "threadlog", "export", thread, "--format", "html"]
                    + ["--home", str(tmp / "home")],
                    capture_output=True,
                    text=True,
                    check=True,
                    env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                ).stdout
                page = browser.new_page(viewport={"width": 1000, "height": 900})
                page.set_content(exported)
                page.screenshot(path=str(out / "export.png"))
                page.close()
                print("wrote", out / "export.png")
            finally:
                browser.close()
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
