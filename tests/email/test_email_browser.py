"""The link in a received mail, opened in a real browser: Playwright driving Debian's Chromium.

Skipped unless GATE_TEST_BROWSER=1 or /usr/bin/chromium exists, like tests/web/test_browser.py.
The mail comes from the real SMTP server on loopback; the page is gate's, over HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import Gate
from tests.email.conftest import ADDRESSES, ask, links, local, state, wait_mail
from tests.support.browser import BROWSER_TESTS, ENABLED
from tests.support.fake_smtp import FakeSMTP
from tests.support.servers import wait_until

pytestmark = BROWSER_TESTS

if ENABLED:
    from playwright.sync_api import Browser, Page, expect


@pytest.fixture
def page(chromium: Browser) -> Iterator[Page]:
    """A fresh browser context: no cookies, nothing signed in (the link is the credential)."""
    context = chromium.new_context()
    errors: list[str] = []
    tab = context.new_page()
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: errors.append(str(e)))
    yield tab
    context.close()
    # No CSP violation, no script error, nothing missing. (Chromium also logs each 4xx
    # answer to a form; a form sent back with its errors is a 422 on purpose.)
    assert [e for e in errors if "status of 422" not in e] == []


def test_approve_from_the_mail(email_gate: Gate, smtp: FakeSMTP, page: Page) -> None:
    request_id = ask(email_gate, summary="Pay acme 60k")
    mail = wait_mail(smtp, request_id, ADDRESSES["alice"])
    page.goto(local(links(mail)["approve"], email_gate))
    expect(page.locator("h1")).to_have_text("Review this request")
    expect(page.locator("#acting-as")).to_have_text(ADDRESSES["alice"])
    expect(page.locator("main")).to_contain_text("Pay acme 60k")
    assert state(email_gate, request_id)["status"] == "pending"  # opening decided nothing
    page.get_by_role("button", name="Approve this call").click()
    expect(page.locator("#answer")).to_contain_text("Approved by alice in email")
    now = state(email_gate, request_id)
    assert (now["status"], now["decided_by"], now["decided_via"]) == ("approved", "alice", "email")
    # Back to the page (never cached: it is fetched again): it says so, with no form left.
    page.go_back()
    expect(page.locator("#answer")).to_contain_text("Already approved by alice")
    expect(page.get_by_role("button")).to_have_count(0)


def test_reject_from_the_mail_needs_a_reason(email_gate: Gate, smtp: FakeSMTP, page: Page) -> None:
    request_id = ask(email_gate, "refund_order", {"amount": 900})
    mail = wait_mail(smtp, request_id, ADDRESSES["bob"])
    page.goto(local(links(mail)["reject"], email_gate))
    page.get_by_role("button", name="Reject").click()
    expect(page.locator("#answer")).to_contain_text("Type a reason")
    assert state(email_gate, request_id)["votes"] == []
    page.get_by_label("too expensive").check()
    page.get_by_label("Why (the agent is told)").fill("Ask finance first")
    page.get_by_role("button", name="Reject").click()
    expect(page.locator("#answer")).to_contain_text("Rejected by bob in email")
    now = wait_until(lambda: (s := state(email_gate, request_id))["status"] == "rejected" and s)
    assert "too expensive" in now["reason"] and "Ask finance first" in now["reason"]
    # The outcome mail follows, with no links left in it.
    outcome = wait_mail(smtp, request_id, ADDRESSES["bob"], count=2)
    assert links(outcome) == {}
