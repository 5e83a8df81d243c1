"""Reveal, not blind masking: a signed-in approver reveals a masked value on the request page
(`POST /requests/{id}/reveal`), each reveal is in the audit chain, and an approval from the
page counts only once its approver has seen every value masked beyond one credential token.
Cards keep masking, so they never approve such a call. All through the real app over HTTP.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from gate.decisions import audit
from gate.text.untrusted import MASK
from tests.conftest import Gate
from tests.slack.conftest import (  # noqa: F401 (fixtures)
    _no_proxy,
    block_actions,
    card_for,
    card_text,
    fake_slack,
    interact,
    slack_gate_sqlite,
)
from tests.support import config as cfg
from tests.support.fake_slack import FakeSlack
from tests.support.servers import wait_until
from tests.web.conftest import (
    api_view,
    browser,
    csrf_of,
    flash_error,
    post_decide,
    sign_in,
    submit_refund,
)

#: a refund whose call carries values masked whole (by their keys' names), a credential
#: token masked in text (approvable unrevealed), and identifiers (never masked)
ARGS: dict[str, Any] = {
    "customer": "c1",
    "amount": 900,
    "primary_key": "pk_7f3a; DROP TABLE refunds",
    "headers": {"Authorization": "Basic ZGF2ZTpodW50ZXIy"},
    "note": "curl -H 'Authorization: Bearer abcdefghijkl' https://billing.example",
    "session_id": "sess-arg-9",
    "key_id": "kid-42",
}
#: what an approval waits for: the values masked whole
TO_REVEAL = ("/primary_key", "/headers/Authorization")


def reveal(c: httpx.Client, request_id: str, path: str, csrf: str | None = None) -> httpx.Response:
    """Post the reveal form as the page's script does (the page's CSRF token unless given)."""
    token = csrf if csrf is not None else csrf_of(c.get(f"/requests/{request_id}").text)
    return c.post(f"/requests/{request_id}/reveal", data={"csrf_token": token, "path": path})


def error_of(r: httpx.Response) -> str:
    """The error code of gate's one error body."""
    assert r.headers["content-type"].startswith("application/json"), r.text[:300]
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    code: str = body["error"]["code"]
    return code


def audit_events(gate: Gate, request_id: str) -> list[dict[str, Any]]:
    """The request's audit trail, as the API gives it to an admin."""
    with gate.client(cfg.ADMIN) as c:
        events: list[dict[str, Any]] = c.get(f"/v1/requests/{request_id}/audit").json()
    return events


def reveals(gate: Gate, request_id: str) -> list[dict[str, Any]]:
    """The request's `revealed` events."""
    return [e for e in audit_events(gate, request_id) if e["kind"] == audit.REVEALED]


def verify_chain(gate: Gate, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`gate audit verify` against the gate's database, as an operator runs it."""
    path = tmp_path / "gate.toml"
    path.write_text(cfg.to_toml({"server": {"database_url": gate.settings.server.database_url}}))
    return subprocess.run(
        [sys.executable, "-m", "gate.cli", "audit", "verify", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


# -- the reveal --------------------------------------------------------------------------------


def test_an_approver_reveals_a_masked_value_and_the_reveal_is_audited_in_the_chain(
    web_gate_db: Gate, tmp_path: Path
) -> None:
    gate = web_gate_db
    request_id = submit_refund(gate, tool_args=ARGS)
    with sign_in(gate, "alice") as c:
        page = c.get(f"/requests/{request_id}").text
        assert ARGS["primary_key"] not in page and "ZGF2ZTpodW50ZXIy" not in page
        r = reveal(c, request_id, "/primary_key")
        assert r.status_code == 200, r.text
        assert r.json() == {
            "path": "/primary_key",
            "value": ARGS["primary_key"],
            "text": json.dumps(ARGS["primary_key"]),
        }
        assert r.headers["cache-control"] == "no-store"  # it holds a secret
        # a whole object under a secret-named key comes back as JSON
        r = reveal(c, request_id, "/headers/Authorization")
        assert r.json()["value"] == "Basic ZGF2ZTpodW50ZXIy"
        # a credential token masked in text is revealable too (the raw text)
        assert reveal(c, request_id, "/note").json()["value"] == ARGS["note"]
    seen = reveals(gate, request_id)
    assert [(e["actor"], e["via"], e["detail"]) for e in seen] == [
        ("alice", "web", {"path": "/primary_key"}),
        ("alice", "web", {"path": "/headers/Authorization"}),
        ("alice", "web", {"path": "/note"}),
    ]
    trail = json.dumps(audit_events(gate, request_id))
    for secret in ("pk_7f3a", "ZGF2ZTpodW50ZXIy", "abcdefghijkl"):
        assert secret not in trail  # who, when, which value; never the value
    # the page's audit trail lists them, and the chain holds
    with sign_in(gate, "bob") as c:
        page = c.get(f"/requests/{request_id}").text
    assert page.count('data-kind="revealed"') == 3 and "pk_7f3a" not in page
    verified = verify_chain(gate, tmp_path)
    assert verified.returncode == 0 and "audit chain intact" in verified.stdout, verified


def test_a_revealed_value_is_inert_json_in_text(web_gate: Gate) -> None:
    hostile = {"password": "pa\u202ess <b>gіthub</b>", "n": 1}
    request_id = submit_refund(web_gate, tool_args=hostile)
    with sign_in(web_gate, "alice") as c:
        body = reveal(c, request_id, "/password").json()
    assert body["value"] == hostile["password"]
    assert "\u202e" not in body["text"] and "\\u202e" in body["text"]
    assert "\\u0456" in body["text"]  # the Cyrillic look-alike, escaped
    assert json.loads(body["text"]) == hostile["password"]


def refused_everywhere(gate: Gate, request_id: str) -> None:
    """Nobody's reveal was recorded and the request is untouched."""
    assert reveals(gate, request_id) == []
    assert api_view(gate, request_id)["status"] == "pending"


def test_a_reveal_without_the_sessions_csrf_token_is_refused(web_gate: Gate) -> None:
    request_id = submit_refund(web_gate, tool_args=ARGS)
    with sign_in(web_gate, "alice") as c:
        r = c.post(f"/requests/{request_id}/reveal", data={"path": "/primary_key"})
        assert r.status_code == 403 and error_of(r) == "csrf_failed"
        r = reveal(c, request_id, "/primary_key", csrf="forged-token")
        assert r.status_code == 403 and error_of(r) == "csrf_failed"
    refused_everywhere(web_gate, request_id)


def test_an_agent_token_reveals_nothing(web_gate: Gate) -> None:
    # The console is for people: a token is no web sign-in and carries no CSRF token.
    request_id = submit_refund(web_gate, tool_args=ARGS)
    for token in (cfg.AGENT, cfg.ALICE, cfg.ADMIN):
        with web_gate.client(token) as c:
            r = c.post(f"/requests/{request_id}/reveal", data={"path": "/primary_key"})
        assert r.status_code == 403 and error_of(r) == "csrf_failed"
    refused_everywhere(web_gate, request_id)


def test_a_signed_out_visitor_reveals_nothing(web_gate: Gate) -> None:
    request_id = submit_refund(web_gate, tool_args=ARGS)
    with browser(web_gate) as c:
        token = csrf_of(c.get("/login").text)  # a session, and its token, but no sign-in
        r = reveal(c, request_id, "/primary_key", csrf=token)
    assert r.status_code == 403 and error_of(r) == "not_signed_in"
    refused_everywhere(web_gate, request_id)


@pytest.mark.parametrize(
    ("who", "user_id", "code"),
    [
        ("mallory", "dave", "not_an_approver"),  # not in the rule's group:finance
        ("alice", "alice@example.com", "self_approval"),  # alice asked for it herself
    ],
)
def test_only_someone_who_may_decide_the_request_reveals(
    web_gate: Gate, who: str, user_id: str, code: str
) -> None:
    request_id = submit_refund(web_gate, tool_args=ARGS, user_id=user_id)
    with sign_in(web_gate, who) as c:
        r = reveal(c, request_id, "/primary_key")
    assert r.status_code == 403 and error_of(r) == code
    assert "Not revealed" in r.json()["error"]["message"]
    refused_everywhere(web_gate, request_id)


@pytest.mark.parametrize(
    "path",
    ["/session_id", "/key_id", "/amount", "/headers", "/missing", "", "/", "primary_key"],
    ids=["identifier", "key id", "plain value", "a parent", "missing", "empty", "root", "no /"],
)
def test_a_path_that_is_not_a_masked_value_is_not_found(web_gate: Gate, path: str) -> None:
    request_id = submit_refund(web_gate, tool_args=ARGS)
    with sign_in(web_gate, "alice") as c:
        r = reveal(c, request_id, path)
    assert r.status_code in (404, 422), r.text
    assert error_of(r) == ("not_masked" if r.status_code == 404 else "invalid_input")
    assert path not in ("/session_id", "/missing") or r.status_code == 404
    refused_everywhere(web_gate, request_id)


def test_an_unknown_request_is_not_found(web_gate: Gate) -> None:
    request_id = submit_refund(web_gate, tool_args=ARGS)
    with sign_in(web_gate, "alice") as c:
        token = csrf_of(c.get(f"/requests/{request_id}").text)
        r = reveal(c, "01JNOSUCHREQUEST000000000", "/primary_key", csrf=token)
    assert r.status_code == 404 and error_of(r) == "request_not_found"


def test_a_decided_request_reveals_nothing(web_gate: Gate) -> None:
    # A reveal serves a decision: once decided, the call's secrets stay masked (the API
    # shows reviewers the raw arguments), and the trail says who saw what while it was open.
    request_id = submit_refund(web_gate, tool_args=ARGS)
    with sign_in(web_gate, "alice") as c:
        token = csrf_of(c.get(f"/requests/{request_id}").text)
        assert web_gate.decide(request_id, cfg.BOB, "reject", "no").status_code == 200
        r = reveal(c, request_id, "/primary_key", csrf=token)
    assert r.status_code == 409 and error_of(r) == "not_pending"
    assert reveals(web_gate, request_id) == []


def test_reveals_are_rate_limited_per_approver(web_gate: Gate) -> None:
    from gate.web.reveal import REVEAL_BURST

    request_id = submit_refund(web_gate, tool_args=ARGS)
    with sign_in(web_gate, "alice") as c:
        token = csrf_of(c.get(f"/requests/{request_id}").text)
        for _ in range(REVEAL_BURST):
            assert reveal(c, request_id, "/primary_key", csrf=token).status_code == 200
        r = reveal(c, request_id, "/primary_key", csrf=token)
        assert r.status_code == 429 and error_of(r) == "rate_limited"
        assert int(r.headers["retry-after"]) >= 1
    with sign_in(web_gate, "bob") as c:  # per approver: bob still may
        assert reveal(c, request_id, "/primary_key").status_code == 200
    assert len(reveals(web_gate, request_id)) == REVEAL_BURST + 1


# -- what an approval counts for ---------------------------------------------------------------


def test_an_approval_before_the_reveal_is_refused_and_after_it_counts(web_gate_db: Gate) -> None:
    gate = web_gate_db
    request_id = submit_refund(gate, tool_args=ARGS)
    with sign_in(gate, "alice") as c:
        page = c.get(f"/requests/{request_id}").text
        assert 'value="approve"' in page  # offered: the masks can be revealed here
        r = post_decide(c, request_id, verdict="approve")
        assert r.status_code == 403, r.text[:300]
        assert flash_error(r.text) == (
            "Not recorded: reveal the masked values at /primary_key, /headers/Authorization "
            "first: an approval counts only once you have seen every value masked on this page."
        )
        assert reveal(c, request_id, "/primary_key").status_code == 200
        r = post_decide(c, request_id, verdict="approve")  # one still masked
        assert r.status_code == 403
        assert "reveal the masked value at /headers/Authorization first" in flash_error(r.text)
        # with edits and with a grant alike: any approval waits for the reveal
        r = post_decide(c, request_id, verdict="approve", grant_scope="call", grant_duration="5m")
        assert r.status_code == 403
        assert api_view(gate, request_id)["status"] == "pending"
        assert reveal(c, request_id, "/headers/Authorization").status_code == 200
        r = post_decide(c, request_id, verdict="approve")
        assert r.status_code == 303, r.text[:300]
    decided = api_view(gate, request_id)
    assert decided["status"] == "approved" and decided["decided_by"] == "alice"


def test_a_credential_token_masked_in_text_needs_no_reveal(web_gate: Gate) -> None:
    # `Authorization: Bearer [masked]` hides one credential token and nothing else.
    args = {"customer": "c1", "amount": 900, "note": ARGS["note"], "session_id": "s-9"}
    request_id = submit_refund(web_gate, tool_args=args)
    with sign_in(web_gate, "alice") as c:
        assert post_decide(c, request_id, verdict="approve").status_code == 303
    assert api_view(web_gate, request_id)["status"] == "approved"


def test_rejecting_needs_no_reveal(web_gate: Gate) -> None:
    request_id = submit_refund(web_gate, tool_args=ARGS)
    with sign_in(web_gate, "alice") as c:
        assert post_decide(c, request_id, verdict="reject", comment="no").status_code == 303
    assert api_view(web_gate, request_id)["status"] == "rejected"


def test_each_approver_of_a_quorum_reveals_for_themselves(web_gate: Gate) -> None:
    answer = web_gate.submit(tool_name="wire_funds", tool_args={"amount": 5, "api_key": "k-1"})
    request_id = answer["request"]["id"]
    with sign_in(web_gate, "alice") as c:
        assert reveal(c, request_id, "/api_key").status_code == 200
        assert post_decide(c, request_id, verdict="approve").status_code == 303
    with sign_in(web_gate, "bob") as c:
        r = post_decide(c, request_id, verdict="approve")  # alice's reveal is not bob's
        assert r.status_code == 403 and "/api_key" in flash_error(r.text)
        assert reveal(c, request_id, "/api_key").status_code == 200
        assert post_decide(c, request_id, verdict="approve").status_code == 303
    assert api_view(web_gate, request_id)["status"] == "approved"


def test_the_api_shows_approvers_the_raw_call_and_approves_without_a_reveal(
    web_gate: Gate,
) -> None:
    # Approver tokens read `tool_args` raw (nothing masked), so there is nothing to reveal.
    request_id = submit_refund(web_gate, tool_args=ARGS)
    with web_gate.client(cfg.ALICE) as c:
        assert c.get(f"/v1/requests/{request_id}").json()["tool_args"] == ARGS
    assert web_gate.decide(request_id, cfg.ALICE).status_code == 200


def test_session_id_and_other_identifiers_are_shown_not_masked(web_gate: Gate) -> None:
    request_id = submit_refund(web_gate, tool_args=ARGS)
    with sign_in(web_gate, "alice") as c:
        page = c.get(f"/requests/{request_id}").text
    assert "sess-arg-9" in page and "kid-42" in page
    assert f'"session_id": "{MASK}"' not in page


# -- cards keep masking ------------------------------------------------------------------------


def test_a_card_never_approves_a_call_with_a_value_masked_whole(
    slack_gate_sqlite: Gate,  # noqa: F811 (Slack's fixtures, imported above)
    fake_slack: FakeSlack,  # noqa: F811
) -> None:
    gate = slack_gate_sqlite
    secret = gate.submit(tool_name="pay_vendor", tool_args={"amount": 60000, "primary_key": "pk"})
    request_id = secret["request"]["id"]
    card = card_for(fake_slack, request_id)
    text = card_text(card)
    actions = [a["action_id"] for b in card.blocks if b["type"] == "actions" for a in b["elements"]]
    assert not {"gate_approve", "gate_edit"} & set(actions) and "gate_reject" in actions
    assert "Part of the call is masked on Slack: a value under a secret-named key" in text
    assert "Reveal it on the request page in gate" in text
    # a crafted approve click is refused, in words, to the clicker alone
    assert interact(gate, block_actions(request_id, "U0ALICE")).status_code == 200
    wait_until(lambda: fake_slack.ephemerals)
    said = fake_slack.ephemerals[0]
    assert said["user"] == "U0ALICE"
    assert said["text"].startswith("Not recorded: the value at /primary_key is masked here")
    assert "reveal it on the request page in gate and approve there" in said["text"]
    with gate.client(cfg.ADMIN) as c:
        assert c.get(f"/v1/requests/{request_id}").json()["status"] == "pending"
    # the same call with an identifier instead: shown, and approved from the card
    plain = gate.submit(tool_name="pay_vendor", tool_args={"amount": 60000, "session_id": "s-7"})
    plain_id = plain["request"]["id"]
    card = card_for(fake_slack, plain_id)
    assert "s-7" in card_text(card) and "gate_approve" in card_text(card)
    assert interact(gate, block_actions(plain_id, "U0ALICE")).status_code == 200

    def approved() -> bool:
        with gate.client(cfg.ADMIN) as c:
            return bool(c.get(f"/v1/requests/{plain_id}").json()["status"] == "approved")

    wait_until(approved)


@pytest.mark.parametrize(
    ("content", "content_type"),
    [
        (b"--x\r\nbroken", "multipart/form-data"),  # no boundary
        (b"path=%ED%A0%80&csrf_token=%ff", "application/x-www-form-urlencoded"),  # not UTF-8
        (b"\x00" * 64, "application/octet-stream"),
    ],
    ids=["multipart without boundary", "bytes that are not UTF-8", "not a form"],
)
def test_a_body_the_route_cannot_read_is_a_clear_refusal(
    web_gate: Gate, content: bytes, content_type: str
) -> None:
    request_id = submit_refund(web_gate, tool_args=ARGS)
    with sign_in(web_gate, "alice") as c:
        r = c.post(
            f"/requests/{request_id}/reveal",
            content=content,
            headers={"Content-Type": content_type},
        )
    assert 400 <= r.status_code < 500, r.text[:300]
    assert r.json()["error"]["code"]
    refused_everywhere(web_gate, request_id)
