"""Headless Chromium for the console's browser tests, driven by Playwright for Python.

The browser is Debian's ``chromium`` (``scripts/setup-browser.sh`` installs it when missing),
never one of Playwright's downloads. It starts with an empty profile of its own and with its
background services off: the test machines have no outside network, and Chromium's update,
sync and QUIC probes would otherwise hang or fail there.

Screenshots go to ``$LONGBOAT_TEST_ARTIFACTS/console/`` when that variable is set (CI keeps
that folder), else to the test session's temporary directory; ``shoot`` returns the path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from playwright.sync_api import BrowserContext, Page, sync_playwright

REPO = Path(__file__).resolve().parents[3]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_or_install() -> str:
    if not Path(CHROMIUM).exists():
        subprocess.run([str(REPO / "scripts" / "setup-browser.sh")], check=True, timeout=900)
    assert Path(CHROMIUM).exists() or shutil.which("chromium"), (
        "scripts/setup-browser.sh did not install chromium"
    )
    return CHROMIUM


@contextmanager
def browser(profile_dir: Path, *, ignore_https_errors: bool = False) -> Iterator[BrowserContext]:
    """A headless Chromium with an empty profile in ``profile_dir``; ``ignore_https_errors``
    for a secure test cluster, whose CA the browser does not know."""
    exe = chromium_or_install()
    profile_dir.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(profile_dir),
            executable_path=exe,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1000},
            ignore_https_errors=ignore_https_errors,
        )
        try:
            yield ctx
        finally:
            ctx.close()


def artifacts_dir(fallback: Path) -> Path:
    env = os.environ.get("LONGBOAT_TEST_ARTIFACTS")
    d = Path(env) / "console" if env else fallback
    d.mkdir(parents=True, exist_ok=True)
    return d


def open_page(page: Page, url: str, name: str, timeout_ms: float = 20_000) -> None:
    """Go to ``url`` (a console route) and wait until page ``name`` has drawn."""
    page.goto(url)
    wait_drawn(page, name, timeout_ms)


def wait_drawn(page: Page, name: str, timeout_ms: float = 20_000) -> None:
    page.wait_for_selector(f'main[data-page="{name}"][data-ready]', timeout=timeout_ms)


def drawn_route(page: Page) -> str | None:
    """Which route drawing the page shows (``main``'s ``data-ready``: a route counter)."""
    return page.get_attribute("main", "data-ready")


def wait_redrawn(page: Page, name: str, before: str | None, timeout_ms: float = 20_000) -> None:
    """Wait until page ``name`` has drawn for a route later than ``before`` (after a click
    that changes the route: the old drawing must not pass for the new one)."""
    page.wait_for_selector(
        f'main[data-page="{name}"][data-ready]:not([data-ready="{before}"])', timeout=timeout_ms
    )


def timings(page: Page) -> list[dict[str, Any]]:
    """``[{page, ms, since_navigation_ms}]``: when each route finished its first drawing."""
    out: list[dict[str, Any]] = page.evaluate("window.consoleTimings")
    return out
