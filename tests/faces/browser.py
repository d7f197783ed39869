"""A real Chromium (the distribution's package) driven by Playwright for Python."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from playwright.async_api import Browser, Page, async_playwright, expect

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# The machine running the suite may be busy: waits are generous, they never pace a test.
WAIT_MS = 20_000
expect.set_options(timeout=WAIT_MS)


def chromium_path() -> str:
    """``CHROMIUM`` or the distribution's ``chromium`` (``make test`` installs it)."""
    found = (
        os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    )
    if not found:
        raise RuntimeError(
            "no Chromium: install the distribution's package (apt-get install chromium)"
        )
    return found


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=chromium_path(), args=CHROMIUM_FLAGS, headless=True
        )
        try:
            yield browser
        finally:
            await browser.close()


@asynccontextmanager
async def playground(browser: Browser, gateway_url: str, session_id: str) -> AsyncIterator[Page]:
    """A fresh page (its own storage) on ``/playground`` at ``session_id``."""
    context = await browser.new_context()
    context.set_default_timeout(WAIT_MS)
    page = await context.new_page()
    await page.goto(f"{gateway_url}/playground#session={session_id}")
    try:
        yield page
    finally:
        await context.close()


async def send(page: Page, text: str, agent: str = "") -> None:
    """Type ``text`` in the composer (``agent`` picked, else routed) and send it."""
    if agent:
        await page.get_by_test_id("agent-choice").select_option(agent)
    await page.get_by_test_id("message").fill(text)
    await page.get_by_test_id("send").click()


async def settled(page: Page, status: str = "completed") -> None:
    """Wait for the turn's ``done`` with ``status``."""
    await expect(page.get_by_test_id("connection")).to_have_attribute("data-status", status)
