"""Passkeys (WebAuthn) for step-up: an approver registers one in the console, and a rule
with `step_up = { webauthn = true }` counts an approval only when the passkey signed a
challenge bound to the request id and its argument hash (`gate.web.passkey_approval`).

The authenticator is emulated (`tests.support.fake_authenticator`: a P-256 key, 'none'
attestation, assertions built byte by byte); gate runs for real over HTTP on each database.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gate.asking.binding import call_hash
from gate.config.settings import Settings
from gate.identity.passkeys import approval_challenge
from tests.conftest import Gate
from tests.support import config as cfg
from tests.support.fake_authenticator import Authenticator, b64url
from tests.support.fake_oidc import FakeOidc
from tests.web.conftest import PASSWORDS, api_view, csrf_of, flash_error, sign_in
from tests.web.sso import PASSWORD_HASHES, serving, spare_port, sso_data, sso_signed_in

PASSKEY_RULES: list[dict[str, Any]] = [
    {
        # one approval, with a passkey; edits allowed (the signature covers the edited call)
        "name": "passkey-wires",
        "tools": ["wire_out"],
        "approvers": ["group:finance"],
        "timeout": "10m",
        "step_up": {"webauthn": True},
    },
    {
        # two approvals: alice's vote leaves the request waiting, so a replay has a target
        "name": "passkey-pair",
        "tools": ["wire_pair"],
        "approvers": ["group:finance"],
        "approvals_required": 2,
        "timeout": "10m",
        "step_up": {"webauthn": True},
    },
]


def passkey_data(database_url: str, port: int) -> dict[str, Any]:
    """The standard settings with passwords, the passkey rules and `public_url` on `port`."""
    data = cfg.settings_data(database_url, public_url=f"http://127.0.0.1:{port}")
    data["rules"] = [*copy.deepcopy(PASSKEY_RULES), *data["rules"]]
    for approver in data["approvers"]:
        approver["password_hash"] = PASSWORD_HASHES[approver["name"]]
    return data


@pytest.fixture
def pk_gate(db_url: str) -> Iterator[Gate]:
    """A gate with passkey rules (no single sign-on at all), on each database."""
    port = spare_port()
    with serving(Settings(**passkey_data(db_url, port)), port) as gate:
        yield gate


def authenticator(gate: Gate) -> Authenticator:
    """A fresh authenticator for this gate's relying party (its public_url)."""
    return Authenticator(rp_id="127.0.0.1", origin=gate.settings.server.base_url)


def register(client: httpx.Client, device: Authenticator, label: str = "laptop") -> None:
    """Add `device` on the Passkeys page, as the page's script does."""
    token = csrf_of(client.get("/passkeys").text)
    options = client.post("/passkeys/options", data={"csrf_token": token})
    assert options.status_code == 200, options.text
    body = options.json()
    r = client.post(
        "/passkeys",
        data={
            "csrf_token": token,
            "label": label,
            "nonce": body["nonce"],
            "credential": device.create(body["publicKey"]),
        },
    )
    assert r.status_code == 303, r.text


def ask(gate: Gate, tool: str = "wire_out", **args: Any) -> str:
    """A call a passkey rule holds."""
    answer = gate.submit(tool_name=tool, tool_args=args or {"amount": 900_000, "to": "acme"})
    assert answer["decision"] == "ask", answer
    request_id: str = answer["request"]["id"]
    return request_id


def challenge(client: httpx.Client, rid: str, **form: str) -> dict[str, Any]:
    """The page's first post: the options for `navigator.credentials.get`."""
    token = csrf_of(client.get(f"/requests/{rid}").text)
    data = {"csrf_token": token, "verdict": "approve", **form}  # the Approve form, as sent
    r = client.post(f"/requests/{rid}/passkey", data=data)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def approve(
    client: httpx.Client, rid: str, nonce: str, assertion: str, **form: str
) -> httpx.Response:
    """The page's second post: the Approve form with the passkey's answer."""
    token = csrf_of(client.get(f"/requests/{rid}").text)
    data = {"csrf_token": token, "verdict": "approve", **form}
    data |= {"passkey_nonce": nonce, "passkey_assertion": assertion}
    return client.post(f"/requests/{rid}/decide", data=data)


def test_a_passkey_approval_signs_exactly_the_call_and_is_recorded(pk_gate: Gate) -> None:
    device = authenticator(pk_gate)
    rid = ask(pk_gate)
    with sign_in(pk_gate, "alice") as client:
        assert 'id="no-passkeys"' in client.get("/passkeys").text
        register(client, device, "YubiKey")
        listed = client.get("/passkeys").text
        assert "YubiKey" in listed and "Added the passkey" in listed
        page = client.get(f"/requests/{rid}").text
        assert 'id="passkey-needed"' in page and 'data-passkey="/requests/' in page
        assert "/static/passkeys.js" in page
        answer = challenge(client, rid)
        view = api_view(pk_gate, rid)
        # the challenge is (request id, argument hash, nonce): recomputed here independently
        args_hash = call_hash("wire_out", view["tool_args"], None)
        assert answer["args_hash"] == args_hash == view["args_hash"]
        expected = approval_challenge(rid, args_hash, answer["nonce"])
        assert answer["publicKey"]["challenge"] == b64url(expected)
        assert answer["publicKey"]["rpId"] == "127.0.0.1"
        assert answer["publicKey"]["userVerification"] == "required"
        allowed = [c["id"] for c in answer["publicKey"]["allowCredentials"]]
        assert allowed == [device.id]
        r = approve(client, rid, answer["nonce"], device.get(answer["publicKey"]))
        assert r.status_code == 303, r.text
    view = api_view(pk_gate, rid)
    assert view["status"] == "approved"
    auth = view["votes"][0]["auth"]
    recorded = {"kind": "webauthn", "credential_id": device.id, "signed_in_by": "password"}
    assert {k: v for k, v in auth.items() if v is not None} == recorded
    full = pk_gate.state.service.view(rid, full=True)
    assert full is not None
    approved = [a.detail["auth"] for a in full.audit if a.kind == "approved"]
    assert approved == [recorded]
    with sign_in(pk_gate, "bob") as client:
        page = client.get(f"/requests/{rid}").text
        assert f"passkey or security key (credential {device.id})" in page


def test_every_other_way_to_approve_is_refused(pk_gate: Gate) -> None:
    rid = ask(pk_gate)
    for token in (cfg.ALICE, cfg.ADMIN):  # the API: no token can carry a passkey's signature
        with pk_gate.client(token) as c:
            r = c.post(f"/v1/requests/{rid}/decision", json={"verdict": "approve"})
        assert r.status_code == 403, r.text
        assert r.json()["error"]["code"] == "step_up_required"
        assert "passkey" in r.json()["error"]["message"]
    with sign_in(pk_gate, "alice") as client:
        # no passkey yet: the challenge says where to add one
        token = csrf_of(client.get(f"/requests/{rid}").text)
        r = client.post(
            f"/requests/{rid}/passkey", data={"csrf_token": token, "verdict": "approve"}
        )
        assert r.status_code == 409 and r.json()["error"]["code"] == "no_passkey"
        # the plain form, without a passkey's answer
        r = client.post(f"/requests/{rid}/decide", data={"csrf_token": token, "verdict": "approve"})
        assert r.status_code == 403 and "signed with a passkey" in flash_error(r.text)
    assert api_view(pk_gate, rid)["votes"] == []
    with pk_gate.client(cfg.BOB) as c:  # rejecting needs no passkey
        r = c.post(f"/v1/requests/{rid}/decision", json={"verdict": "reject", "comment": "no"})
    assert r.status_code == 200, r.text


def refused(client: httpx.Client, r: httpx.Response, words: str) -> None:
    """A refusal on the page: 403 with `words` in its reason (never a 500)."""
    assert r.status_code == 403, r.text
    assert words in flash_error(r.text), flash_error(r.text)


def test_replays_other_requests_origins_and_counters_are_refused(pk_gate: Gate) -> None:
    device = authenticator(pk_gate)
    pair, other = ask(pk_gate, "wire_pair"), ask(pk_gate)
    with sign_in(pk_gate, "alice") as client:
        register(client, device)
        # an assertion for another request
        theirs = challenge(client, other)
        signed = device.get(theirs["publicKey"])
        refused(client, approve(client, pair, theirs["nonce"], signed), "another request")
        # a wrong origin, then a wrong relying party id
        answer = challenge(client, pair)
        evil = device.get(answer["publicKey"], origin="https://evil.example")
        refused(client, approve(client, pair, answer["nonce"], evil), "not by gate at")
        answer = challenge(client, pair)
        evil = device.get(answer["publicKey"], rp_id="evil.example")
        refused(client, approve(client, pair, answer["nonce"], evil), "another site")
        # a signature over another challenge, under this request's nonce
        answer = challenge(client, pair)
        forged = device.get(answer["publicKey"], challenge=b64url(b"x" * 32))
        refused(client, approve(client, pair, answer["nonce"], forged), "another challenge")
        # a good one counts (the rule wants two approvals: the request still waits) ...
        answer = challenge(client, pair)
        good = device.get(answer["publicKey"], count=7)
        assert approve(client, pair, answer["nonce"], good).status_code == 303
        assert len(api_view(pk_gate, pair)["votes"]) == 1
    with sign_in(pk_gate, "bob") as client:
        bobs = authenticator(pk_gate)
        register(client, bobs)
        # ... and cannot be replayed, by anyone
        refused(client, approve(client, pair, answer["nonce"], good), "used already")
        # a counter going backwards (a cloned authenticator)
        first = challenge(client, pair)
        bobs.sign_count = 10
        again = challenge(client, other)
        assert approve(client, other, again["nonce"], bobs.get(again["publicKey"])).status_code
        second = bobs.get(first["publicKey"], count=4)
        refused(client, approve(client, pair, first["nonce"], second), "did not move forward")
        # alice's passkey is not bob's
        third = challenge(client, pair)
        refused(
            client,
            approve(client, pair, third["nonce"], device.get(third["publicKey"])),
            "not one of yours",
        )
    assert [v["approver"] for v in api_view(pk_gate, pair)["votes"]] == ["alice"]


def test_edited_arguments_are_what_the_passkey_signs(pk_gate: Gate) -> None:
    device = authenticator(pk_gate)
    rid = ask(pk_gate)
    edited = '{"amount": 1000, "to": "acme"}'
    with sign_in(pk_gate, "alice") as client:
        register(client, device)
        # a challenge for the call as asked does not approve the edited one
        asked = challenge(client, rid)
        signed = device.get(asked["publicKey"])
        r = approve(client, rid, asked["nonce"], signed, edited_args=edited)
        refused(client, r, "other arguments")
        # one asked for the edited call does
        mine = challenge(client, rid, edited_args=edited)
        assert mine["args_hash"] == call_hash("wire_out", {"amount": 1000, "to": "acme"}, None)
        r = approve(client, rid, mine["nonce"], device.get(mine["publicKey"]), edited_args=edited)
        assert r.status_code == 303, r.text
    view = api_view(pk_gate, rid)
    assert view["status"] == "approved" and view["approved_args"]["amount"] == 1000


def test_a_removed_passkey_approves_nothing(pk_gate: Gate) -> None:
    device = authenticator(pk_gate)
    rid = ask(pk_gate)
    with sign_in(pk_gate, "alice") as client:
        register(client, device, "old key")
        answer = challenge(client, rid)
        page = client.get("/passkeys").text
        key_id = page.split('data-passkey-id="')[1].split('"')[0]
        r = client.post(f"/passkeys/{key_id}/remove", data={"csrf_token": csrf_of(page)})
        assert r.status_code == 303
        assert "Removed the passkey" in client.get("/passkeys").text
        r = approve(client, rid, answer["nonce"], device.get(answer["publicKey"]))
        refused(client, r, "not one of yours")
        # the same authenticator cannot come back under a new name: its id is on record
        token = csrf_of(client.get("/passkeys").text)
        body = client.post("/passkeys/options", data={"csrf_token": token}).json()
        r = client.post(
            "/passkeys",
            data={
                "csrf_token": token,
                "label": "again",
                "nonce": body["nonce"],
                "credential": device.create(body["publicKey"]),
            },
        )
        assert r.status_code == 409 and "registered already" in flash_error(r.text)
    assert api_view(pk_gate, rid)["votes"] == []


def test_a_registration_is_checked(pk_gate: Gate) -> None:
    device = authenticator(pk_gate)
    with sign_in(pk_gate, "alice") as client:
        token = csrf_of(client.get("/passkeys").text)
        body = client.post("/passkeys/options", data={"csrf_token": token}).json()
        assert body["publicKey"]["rp"] == {"name": "gate", "id": "127.0.0.1"}
        for credential, words in (
            (device.create(body["publicKey"], origin="https://evil.example"), "not by gate at"),
            ("{not json", "not the JSON a browser sends"),
            ('{"response": {}}', "malformed"),
        ):
            r = client.post(
                "/passkeys",
                data={"csrf_token": token, "nonce": body["nonce"], "credential": credential},
            )
            assert r.status_code == 403, r.text
            assert words in flash_error(r.text)
        good = device.create(body["publicKey"])
        data = {"csrf_token": token, "nonce": body["nonce"], "credential": good}
        assert client.post("/passkeys", data=data).status_code == 303
        r = client.post("/passkeys", data=data)  # the challenge is spent
        assert r.status_code == 403 and "used already" in flash_error(r.text)
    assert PASSWORDS  # the approvers signed in with their passwords above


def test_settings_for_passkey_rules() -> None:
    data = cfg.settings_data("sqlite:///unused.db")
    data["rules"] = [{"name": "pk", "tools": ["x"], "step_up": {"webauthn": True}}]
    with pytest.raises(ValueError, match="public_url"):
        Settings(**data)
    data["server"] = {**data.get("server", {}), "public_url": "https://gate.example"}
    rule = Settings(**data).rules[0]
    assert rule.step_up is not None and rule.step_up.max_age is None  # no [oidc] needed
    data["rules"][0]["step_up"] = {"webauthn": True, "max_age": "5m"}
    with pytest.raises(ValueError, match=r"\[oidc\] is not"):
        Settings(**data)


def test_malformed_answers_are_refused_with_a_reason(pk_gate: Gate) -> None:
    device = authenticator(pk_gate)
    rid = ask(pk_gate)
    with sign_in(pk_gate, "alice") as client:
        register(client, device)
        answer = challenge(client, rid)
        good = json.loads(device.get(answer["publicKey"]))
        short = {**good, "response": {**good["response"], "authenticatorData": b64url(b"\0" * 5)}}
        bad_sig = {**good, "response": {**good["response"], "signature": b64url(b"\x30\x01")}}
        no_sig = {
            **good,
            "response": {k: v for k, v in good["response"].items() if k != "signature"},
        }
        for sent in (
            "[]",
            "{}",
            json.dumps({"rawId": "!!not base64!!"}),
            json.dumps({**good, "response": "nope"}),
            json.dumps({**good, "response": {**good["response"], "clientDataJSON": "e30"}}),
            json.dumps(short),
            json.dumps(bad_sig),
            json.dumps(no_sig),
        ):
            r = approve(client, rid, answer["nonce"], sent)
            assert r.status_code == 403, (sent, r.text)
            assert flash_error(r.text)
        # none of them used the challenge up: the real answer still counts
        r = approve(client, rid, answer["nonce"], json.dumps(good))
        assert r.status_code == 303, r.text


@pytest.fixture
def idp() -> Iterator[FakeOidc]:
    """The loopback identity provider, running."""
    fake = FakeOidc().start()
    yield fake
    fake.stop()


def test_a_rule_can_ask_for_both_a_fresh_sign_on_and_a_passkey(db_url: str, idp: FakeOidc) -> None:
    port = spare_port()
    data = sso_data(db_url, idp, port)
    both = {**PASSKEY_RULES[0], "name": "both", "tools": ["vault_open"]}
    data["rules"].insert(0, {**both, "step_up": {"webauthn": True, "max_age": "5m"}})
    with serving(Settings(**data), port) as gate:
        device = authenticator(gate)
        rid = ask(gate, "vault_open", vault="prod")
        with sign_in(gate, "alice") as client:  # a password: a passkey alone is not enough
            register(client, device)
            token = csrf_of(client.get(f"/requests/{rid}").text)
            r = client.post(
                f"/requests/{rid}/passkey", data={"csrf_token": token, "verdict": "approve"}
            )
            assert r.status_code == 403 and r.json()["error"]["code"] == "step_up_required"
        with sso_signed_in(gate, idp) as client:  # alice, through the provider, just now
            page = client.get(f"/requests/{rid}").text
            assert 'id="step-up-sign-in"' not in page and 'id="passkey-needed"' in page
            answer = challenge(client, rid)
            r = approve(client, rid, answer["nonce"], device.get(answer["publicKey"]))
            assert r.status_code == 303, r.text
        auth = api_view(gate, rid)["votes"][0]["auth"]
        assert auth["kind"] == "webauthn" and auth["signed_in_by"] == "oidc"
        assert auth["credential_id"] == device.id and auth["issuer"] == idp.issuer
