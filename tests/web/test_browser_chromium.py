"""The Chromium the browser tests drive (tests/support/browser.py): Playwright's switches and
the suite's own, merged, and none of the browser's own pages a headless test never sees."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.support.browser import BROWSER_TESTS, DISABLED_FEATURES, ENABLED

pytestmark = BROWSER_TESTS

if TYPE_CHECKING or ENABLED:
    from playwright.sync_api import Browser


def test_chromium_disables_playwrights_features_and_the_suites(chromium: Browser) -> None:
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.goto("chrome://version")
        switches = page.locator("#command_line").inner_text().split()
        disabled = [s for s in switches if s.startswith("--disable-features=")]
        # one switch: of several, Chromium would honour only the last
        assert len(disabled) == 1, disabled
        features = disabled[0].removeprefix("--disable-features=").split(",")
        assert set(DISABLED_FEATURES) <= set(features)
        assert "PaintHolding" in features  # one of Playwright's
        # the new context has its page and no address bar popups beside it
        cdp = context.new_cdp_session(page)
        targets = cdp.send("Target.getTargets")["targetInfos"]
        assert [t["url"] for t in targets if t["type"] != "page"] == []
    finally:
        context.close()
