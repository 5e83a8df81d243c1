"""Single sign-on against a real OpenID Connect provider on loopback (`tests/support/fake_oidc`).

A sign-in succeeds only when everything checks out: the discovery document's issuer, the ID
token's signature (RS256, a key from the JWKS, fetched again when the provider rotates),
issuer, audience, expiry, and the nonce this browser sent; the state the provider returns
must be this browser's. Each failure is a page saying what failed (never a 500) and signs
nobody in. The sign-in is recorded with how it was made, on the vote and in the audit.
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import Iterator

import httpx
import pytest

from gate.base.errors import ConfigError
from gate.config.settings import load_settings
from tests.conftest import Gate
from tests.support import config as cfg
from tests.support.fake_oidc import CLIENT_ID, FakeOidc
from tests.web.conftest import api_view, browser, csrf_of, post_decide, sign_in, submit_refund
from tests.web.sso import leave, query_of, serving, spare_port, sso_data, sso_signed_in


@pytest.fixture
def idp() -> Iterator[FakeOidc]:
    """The provider, running."""
    fake = FakeOidc().start()
    yield fake
    fake.stop()


@pytest.fixture
def sso_gate(idp: FakeOidc, db_url: str) -> Iterator[Gate]:
    """A gate with `[oidc]` on each database."""
    from gate.config.settings import Settings

    port = spare_port()
    with serving(Settings(**sso_data(db_url, idp, port)), port) as gate:
        yield gate


def refused(response: httpx.Response, status: int, words: str) -> None:
    """A refusal page: the status, the words, and no session behind it."""
    assert response.status_code == status, response.text
    assert "Not signed in" in response.text or "Not an approver" in response.text
    assert words in response.text.replace("&#39;", "'"), response.text


# -- success ---------------------------------------------------------------------------------


def test_sign_in_through_the_provider_records_how(sso_gate: Gate, idp: FakeOidc) -> None:
    with browser(sso_gate) as client:
        trip = leave(client, idp, "/login/sso?next=/history")
        asked = query_of(trip.authorize)
        # the authorization code flow with PKCE (S256), a nonce, and a state of this browser's
        assert asked["response_type"] == "code" and asked["client_id"] == CLIENT_ID
        assert asked["code_challenge_method"] == "S256" and len(asked["code_challenge"]) == 43
        assert asked["nonce"] and asked["state"] and "prompt" not in asked
        assert asked["redirect_uri"] == sso_gate.settings.server.base_url + "/login/sso/callback"
        done = trip.back()
        assert done.status_code == 303 and done.headers["location"] == "/history"
        assert idp.token_calls[-1]["code_verifier"]  # PKCE's verifier went with the code
        assert client.get("/").status_code == 200
        rid = submit_refund(sso_gate)
        r = post_decide(client, rid, verdict="approve")
        assert r.status_code == 303, r.text
    vote = api_view(sso_gate, rid)["votes"][0]
    assert vote["approver"] == "alice"
    assert vote["auth"]["kind"] == "oidc"
    assert vote["auth"]["issuer"] == idp.issuer and vote["auth"]["subject"] == idp.user.sub
    assert vote["auth"]["auth_time"] is not None
    view = sso_gate.state.service.view(rid, full=True)
    assert view is not None
    decided = [a for a in view.audit if a.kind == "approved"]
    assert decided[0].detail["auth"]["kind"] == "oidc"


def test_passwords_keep_working_beside_single_sign_on(sso_gate: Gate) -> None:
    with browser(sso_gate) as client:
        page = client.get("/login")
        assert 'id="sso"' in page.text and 'name="password"' in page.text
    with sign_in(sso_gate, "bob") as client:
        rid = submit_refund(sso_gate)
        assert post_decide(client, rid, verdict="approve").status_code == 303
    assert api_view(sso_gate, rid)["votes"][0]["auth"] == {
        "kind": "password",
        **dict.fromkeys(
            ("issuer", "subject", "auth_time", "acr", "platform", "user_id", "bound_by", "token")
            + ("credential_id", "signed_in_by")
        ),
    }


def test_sign_out_ends_the_sign_in_and_visits_the_provider(sso_gate: Gate, idp: FakeOidc) -> None:
    with sso_signed_in(sso_gate, idp) as client:
        token = csrf_of(client.get("/").text)
        out = client.post("/logout", data={"csrf_token": token})
        # a page that moves on to the provider (the CSP's form-action stops a redirect there)
        assert out.status_code == 200, out.text
        found = re.search(r'id="provider-logout" href="([^"]+)"', out.text)
        assert found is not None
        location = html.unescape(found.group(1))
        assert location.startswith(idp.issuer + "/logout?")
        assert query_of(location)["client_id"] == CLIENT_ID
        assert query_of(location)["post_logout_redirect_uri"].endswith("/login")
        assert client.get("/").status_code == 303  # signed out in gate, whatever the provider


# -- every doubt refuses -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("claims", "words"),
    [
        ({"iss": "https://evil.example"}, "iss"),
        ({"aud": "another-client"}, "aud"),
        ({"exp": int(time.time()) - 3600, "iat": int(time.time()) - 4000}, "expired"),
        ({"nonce": "a-nonce-from-another-sign-in"}, "nonce"),
        ({"iat": int(time.time()) + 3600}, "future"),
        ({"aud": [CLIENT_ID, "another-client"]}, "azp"),
    ],
    ids=["wrong-issuer", "wrong-audience", "expired", "other-nonce", "future-iat", "no-azp"],
)
def test_a_token_that_does_not_check_out_signs_nobody_in(
    sso_gate: Gate, idp: FakeOidc, claims: dict[str, object], words: str
) -> None:
    idp.tamper = claims
    with browser(sso_gate) as client:
        trip = leave(client, idp)
        refused(trip.back(), 401, words)
        assert client.get("/").status_code == 303  # still signed out


def test_a_replayed_nonce_signs_nobody_in(sso_gate: Gate, idp: FakeOidc) -> None:
    idp.reuse_codes = True  # the provider would hand the same token out again
    with browser(sso_gate) as client:
        trip = leave(client, idp)
        assert trip.back().status_code == 303
        # The attacker replays the callback with the session cookie from before it was used.
        client.cookies.clear()
        client.cookies.set("gate_session", trip.cookie_before)
        refused(trip.back(), 401, "nonce was used before")


def test_a_state_not_of_this_browser_is_refused_before_any_exchange(
    sso_gate: Gate, idp: FakeOidc
) -> None:
    with browser(sso_gate) as client:
        trip = leave(client, idp)
        forged = trip.callback.replace("state=", "state=x")
        refused(trip.back(forged), 400, "not started in this browser")
        assert idp.token_calls == []  # the code was never exchanged
        # ...and the state is gone: the real callback finds nothing to finish either
        refused(trip.back(), 400, "not started in this browser")
    with browser(sso_gate) as stranger:  # a callback in a browser that never left
        refused(stranger.get(trip.callback), 400, "not started in this browser")


def test_keys_rotated_at_the_provider_are_fetched_again(sso_gate: Gate, idp: FakeOidc) -> None:
    with sso_signed_in(sso_gate, idp):
        pass
    fetched = idp.jwks_fetches
    idp.rotate()
    with sso_signed_in(sso_gate, idp) as client:
        assert client.get("/").status_code == 200
    assert idp.jwks_fetches == fetched + 1
    idp.sign_with_unpublished()  # a key the provider never published: refused after a look
    with browser(sso_gate) as client:
        refused(leave(client, idp).back(), 401, "not in the JWKS")
    assert idp.jwks_fetches == fetched + 2


def test_an_email_of_nobody_in_approvers_is_a_clear_refusal(sso_gate: Gate, idp: FakeOidc) -> None:
    idp.user.email = "stranger@example.com"
    with browser(sso_gate) as client:
        refused(leave(client, idp).back(), 403, "stranger@example.com")
        assert client.get("/").status_code == 303


def test_an_unverified_email_signs_nobody_in(sso_gate: Gate, idp: FakeOidc) -> None:
    idp.user.email_verified = False
    with browser(sso_gate) as client:
        refused(leave(client, idp).back(), 403, "a verified one")


def test_the_provider_refusing_is_a_page(sso_gate: Gate, idp: FakeOidc) -> None:
    with browser(sso_gate) as client:
        trip = leave(client, idp)
        state = query_of(trip.callback)["state"]
        base = trip.callback.split("?")[0]
        refused(client.get(f"{base}?error=access_denied&state={state}"), 401, "access_denied")


def test_a_provider_claiming_another_issuer_is_refused(sso_gate: Gate, idp: FakeOidc) -> None:
    idp.discovery_issuer = "https://elsewhere.example"
    with browser(sso_gate) as client:
        r = client.get("/login/sso")
        assert r.status_code == 502 and "elsewhere.example" in r.text


# -- subjects and groups -----------------------------------------------------------------------


def test_approver_by_subject_and_groups_from_the_provider(idp: FakeOidc, sqlite_url: str) -> None:
    from gate.config.settings import Settings

    port = spare_port()
    oidc = {
        "approver_claim": "sub",
        "groups_claim": "groups",
        "group_map": {"idp-finance-approvers": ["finance"]},
    }
    idp.user.sub, idp.user.email = "sub-mallory-0004", "someone-else@example.com"
    idp.user.groups = ["idp-finance-approvers", "idp-everyone"]
    with serving(Settings(**sso_data(sqlite_url, idp, port, **oidc)), port) as gate:
        rid = submit_refund(gate)  # the refunds rule names group:finance; mallory is not in it
        with sign_in(gate, "mallory") as password_client:  # by password: not in the group
            page = password_client.get(f"/requests/{rid}").text
            assert "not an approver" in page
        with sso_signed_in(gate, idp) as client:  # the provider puts her in it
            assert post_decide(client, rid, verdict="approve").status_code == 303
        vote = api_view(gate, rid)["votes"][0]
        assert vote["approver"] == "mallory" and vote["auth"]["subject"] == "sub-mallory-0004"


def test_a_step_up_rule_without_oidc_is_a_config_error(tmp_path: object, sqlite_url: str) -> None:
    data = cfg.settings_data(sqlite_url)
    data["rules"].append({"name": "risky", "tools": ["x_*"], "step_up": {"max_age": "5m"}})
    with pytest.raises(ConfigError) as caught:
        load_settings(None, **data)
    assert "step_up needs single sign-on" in str(caught.value)
