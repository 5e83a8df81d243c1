"""Batch decisions in a real browser (Chromium), at 1280 and 390 px: tick requests in the live
queue (ticks survive its refreshes), decide them with one reason, read each outcome."""

from __future__ import annotations

from tests.conftest import Gate
from tests.support import config as cfg
from tests.support.browser import BROWSER_TESTS
from tests.web.conftest import OpenPage, shot

pytestmark = BROWSER_TESTS


def ask(gate: Gate, amount: int) -> str:
    answer = gate.submit(tool_name="pay_vendor", tool_args={"amount": amount, "vendor": "acme"})
    return str(answer["request"]["id"])


def test_approve_from_the_queue_each_decided_or_refused(
    web_gate: Gate, open_page: OpenPage
) -> None:
    from playwright.sync_api import expect

    first, second = ask(web_gate, 60001), ask(web_gate, 60002)
    script = "\n".join(f"echo step {n}" for n in range(30))  # more lines than a row shows
    long = web_gate.submit(tool_name="Bash", tool_args={"command": script})["request"]["id"]
    page = open_page(web_gate, "alice").page
    expect(page.locator("#batch-count")).to_have_text("(none selected)")
    for rid in (first, second, long):
        page.check(f"#pick-{rid}")
    expect(page.locator("#batch-count")).to_have_text("(3 selected)")
    # a new request refreshes the live queue: the ticks stay
    third = ask(web_gate, 60003)
    expect(page.locator(f"#pick-{third}")).to_have_count(1)
    for rid in (first, second, long):
        expect(page.locator(f"#pick-{rid}")).to_be_checked()
    expect(page.locator(f"#pick-{third}")).not_to_be_checked()
    # bob decides one meanwhile: it leaves the queue, and the selection with it
    assert web_gate.decide(second, cfg.BOB, "approve").status_code == 200
    expect(page.locator(f"#pick-{second}")).to_have_count(0)
    expect(page.locator("#batch-count")).to_have_text("(2 selected)")
    page.fill("#batch-comment", "fine for this week")
    page.get_by_role("button", name="Approve selected").click()
    expect(page.locator("h1")).to_have_text("Approved 1 of 2 selected")
    expect(page.locator("#batch-results tbody tr")).to_have_count(2)
    expect(page.locator(f'tr[data-id="{first}"]')).to_contain_text("Approved by alice")
    refused = page.locator(f'tr[data-id="{long}"]')
    expect(refused).to_contain_text("Not decided")
    expect(refused).to_contain_text("too long to show here whole")
    shot(page, "web-batch.png", full_page=True)
    with web_gate.client(cfg.ADMIN) as c:
        assert c.get(f"/v1/requests/{first}").json()["status"] == "approved"
        assert c.get(f"/v1/requests/{long}").json()["status"] == "pending"
        assert c.get(f"/v1/requests/{third}").json()["status"] == "pending"


def test_approve_selected_on_a_phone(web_gate: Gate, open_page: OpenPage) -> None:
    from playwright.sync_api import expect

    ids = [ask(web_gate, 60000 + n) for n in (11, 12)]
    page = open_page(web_gate, "alice", viewport=(390, 844)).page
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    box = page.locator(f"#pick-{ids[0]}").bounding_box()
    assert box is not None and box["width"] >= 24 and box["height"] >= 24
    for rid in ids:
        page.check(f"#pick-{rid}")
    expect(page.locator("#batch-count")).to_have_text("(2 selected)")
    shot(page, "web-batch-queue-phone.png", full_page=True)
    page.get_by_role("button", name="Approve selected").click()
    expect(page.locator("h1")).to_have_text("Approved 2 of 2 selected")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "web-batch-phone.png", full_page=True)
    page.get_by_role("link", name="← Queue").click()
    expect(page.locator("#queue .empty")).to_have_count(1)
