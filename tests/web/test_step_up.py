"""Step-up for risky rules (RFC 9470's idea): an approval counts only from a single sign-on at
most the rule's `max_age` old.

The console sends an approver whose sign-in is older (or was a password) back through the
provider with `max_age` and `prompt=login`, and checks `auth_time` in the new token; the API
refuses an approval from a token (`step_up_required`), whoever holds it; rejecting needs no
step-up (it stops the call).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gate.config.settings import Settings
from tests.conftest import Gate
from tests.support import config as cfg
from tests.support.fake_oidc import FakeOidc
from tests.web.conftest import api_view, browser, post_decide, sign_in
from tests.web.sso import leave, query_of, serving, spare_port, sso_data, sso_signed_in


@pytest.fixture
def idp() -> Iterator[FakeOidc]:
    """The provider, running."""
    fake = FakeOidc().start()
    yield fake
    fake.stop()


@pytest.fixture
def sso_gate(idp: FakeOidc, db_url: str) -> Iterator[Gate]:
    """A gate with `[oidc]` and the step-up rule (`transfer_*`, five minutes), each database."""
    port = spare_port()
    with serving(Settings(**sso_data(db_url, idp, port)), port) as gate:
        yield gate


def ask_transfer(gate: Gate) -> str:
    """A call the step-up rule holds."""
    answer = gate.submit(
        tool_name="transfer_funds", tool_args={"amount": 250_000, "to": "acme"}, user_id="dave"
    )
    assert answer["decision"] == "ask", answer
    assert answer["request"]["options"]["step_up"] == {"max_age_seconds": 300.0, "acr": []}
    request_id: str = answer["request"]["id"]
    return request_id


def test_the_api_refuses_an_approval_that_cannot_prove_a_fresh_sign_in(sso_gate: Gate) -> None:
    rid = ask_transfer(sso_gate)
    for token in (cfg.ALICE, cfg.ADMIN):
        with sso_gate.client(token) as c:
            r = c.post(f"/v1/requests/{rid}/decision", json={"verdict": "approve"})
        assert r.status_code == 403, r.text
        error = r.json()["error"]
        assert error["code"] == "step_up_required"
        assert "single sign-on within the last 5 min" in error["message"]
        assert "API token" in error["message"]
    assert api_view(sso_gate, rid)["votes"] == []
    with sso_gate.client(cfg.BOB) as c:  # a reject stops the call: no step-up needed
        r = c.post(
            f"/v1/requests/{rid}/decision", json={"verdict": "reject", "comment": "not today"}
        )
    assert r.status_code == 200, r.text
    assert api_view(sso_gate, rid)["status"] == "rejected"


def test_a_password_sign_in_is_sent_to_sign_in_again(sso_gate: Gate) -> None:
    rid = ask_transfer(sso_gate)
    with sign_in(sso_gate, "alice") as client:
        page = client.get(f"/requests/{rid}").text
        assert 'id="step-up-sign-in"' in page and "password sign-in" in page
        r = post_decide(client, rid, verdict="approve")
        assert r.status_code == 403 and "single sign-on" in r.text
    assert api_view(sso_gate, rid)["votes"] == []


def test_an_old_sign_in_re_authenticates_at_the_provider(sso_gate: Gate, idp: FakeOidc) -> None:
    idp.last_auth_at = int(time.time()) - 3600  # alice signed in at the provider an hour ago
    rid = ask_transfer(sso_gate)
    with sso_signed_in(sso_gate, idp) as client:
        page = client.get(f"/requests/{rid}").text
        assert 'id="step-up-sign-in"' in page and "ago" in page
        assert post_decide(client, rid, verdict="approve").status_code == 403
        trip = leave(client, idp, f"/login/sso?request={rid}&next=/requests/{rid}")
        asked = query_of(trip.authorize)
        assert asked["max_age"] == "300" and asked["prompt"] == "login"
        done = trip.back()
        assert done.status_code == 303 and done.headers["location"] == f"/requests/{rid}"
        assert 'id="step-up-sign-in"' not in client.get(f"/requests/{rid}").text
        assert post_decide(client, rid, verdict="approve").status_code == 303
    view = api_view(sso_gate, rid)
    assert view["status"] == "approved"
    auth = view["votes"][0]["auth"]
    assert auth["kind"] == "oidc" and auth["auth_time"] is not None
    audit = sso_gate.state.service.view(rid, full=True)
    assert audit is not None
    assert [a.detail["auth"]["kind"] for a in audit.audit if a.kind == "approved"] == ["oidc"]


def test_a_provider_that_does_not_re_authenticate_signs_nobody_in(
    sso_gate: Gate, idp: FakeOidc
) -> None:
    idp.last_auth_at = int(time.time()) - 3600
    idp.honour_prompt = False  # it answers from its hour-old session, auth_time unchanged
    rid = ask_transfer(sso_gate)
    with browser(sso_gate) as client:
        trip = leave(client, idp, f"/login/sso?request={rid}&next=/requests/{rid}")
        r = trip.back()
        assert r.status_code == 401, r.text
        assert "did not ask you to sign in again" in r.text
        assert client.get("/").status_code == 303


def test_a_token_without_auth_time_cannot_step_up(sso_gate: Gate, idp: FakeOidc) -> None:
    idp.tamper = {"auth_time": None}
    rid = ask_transfer(sso_gate)
    with browser(sso_gate) as client:
        r = leave(client, idp, f"/login/sso?request={rid}").back()
        assert r.status_code == 401 and "no auth_time" in r.text


def test_a_step_up_query_names_a_request_not_a_duration(sso_gate: Gate, idp: FakeOidc) -> None:
    # The max_age sent is the request's rule's, read by gate: a query cannot lower the bar
    with browser(sso_gate) as client:
        trip = leave(client, idp, "/login/sso?request=not-a-request&max_age=999999")
        assert "max_age" not in query_of(trip.authorize)
