"""The browser UI end to end: Debian's Chromium, driven by Playwright, against a real
``threadlog serve`` in its own process.

One journey walks what a supervising person does: sign in with a token, start a thread and
watch its turn arrive live, approve a pending call while steering the turn, watch a call cut
off by a kill -9 come back as "outcome unknown" after the restart (the page reconnects by
itself from its cursor and catches up), resolve it, then fork from an entry of the tree and
land on the new thread. Every step waits on what the page shows (Playwright's auto-waiting
expectations), never on a sleep.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

from tests.ui.conftest import Service

try:
    from playwright.sync_api import Page, expect
except ImportError:  # the `browser` fixture skips loudly (and fails under CI=true)
    Page = Any  # type: ignore[misc,assignment]
    expect = None  # type: ignore[assignment]

TIMEOUT = 20_000
if expect is not None:
    expect.set_options(timeout=TIMEOUT)


def _page(browser: Any, width: int = 1280, height: int = 900) -> Page:
    context = browser.new_context(viewport={"width": width, "height": height})
    page: Page = context.new_page()
    page.set_default_timeout(TIMEOUT)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # the page must need nothing its Content-Security-Policy forbids
    page.on(
        "console",
        lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None,
    )
    page.errors = errors  # type: ignore[attr-defined]
    return page


def _sign_in(page: Page, url: str, token: str) -> None:
    page.goto(url + "/")
    expect(page.get_by_role("heading", name="Sign in to threadlog")).to_be_visible()
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Open").click()
    expect(page.get_by_role("heading", name="Threads")).to_be_visible()


def _send(page: Page, text: str) -> None:
    page.locator("#say").fill(text)
    page.locator(".composer button[type=submit]").click()


def test_watch_approve_steer_resolve_fork_and_catch_up_after_a_restart(
    browser: Any, service: tuple[Service, str], workspace: Path
) -> None:
    svc, token = service
    page = _page(browser)
    try:
        _sign_in(page, svc.url, token)

        # A new thread from the list page; its first turn arrives live.
        page.get_by_placeholder("Title (optional)").fill("Ledger work")
        page.get_by_placeholder("What should the agent do?").fill("demo: read the notes")
        page.get_by_placeholder("Folder (optional)").fill(str(workspace))
        page.get_by_role("button", name="New thread").click()
        expect(page.locator("#thread-title")).to_have_text("Ledger work")
        created = page.url.rsplit("/", 1)[-1]
        expect(page.locator("#conn")).to_have_text(re.compile("live"))
        card = page.locator('.call[data-state="finished"]', has_text="read_file")
        expect(card).to_be_visible()
        expect(card.locator(".out")).to_contain_text("retries: 3")
        reply = page.locator(".msg.k-assistant").last
        expect(reply).to_contain_text("backoff: exponential")
        expect(reply.locator("li")).to_have_count(2)  # Markdown list
        expect(page.locator(".msg.k-assistant strong").first).to_have_text("the notes")
        expect(page.locator("#usage")).to_contain_text("$0.0024")  # two responses' cost

        # The model's text as it streams (transient), then the durable reply in its place.
        _send(page, "story please")
        streaming = page.locator(".streaming")
        expect(streaming).to_contain_text("Once upon a time")
        expect(streaming).to_be_hidden()
        expect(page.locator(".msg.k-assistant").last).to_contain_text("word119. The end.")

        # A call that needs approval waits at the top; steering is queued meanwhile.
        _send(page, "pay the invoice")
        banner = page.locator(".waiting")
        expect(banner).to_contain_text("append_file")
        expect(banner).to_contain_text("needs approval")
        expect(page.locator('label[for="say"]')).to_contain_text("Steer")
        _send(page, "use the blue pen")
        expect(page.locator(".queued li")).to_contain_text("use the blue pen")
        expect(page.locator(".queued li")).to_contain_text("queued")
        # by keyboard: the reason field, then Tab to Approve, then Enter
        banner.get_by_placeholder("Reason (optional)").fill("invoice checked")
        page.keyboard.press("Tab")
        expect(banner.get_by_role("button", name="Approve")).to_be_focused()
        page.keyboard.press("Enter")
        expect(banner).to_be_hidden()
        paid = page.locator(".call", has_text="append_file")
        expect(paid).to_have_attribute("data-state", "finished")
        expect(paid).to_contain_text("approved by alice: invoice checked")
        expect(page.locator(".queued li")).to_have_count(0)
        expect(page.locator(".msg.k-user").last).to_contain_text("use the blue pen")
        expect(page.locator(".msg.k-assistant").last).to_contain_text("Noted: use the blue pen")
        assert (workspace / "ledger.txt").read_text() == "paid 5\n"

        # A non-idempotent call running when the server is killed: after the restart the
        # page reconnects from its cursor and shows the call's outcome as unknown.
        _send(page, "slow job")
        expect(banner).to_contain_text("run_command")
        banner.get_by_role("button", name="Approve").click()
        running = page.locator(".call", has_text="run_command")
        expect(running).to_have_attribute("data-state", "running")
        before = int(page.locator(".feed li").first.get_attribute("data-ord") or 0)
        svc.server.stop(signal.SIGKILL)
        expect(page.locator("#conn")).to_have_text(re.compile("reconnecting"))
        svc.restart(signal.SIGTERM)  # already dead: starts a new server on the same port
        expect(page.locator("#conn")).to_have_text(re.compile("live"))
        expect(banner).to_contain_text("outcome unknown")
        expect(banner.locator(".reason")).to_contain_text("Why:")
        expect(page.locator(".feed li", has_text="thread.resumed")).to_be_visible()
        ords = [
            int(x)
            for x in page.locator(".feed li").evaluate_all("items => items.map(i => i.dataset.ord)")
        ]
        assert ords == sorted(ords, reverse=True) and len(set(ords)) == len(ords)
        assert max(ords) > before
        banner.get_by_placeholder("Note (optional)").fill("checked by hand")
        banner.get_by_role("button", name="It was done").click()
        expect(banner).to_be_hidden()
        expect(running).to_have_attribute("data-state", "done")
        expect(running).to_contain_text("resolved done by alice: checked by hand")
        expect(page.locator(".msg.k-assistant").last).to_contain_text("The slow job is settled.")

        # Fork from the first user message: the new thread has that entry and nothing after.
        page.locator(".tree .node", has_text="demo: read the notes").click()
        entry = page.locator(".entry")
        expect(entry).to_contain_text("Entry #3")
        entry.get_by_role("button", name="Fork from here").click()
        expect(page).not_to_have_url(re.compile(created))
        expect(page.locator(".thead")).to_contain_text(f"forked from {created[:13]}")
        expect(page.locator(".msg.k-user")).to_have_count(1)
        expect(page.locator(".msg.k-user")).to_contain_text("demo: read the notes")
        page.goto(svc.url + "/ui/#/")
        expect(page.locator(".thread")).to_have_count(2)
        expect(page.locator(".thread", has_text="fork")).to_have_count(1)
        # search and filter
        page.get_by_label("Search threads").fill(created[:13])
        expect(page.locator(".thread")).to_have_count(1)
        page.get_by_label("Search threads").fill("")
        page.get_by_label("Filter by status").select_option("waiting")
        expect(page.locator(".threads .empty")).to_have_text("No thread matches.")
        page.get_by_label("Filter by status").select_option("idle")
        expect(page.locator(".thread")).to_have_count(2)
        assert page.errors == []  # type: ignore[attr-defined]
    finally:
        page.context.close()
