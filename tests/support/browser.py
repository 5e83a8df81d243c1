"""Debian's Chromium under Playwright, for the browser tests (the console's and email's).

`BROWSER_TESTS` is the module mark: the tests run when GATE_TEST_BROWSER=1 or
/usr/bin/chromium exists (CI sets the variable and installs the package). Playwright never
downloads a browser here; it launches Debian's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser

CHROMIUM = "/usr/bin/chromium"
#: what Playwright starts: CHROMIUM, with the --disable-features switches merged (see the script)
LAUNCHER = Path(__file__).with_name("chromium.sh")
#: browser features headless tests never see and that cost CPU: Chromium 156 builds each new
#: context's address bar popups (two WebUI pages, each in a renderer process of its own),
#: about half the CPU of a new context and its first page. Pages draw the same without them.
DISABLED_FEATURES = ("WebUIOmniboxPopup", "WebUIOmniboxAimPopup")
ENABLED = os.environ.get("GATE_TEST_BROWSER") == "1" or Path(CHROMIUM).exists()

#: `pytestmark = BROWSER_TESTS` in a module of browser tests
BROWSER_TESTS = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not ENABLED,
        reason=f"browser tests need Chromium at {CHROMIUM} (apt-get install chromium) "
        "or GATE_TEST_BROWSER=1",
    ),
]


def launched() -> Iterator[Browser]:
    """Start Playwright, launch headless Chromium, yield it; close both afterwards.

    The body of a `chromium` fixture, at the scope its caller picks. Not session scope: while
    Playwright's sync API is started it leaves its event loop marked running in the test
    thread, between calls too, so a test that runs a loop of its own there (`asyncio.run`,
    `anyio.run`, pytest-asyncio) fails with "cannot be called from a running event loop".
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=LAUNCHER,
            args=[
                "--disable-features=" + ",".join(DISABLED_FEATURES),
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield b
        b.close()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    """One headless Chromium for the module (Debian's; Playwright never downloads one)."""
    yield from launched()
