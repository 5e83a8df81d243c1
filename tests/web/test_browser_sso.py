"""Single sign-on in a real browser: Chromium signs in through the loopback provider, meets a
step-up rule's "sign in again", comes back re-authenticated, approves, and signs out at the
provider.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from gate.config.settings import Settings
from tests.conftest import Gate
from tests.support.browser import BROWSER_TESTS, ENABLED
from tests.support.fake_oidc import FakeOidc
from tests.web.conftest import api_view
from tests.web.sso import serving, spare_port, sso_data

pytestmark = BROWSER_TESTS

if ENABLED:
    from playwright.sync_api import Browser, expect


@pytest.fixture
def idp() -> Iterator[FakeOidc]:
    """The provider, running."""
    fake = FakeOidc().start()
    yield fake
    fake.stop()


@pytest.fixture
def sso_gate(idp: FakeOidc, sqlite_url: str) -> Iterator[Gate]:
    """A gate whose `[oidc]` is the provider, on the port its public_url names."""
    port = spare_port()
    with serving(Settings(**sso_data(sqlite_url, idp, port)), port) as gate:
        yield gate


def test_sign_in_step_up_approve_and_sign_out(
    chromium: Browser, sso_gate: Gate, idp: FakeOidc
) -> None:
    idp.last_auth_at = int(time.time()) - 3600  # alice's provider session is an hour old
    answer = sso_gate.submit(
        tool_name="transfer_funds", tool_args={"amount": 250_000, "to": "acme"}, user_id="dave"
    )
    rid = answer["request"]["id"]
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.goto(f"{sso_gate.url}/requests/{rid}")
        expect(page).to_have_url(re.compile(r"/login\?next="))
        page.click("#sso")  # off to the provider and back, signed in as alice
        expect(page).to_have_url(f"{sso_gate.url}/requests/{rid}")
        expect(page.locator("#step-up")).to_contain_text("ago")  # an hour-old sign-in
        page.click("#step-up-sign-in")  # through the provider again, max_age and prompt=login
        expect(page).to_have_url(f"{sso_gate.url}/requests/{rid}")
        assert idp.authorize_calls[-1]["prompt"] == "login"
        expect(page.locator("#step-up")).to_have_count(0)
        page.get_by_role("button", name="Approve", exact=True).click()
        expect(page.locator(".flash.ok")).to_contain_text("Approved by alice")
        expect(page.locator("td.auth").first).to_contain_text("single sign-on")
        page.get_by_role("button", name="Sign out").click()
        expect(page).to_have_url(f"{sso_gate.url}/login")
        assert idp.logout_calls and idp.logout_calls[-1]["client_id"] == "gate-console"
    finally:
        context.close()
    vote = api_view(sso_gate, rid)["votes"][0]
    assert vote["auth"]["kind"] == "oidc" and vote["approver"] == "alice"
