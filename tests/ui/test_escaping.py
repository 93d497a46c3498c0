"""Markup from the log is text: titles, messages and tool output holding HTML, ``<script>``,
Markdown and terminal escapes render as text in the browser UI and in the HTML export; only
the Markdown the renderers know (with http(s) links only) becomes formatting.

The page is also drawn at a phone's width, where nothing may overflow sideways.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.harness.service import ROOT
from tests.ui.conftest import Service
from tests.ui.test_browser import TIMEOUT, _page, _sign_in, expect

TITLE = '<img src=x onerror="window.pwned=1">Q3 <b>report</b>'
MESSAGE = (
    "<script>window.pwned=2</script> **bold** and [bad](javascript:window.pwned=3) "
    "and [good](https://example.org/a?b=1&c=2) \x1b[31mred\x1b[0m [bold red]rich[/]"
)
BIG = 4000
"""Lines of a file whose reading is over the artifact threshold (stored as a blob)."""
OUTPUT = '<b>not bold</b>\n<script>window.pwned=4</script>\n\x1b[1;32mOK\x1b[0m\n<a href="x">'


def _thread(url: str, token: str, workspace: Path) -> str:
    (workspace / "evil.txt").write_text(OUTPUT)
    (workspace / "big.txt").write_text("".join(f"line {i:05d} {'.' * 20}\n" for i in range(BIG)))
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as http:
        made = http.post(
            "/v1/threads", json={"title": TITLE, "cwd": str(workspace), "input": MESSAGE}
        )
        assert made.status_code == 201, made.text
        thread: str = made.json()["thread_id"]
        for _ in range(200):
            if http.get(f"/v1/threads/{thread}").json()["status"] == "idle":
                break
        for name in ("evil.txt", "big.txt"):
            for _ in range(200):
                if http.get(f"/v1/threads/{thread}").json()["status"] == "idle":
                    break
            answer = http.post(f"/v1/threads/{thread}/turns", json={"input": f"show {name}"})
            assert answer.status_code == 202, answer.text
    return thread


def test_markup_renders_as_text_in_the_ui_and_the_export(
    browser: Any, service: tuple[Service, str], workspace: Path
) -> None:
    svc, token = service
    thread = _thread(svc.url, token, workspace)
    page = _page(browser, width=390, height=844)  # a phone
    try:
        _sign_in(page, svc.url, token)
        row = page.locator(f'.thread[data-thread="{thread}"] .title')
        expect(row).to_have_text(TITLE)
        row.click()
        expect(page.locator("#thread-title")).to_have_text(TITLE)
        card = page.locator('.call[data-state="finished"]', has_text="read_file")
        out = card.locator(".out")
        expect(out).to_contain_text("<b>not bold</b>")
        expect(out).to_contain_text("<script>window.pwned=4</script>")
        expect(out).to_contain_text("\u241b[1;32mOK")  # the terminal escape, made visible
        user = page.locator(".msg.k-user").first
        expect(user).to_contain_text("<script>window.pwned=2</script>")
        expect(user).to_contain_text("[bold red]rich[/]")
        expect(user.locator("strong")).to_have_text("bold")
        expect(user.locator("a")).to_have_count(1)  # the javascript: link stayed text
        expect(user.locator("a")).to_have_attribute("href", "https://example.org/a?b=1&c=2")
        expect(user).to_contain_text("[bad](javascript:window.pwned=3)")
        assert page.evaluate("() => window.pwned") is None
        assert page.locator("main img, main script, main b").count() == 0
        # a result kept in the artifact store: loaded on demand, folded, then shown whole
        big = page.locator(".call", has_text="big.txt")
        expect(big).to_have_attribute("data-state", "finished")
        big.get_by_role("button", name="Load the full output").click()
        expect(big.locator(".gap")).to_contain_text(f"{BIG + 1:,} lines")
        expect(big).not_to_contain_text(f"line {BIG // 2:05d}")
        expect(big).to_contain_text(f"line {BIG - 1:05d}")  # the tail
        big.get_by_role("button", name="Show all").click()
        expect(big).to_contain_text(f"line {BIG // 2:05d}")
        unlabelled = page.evaluate(
            """() => [...document.querySelectorAll("main input, main textarea, main select")]
                .filter(f => !f.labels.length && !f.getAttribute("aria-label")).map(f => f.id)"""
        )
        assert unlabelled == [], f"fields without a label: {unlabelled}"
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 390, f"the page overflows a phone's width: {width}px"
        assert page.errors == []  # type: ignore[attr-defined]
    finally:
        page.context.close()

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    exported = subprocess.run(
        [sys.executable, "-m", "threadlog", "export", thread, "--format", "html"]
        + ["--home", svc.home],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=60,
    ).stdout
    assert "<script" not in exported.lower() and "<img" not in exported
    assert "<b>" not in exported and "javascript:" not in exported.split("[bad](")[0]
    assert '<a href="javascript' not in exported
    assert "&lt;script&gt;window.pwned=2&lt;/script&gt;" in exported
    assert "&lt;img src=x onerror=&quot;window.pwned=1&quot;&gt;Q3" in exported
    assert "&lt;b&gt;not bold&lt;/b&gt;" in exported
    assert "\x1b" not in exported and "\u241b[1;32mOK" in exported
    assert "<strong>bold</strong>" in exported
    assert '<a href="https://example.org/a?b=1&amp;c=2" rel="noopener noreferrer nofollow">' in (
        exported
    )
    # the page runs no script when opened, too
    page = _page(browser)
    try:
        page.set_content(exported)
        expect(page.locator("h1")).to_have_text(TITLE, timeout=TIMEOUT)
        assert page.evaluate("() => window.pwned") is None
    finally:
        page.context.close()
