"""``adk web`` on chatledger, driven in a real headless browser: ADK's dev UI, served by
``adk web`` (a subprocess) with ``--session_service_uri chatledger+sqlite:///…`` and an
agents directory whose ``services.py`` registers chatledger, shows a session stored
in chatledger's tables, its events' text, and a turn typed into it is stored there.

The browser is Debian's chromium (``/usr/bin/chromium``), driven by Playwright's
Python client (never a browser Playwright downloads)."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from google.adk.events import Event
from google.genai import types
from playwright.async_api import BrowserContext, async_playwright
from sqlalchemy.engine import URL

from chatledger.adk import LedgerSessionService

from .support.adk_server import adk_server, agents_dir, session_uri

CHROMIUM = Path("/usr/bin/chromium")
#: The launch flags of a browser that reaches nothing but the loopback server.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REPLY = "Your parcel left the depot on Tuesday."

# CI installs chromium (.ci/run), so there a missing one fails the test; elsewhere it is skipped.
pytestmark = [
    pytest.mark.one_transaction_at_a_time,
    pytest.mark.skipif(
        not os.environ.get("CI") and (not CHROMIUM.exists() or shutil.which("chromium") is None),
        reason="Debian's chromium is not installed (apt-get install chromium chromium-driver)",
    ),
]


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[BrowserContext]:
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),  # a fresh --user-data-dir
            executable_path=str(CHROMIUM),
            headless=True,
            args=FLAGS,
        )
        try:
            yield context
        finally:
            await context.close()


async def test_adk_web_shows_a_chatledger_sessions_events(browser: BrowserContext, tmp_path: Path) -> None:
    url = URL.create("sqlite+aiosqlite", database=str(tmp_path / "ledger.sqlite3"))
    async with LedgerSessionService(url) as service:
        session = await service.create_session(app_name="shop", user_id="u1", session_id="s-web")
        for author, said in (("user", "Where is my parcel?"), ("shop", "Let me look that up.")):
            role = "user" if author == "user" else "model"
            content = types.Content(role=role, parts=[types.Part(text=said)])
            await service.append_event(session, Event(author=author, invocation_id="inv-1", content=content))
    agents = agents_dir(tmp_path, "shop", REPLY)
    with adk_server("web", agents, session_uri(url.render_as_string(hide_password=False))) as server:
        page = await browser.new_page()
        await page.goto(f"{server.base}/dev-ui/?app=shop&userId=u1&session=s-web")
        await page.get_by_text("Where is my parcel?").first.wait_for(timeout=60_000)
        await page.get_by_text("Let me look that up.").first.wait_for(timeout=60_000)
        await page.screenshot(path=str(tmp_path / "adk-web.png"))
        # A turn typed into the page: the scripted model answers, and both are stored.
        box = page.locator("textarea").first
        await box.fill("And when will it arrive?")
        await box.press("Enter")
        await page.get_by_text(REPLY).first.wait_for(timeout=60_000)
    async with LedgerSessionService(url) as service:
        stored = await service.get_session(app_name="shop", user_id="u1", session_id="s-web")
    assert stored is not None
    texts = [part.text for event in stored.events if event.content for part in event.content.parts or []]
    assert texts == ["Where is my parcel?", "Let me look that up.", "And when will it arrive?", REPLY]
