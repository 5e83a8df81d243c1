"""In a real browser: the Webhooks page in the top bar, a dead message with its error, and its
Resend button delivering it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gate.config.settings import WebhookSettings
from tests.conftest import GateFactory
from tests.support.browser import BROWSER_TESTS, ENABLED
from tests.support.fake_webhooks import SECRET, FakeReceiver
from tests.support.servers import wait_until
from tests.web.conftest import OpenPage, shot, web_settings

pytestmark = BROWSER_TESTS

if ENABLED:
    from playwright.sync_api import expect


@pytest.fixture
def receiver() -> Iterator[FakeReceiver]:
    fake = FakeReceiver().start()
    yield fake
    fake.stop()


def test_a_dead_message_is_resent_from_the_page(
    make_gate: GateFactory, sqlite_url: str, open_page: OpenPage, receiver: FakeReceiver
) -> None:
    receiver.fail_with(503)
    hook = WebhookSettings(
        name="audit-feed", url=receiver.url, secret=SECRET, events=["created"], max_attempts=1
    )
    settings = web_settings(sqlite_url).model_copy(update={"webhooks": [hook]})
    gate = make_gate(settings=settings)
    request_id = gate.submit(tool_name="pay_vendor", tool_args={"amount": 60000})["request"]["id"]
    wait_until(lambda: len(receiver.attempts) == 1)

    watched = open_page(gate, "alice")
    page = watched.page
    page.get_by_role("link", name="Webhooks").click()
    row = page.locator("#webhook-messages tbody tr").first
    expect(row).to_have_attribute("data-status", "dead")
    expect(row).to_contain_text("HTTP 503")
    expect(row.get_by_role("link", name=request_id)).to_be_visible()
    shot(page, "webhooks-page.png", full_page=True)

    receiver.heal()
    page.get_by_role("button", name="Resend the created message to audit-feed").click()
    expect(page.locator(".flash.ok")).to_contain_text("Resending created message")
    wait_until(lambda: len(receiver.taken) == 1)
    assert receiver.taken[0].msg_id == receiver.attempts[0].msg_id
    wait_until(lambda: (page.reload(), row.get_attribute("data-status") == "sent")[1], timeout=10)
    assert watched.errors == []
