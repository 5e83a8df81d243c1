"""Passkeys in a real browser: Chromium's virtual authenticator (CDP `WebAuthn.enable`,
`WebAuthn.addVirtualAuthenticator`) registers a passkey on the Passkeys page and signs an
approval of a passkey rule's request, through the console's own script (`passkeys.js`).

The page is opened at http://localhost:<port> (`public_url`): browsers allow WebAuthn on
plain http only there, and refuse an IP address as the relying party id.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator

import pytest

from gate.config.settings import Settings
from tests.conftest import Gate
from tests.support import config as cfg
from tests.support.browser import BROWSER_TESTS, ENABLED
from tests.web.conftest import PASSWORDS, api_view
from tests.web.sso import PASSWORD_HASHES, serving, spare_port
from tests.web.test_passkeys import PASSKEY_RULES

pytestmark = BROWSER_TESTS

if ENABLED:
    from playwright.sync_api import Browser, expect


@pytest.fixture
def localhost_gate(sqlite_url: str) -> Iterator[Gate]:
    """A gate with the passkey rules whose public_url is http://localhost:<port>."""
    port = spare_port()
    data = cfg.settings_data(sqlite_url, public_url=f"http://localhost:{port}")
    data["rules"] = [*copy.deepcopy(PASSKEY_RULES), *data["rules"]]
    for approver in data["approvers"]:
        approver["password_hash"] = PASSWORD_HASHES[approver["name"]]
    with serving(Settings(**data), port) as gate:
        yield gate


def test_a_virtual_authenticator_adds_a_passkey_and_signs_an_approval(
    chromium: Browser, localhost_gate: Gate
) -> None:
    gate = localhost_gate
    base = gate.settings.server.base_url
    answer = gate.submit(tool_name="wire_out", tool_args={"amount": 5, "to": "acme"})
    rid = answer["request"]["id"]
    second = gate.submit(tool_name="wire_out", tool_args={"amount": 7, "to": "acme"})
    edited = second["request"]["id"]
    context = chromium.new_context()
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        cdp = context.new_cdp_session(page)
        cdp.send("WebAuthn.enable")
        added = cdp.send(
            "WebAuthn.addVirtualAuthenticator",
            {
                "options": {
                    "protocol": "ctap2",
                    "transport": "internal",
                    "hasResidentKey": True,
                    "hasUserVerification": True,
                    "isUserVerified": True,
                    "automaticPresenceSimulation": True,
                }
            },
        )
        page.goto(base + "/login?next=/passkeys")
        page.fill("#username", "alice")
        page.fill("#password", PASSWORDS["alice"])
        page.get_by_role("button", name="Sign in").click()
        expect(page).to_have_url(base + "/passkeys")
        page.fill("#passkey-label", "virtual key")
        page.click("#passkey-add-button")
        expect(page.locator(".flash.ok")).to_contain_text("Added the passkey 'virtual key'")
        expect(page.locator("#passkeys tbody tr")).to_have_count(1)
        stored = cdp.send("WebAuthn.getCredentials", {"authenticatorId": added["authenticatorId"]})
        assert len(stored["credentials"]) == 1

        page.goto(f"{base}/requests/{rid}")
        expect(page.locator("#passkey-needed")).to_be_visible()
        page.locator("#approve-form button[type=submit]").click()
        expect(page).to_have_url(re.compile(rf"/requests/{rid}$"))
        expect(page.locator(".flash.ok")).to_be_visible()

        # approve with edits: the review step first (app.js), then the passkey signs the
        # edited call
        page.goto(f"{base}/requests/{edited}")
        page.fill("#edited-args", '{"amount": 3, "to": "acme"}')
        page.click("#edit-review")
        expect(page.locator("#edit-confirm")).to_be_visible()
        page.click("#edit-send")
        expect(page.locator(".flash.ok")).to_contain_text("edited arguments")
        assert errors == []
    finally:
        context.close()
    view = api_view(gate, rid)
    assert view["status"] == "approved"
    auth = view["votes"][0]["auth"]
    assert auth["kind"] == "webauthn" and auth["signed_in_by"] == "password"
    view = api_view(gate, edited)
    assert view["status"] == "approved" and view["approved_args"] == {"amount": 3, "to": "acme"}
    assert view["votes"][0]["auth"]["kind"] == "webauthn"
