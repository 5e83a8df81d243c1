"""The Decisions page in a real browser (Chromium): filtering, and readable at 390 px."""

from __future__ import annotations

from tests.conftest import Gate
from tests.support.browser import BROWSER_TESTS
from tests.web.conftest import OpenPage, shot
from tests.web.test_decisions_page import calls

pytestmark = BROWSER_TESTS


def test_in_a_browser_at_desktop_and_phone_widths(web_gate: Gate, open_page: OpenPage) -> None:
    from playwright.sync_api import expect

    calls(web_gate)
    page = open_page(web_gate, "alice").page
    page.get_by_role("link", name="Decisions").click()
    expect(page.locator("h1")).to_have_text("Decisions")
    expect(page.locator("table.decisions tbody tr")).to_have_count(3)
    page.select_option("#d-answer", "ask")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("table.decisions tbody tr")).to_have_count(1)
    expect(page.locator("table.decisions")).to_contain_text("ask_ops")
    shot(page, "web-decisions.png", full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(web_gate.url + "/decisions")
    expect(page.locator("table.decisions tbody tr")).to_have_count(3)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "web-decisions-phone.png", full_page=True)
