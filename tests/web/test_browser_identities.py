"""The Identities page in a real browser: Chromium signs in through the loopback provider
(whose ID token carries alice's Slack id), sees it bound by the provider, asks for a code to
link a second Slack account, the code is sent as Slack sends `/gate link`, the page then
lists the linked account, and Unbind ends it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gate.config.settings import Settings
from tests.conftest import Gate
from tests.support.browser import BROWSER_TESTS, ENABLED
from tests.support.fake_oidc import FakeOidc
from tests.support.fake_slack import FakeSlack
from tests.web.conftest import shot
from tests.web.identities import slash, with_slack
from tests.web.sso import serving, spare_port, sso_data

pytestmark = BROWSER_TESTS

if ENABLED:
    from playwright.sync_api import Browser, expect


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # slack-sdk sends every call through HTTP(S)_PROXY when set, ignoring NO_PROXY
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def idp() -> Iterator[FakeOidc]:
    """The provider, running; alice's ID token names her Slack id."""
    fake = FakeOidc().start()
    fake.user.extra = {"slack_id": "U9ALICESSO"}
    yield fake
    fake.stop()


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    """A fake Slack Web API on loopback."""
    fake = FakeSlack().start()
    yield fake
    fake.stop()


@pytest.fixture
def identities_gate(idp: FakeOidc, fake_slack: FakeSlack, sqlite_url: str) -> Iterator[Gate]:
    """Single sign-on with `identity_claims`, and Slack."""
    port = spare_port()
    data = sso_data(sqlite_url, idp, port, identity_claims={"slack": "slack_id"})
    with serving(Settings(**with_slack(data, fake_slack)), port) as gate:
        yield gate


def test_see_link_and_unbind_chat_identities(chromium: Browser, identities_gate: Gate) -> None:
    gate = identities_gate
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.goto(f"{gate.url}/identities")
        page.click("#sso")  # through the provider and back to the Identities page
        expect(page).to_have_url(f"{gate.url}/identities")
        from_idp = page.locator('tr[data-bound-by="idp_claim"]')
        expect(from_idp).to_contain_text("U9ALICESSO")
        expect(from_idp).to_contain_text("identity provider")
        expect(
            page.locator('tr[data-platform="slack"][data-bound-by="configured_id"]')
        ).to_contain_text("U0ALICE")
        page.get_by_role("button", name="Connect your Slack account").click()
        code = page.locator("#link-code code").inner_text()
        expect(page.locator("#link-code")).to_contain_text(f"/gate link {code}")
        shot(page, "identities-code.png")
        answer = slash(gate, "U9ALICEWORK", f"link {code}").json()
        assert answer["text"].startswith("Linked"), answer
        page.get_by_role("link", name="Identities").click()
        linked = page.locator('tr[data-bound-by="link"]')
        expect(linked).to_contain_text("U9ALICEWORK")
        expect(linked).to_contain_text("linked from gate")
        shot(page, "identities-linked.png")
        page.get_by_role("button", name="Unbind Slack U9ALICEWORK").click()
        expect(page.locator(".flash.ok")).to_contain_text("Unbound")
        expect(page.locator('tr[data-bound-by="link"]')).to_have_count(0)
        expect(page.locator('tr[data-bound-by="idp_claim"]')).to_have_count(1)
    finally:
        context.close()
