"""Chat identities bound outside gate.toml (`gate.decisions.identities`), end to end on each
database: the identity provider's claims at a single sign-on (the loopback provider issues
them), the one-time link code from the console sent through Slack's `/gate link` (signed the
way Slack signs, to a real gate with the real Slack channel and a fake Slack), the
Identities page and its Unbind, and a Slack click counted as the bound approver with how
it was bound on the vote.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator

import httpx
import pytest

from gate.config.settings import Settings
from tests.conftest import Gate, GateFactory
from tests.slack.conftest import block_actions, card_for, interact
from tests.support import config as cfg
from tests.support.fake_oidc import FakeOidc
from tests.support.fake_slack import FakeSlack
from tests.support.http import TLS
from tests.web.conftest import (
    _HASHES,
    WEB_RULES,
    api_view,
    csrf_of,
    flash_error,
    landed,
    sign_in,
    submit_refund,
)
from tests.web.identities import code_on, rows, slash, with_slack
from tests.web.sso import serving, spare_port, sso_data, sso_signed_in

#: bob's Slack id in these tests: gate.toml does not name it, so only a binding makes it his
BOB_SLACK = "U9BOBNEW"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # slack-sdk sends every call through HTTP(S)_PROXY when set, ignoring NO_PROXY
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    """A fake Slack Web API on loopback."""
    fake = FakeSlack().start()
    yield fake
    fake.stop()


@pytest.fixture
def idp() -> Iterator[FakeOidc]:
    """The identity provider, running."""
    fake = FakeOidc().start()
    yield fake
    fake.stop()


@pytest.fixture
def link_gate(make_gate: GateFactory, db_url: str, fake_slack: FakeSlack) -> Gate:
    """Password sign-in, the web rules and Slack, on each database."""
    data = cfg.settings_data(db_url)
    data["rules"] = copy.deepcopy(WEB_RULES) + data["rules"]
    for approver in data["approvers"]:
        approver["password_hash"] = _HASHES[approver["name"]]
    return make_gate(settings=Settings(**with_slack(data, fake_slack)))


def slack_click(gate: Gate, fake: FakeSlack, request_id: str, user: str) -> None:
    """Click Approve on the request's Slack card as `user`."""
    card = card_for(fake, request_id)
    assert interact(gate, block_actions(request_id, user, message=card)).status_code == 200


def test_a_code_sent_through_slack_binds_the_senders_id(
    link_gate: Gate, fake_slack: FakeSlack
) -> None:
    gate = link_gate
    # before: gate does not know the Slack id, so its click is nobody's
    before = submit_refund(gate)
    slack_click(gate, fake_slack, before, BOB_SLACK)
    assert api_view(gate, before)["status"] == "pending"
    with sign_in(gate, "bob") as client:
        page = client.get("/identities")
        assert page.status_code == 200 and rows(page.text) == [("feishu", "configured_id")]
        assert 'id="link-slack"' in page.text  # the Slack channel takes codes
        asked = client.post(
            "/identities/link", data={"csrf_token": csrf_of(page.text), "platform": "slack"}
        )
        assert asked.status_code == 200, asked.text
        code = code_on(asked.text)
        assert f"/gate link {code}" in asked.text and "10 minutes" in asked.text
        # a wrong signature is refused before anything is read; the code still works after
        assert slash(gate, BOB_SLACK, f"link {code}", secret="wrong").status_code == 401
        # sent in another letter case, without its dash: the same code
        answer = slash(gate, BOB_SLACK, f"link {code.replace('-', '').lower()}")
        assert answer.status_code == 200
        assert answer.json()["response_type"] == "ephemeral"
        assert answer.json()["text"].startswith("Linked: your Slack clicks now count as bob")
        # once only: the same code again (from anyone) binds nothing
        again = slash(gate, "U9MALLORY", f"link {code}").json()["text"]
        assert "not valid" in again
        assert "Usage" in slash(gate, BOB_SLACK, "hello").json()["text"]
        listed = client.get("/identities").text
        assert ("slack", "link") in rows(listed) and BOB_SLACK in listed
        # the click now counts as bob's, recorded as bound by a link
        slack_click(gate, fake_slack, before, BOB_SLACK)
        vote = api_view(gate, before)["votes"][0]
        assert vote["approver"] == "bob" and vote["auth"]["bound_by"] == "link"
        assert vote["auth"]["user_id"] == BOB_SLACK
        # a call asked for under that Slack id is bob's own: he cannot approve it from there
        own = submit_refund(gate, user_id=BOB_SLACK)
        slack_click(gate, fake_slack, own, BOB_SLACK)
        assert api_view(gate, own)["status"] == "pending"
        # unbind: the id is nobody's again, and the ended binding stays on record
        found = re.search(r'action="/identities/(\d+)/unbind"', listed)
        assert found is not None
        done = client.post(
            f"/identities/{found.group(1)}/unbind", data={"csrf_token": csrf_of(listed)}
        )
        page = landed(client, done, "/identities")
        assert "Unbound" in page.text and BOB_SLACK not in page.text
        twice = client.post(
            f"/identities/{found.group(1)}/unbind", data={"csrf_token": csrf_of(page.text)}
        )
        assert "Nothing to unbind" in flash_error(landed(client, twice, "/identities").text)
    after = submit_refund(gate)
    slack_click(gate, fake_slack, after, BOB_SLACK)
    assert api_view(gate, after)["status"] == "pending"
    from gate.store.identities import IDENTITY

    with gate.state.db.read() as session:
        [kept] = session.execute(IDENTITY.select()).all()
    assert (kept.approver, kept.bound_by, kept.unbound_by) == ("bob", "link", "bob")


def test_a_code_binds_only_a_free_id_on_its_own_platform(
    link_gate: Gate, fake_slack: FakeSlack
) -> None:
    gate = link_gate
    with sign_in(gate, "bob") as client:
        token = csrf_of(client.get("/identities").text)

        def code() -> str:
            page = client.post("/identities/link", data={"csrf_token": token, "platform": "slack"})
            return code_on(page.text)

        # alice's Slack id is hers in gate.toml: bob cannot take it over
        taken = slash(gate, "U0ALICE", f"link {code()}").json()["text"]
        assert "belongs to another approver in gate.toml" in taken
        # a platform gate has no channel for is not offered
        r = client.post("/identities/link", data={"csrf_token": token, "platform": "teams"})
        assert r.status_code == 400 and "cannot link" in flash_error(r.text)
        # a form without the session's CSRF token changes nothing
        forged = client.post("/identities/link", data={"csrf_token": "x", "platform": "slack"})
        assert forged.status_code == 403
    # signed out: the way to sign in
    out = httpx.get(gate.url + "/identities", verify=TLS)
    assert out.status_code == 303 and out.headers["location"].startswith("/login")


def test_the_identity_providers_claims_bind_chat_ids_at_sign_in(
    idp: FakeOidc, db_url: str, fake_slack: FakeSlack
) -> None:
    claims = {"slack": "slack_id", "telegram": "telegram_id"}
    port = spare_port()
    data = with_slack(sso_data(db_url, idp, port, identity_claims=claims), fake_slack)
    with serving(Settings(**data), port) as gate:
        idp.user.extra = {"slack_id": "U9ALICE", "telegram_id": 4242}
        with sso_signed_in(gate, idp) as client:
            page = client.get("/identities").text
        assert ("slack", "idp_claim") in rows(page) and ("telegram", "idp_claim") in rows(page)
        assert "U9ALICE" in page and "4242" in page and "slack_id" in page
        request_id = submit_refund(gate)
        slack_click(gate, fake_slack, request_id, "U9ALICE")
        vote = api_view(gate, request_id)["votes"][0]
        assert vote["approver"] == "alice"
        assert (vote["auth"]["bound_by"], vote["auth"]["user_id"]) == ("idp_claim", "U9ALICE")
        # the provider's word changes: the next sign-in replaces the binding; carol's id in
        # gate.toml is never taken over, and a claim no longer sent ends its binding
        idp.user.extra = {"slack_id": "U0CAROL"}
        with sso_signed_in(gate, idp) as client:
            page = client.get("/identities").text
        assert "U9ALICE" not in page and "4242" not in page and "U0CAROL" not in page
        assert rows(page) == [("feishu", "configured_id"), ("slack", "configured_id"),
                              ("email", "email")]  # fmt: skip
        again = submit_refund(gate)
        slack_click(gate, fake_slack, again, "U9ALICE")
        assert api_view(gate, again)["status"] == "pending"
