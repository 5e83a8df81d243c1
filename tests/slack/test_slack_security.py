"""Who may click: signatures, replay windows, non-approvers, double clicks and Slack retries."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.conftest import Gate
from tests.slack.conftest import SIGNING_SECRET, block_actions, form, interact, sign
from tests.support import config as cfg
from tests.support.fake_slack import FakeSlack
from tests.support.http import TLS
from tests.support.servers import wait_until


def _submit(gate: Gate, tool: str = "pay_vendor") -> str:
    answer = gate.submit(tool_name=tool, tool_args={"amount": 60000}, user_id="dave")
    request_id: str = answer["request"]["id"]
    return request_id


def _request(gate: Gate, request_id: str) -> dict[str, Any]:
    with gate.client(cfg.ADMIN) as c:
        data: dict[str, Any] = c.get(f"/v1/requests/{request_id}").json()
    return data


def _forged(body: bytes) -> dict[str, str]:
    return sign(body, secret="not-the-signing-secret")


def _stale(body: bytes) -> dict[str, str]:
    return sign(body, timestamp=int(time.time()) - 360)  # past the 5-minute window


def _future(body: bytes) -> dict[str, str]:
    return sign(body, timestamp=int(time.time()) + 360)


def _no_signature(body: bytes) -> dict[str, str]:
    return {"X-Slack-Request-Timestamp": str(int(time.time())), "X-Slack-Signature": ""}


def _no_timestamp(body: bytes) -> dict[str, str]:
    return {**sign(body), "X-Slack-Request-Timestamp": ""}


def _text_timestamp(body: bytes) -> dict[str, str]:
    return {**sign(body), "X-Slack-Request-Timestamp": "yesterday"}


def _other_body(body: bytes) -> dict[str, str]:
    return sign(body + b"&extra=1")


@pytest.mark.parametrize(
    "headers",
    [_forged, _stale, _future, _no_signature, _no_timestamp, _text_timestamp, _other_body],
)
def test_unverified_interactions_are_refused_and_change_nothing(
    slack_gate_sqlite: Gate, fake_slack: FakeSlack, headers: Any
) -> None:
    gate = slack_gate_sqlite
    request_id = _submit(gate)
    body = form(block_actions(request_id, "U0ALICE"))
    r = interact(gate, {}, body=body, headers=headers(body))
    assert r.status_code == 401
    assert r.json() == {
        "error": {
            "code": "invalid_signature",
            "message": "the Slack signature is missing, wrong or too old",
        }
    }
    after = _request(gate, request_id)
    assert after["status"] == "pending" and after["votes"] == []
    assert fake_slack.ephemerals == [] and fake_slack.calls_to("views.open") == []


def test_headers_absent_altogether_is_401(slack_gate_sqlite: Gate) -> None:
    request_id = _submit(slack_gate_sqlite)
    body = form(block_actions(request_id, "U0ALICE"))
    r = httpx.post(
        slack_gate_sqlite.url + "/channels/slack/interactions",
        content=body,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        verify=TLS,
    )
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_signature"
    assert _request(slack_gate_sqlite, request_id)["status"] == "pending"


def test_signing_matches_slacks_published_test_vector() -> None:
    # Slack's documented example (docs: "Verifying requests from Slack"), so our test signer
    # is Slack's algorithm and not merely the mirror image of the server's.
    body = (
        b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id="
        b"G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook"
        b"-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F3977"
        b"00885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d"
        b"10d2c447fce8b6703c"
    )
    assert sign(body, 1531420618, SIGNING_SECRET)["X-Slack-Signature"] == (
        "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
    )


@pytest.mark.parametrize(
    "body",
    [b"payload=not-json", b"nothing=here", b"payload=%5B1%2C2%5D", b"\xff\xfe", b""],
)
def test_signed_garbage_is_a_400_not_a_500(slack_gate_sqlite: Gate, body: bytes) -> None:
    r = interact(slack_gate_sqlite, {}, body=body)
    assert r.status_code in (400, 401), r.text
    assert set(r.json()["error"]) == {"code", "message"}


@pytest.mark.parametrize(
    "payload",
    [
        {"type": "block_actions", "user": {}, "actions": []},
        {"type": "block_actions", "user": {"id": "U0ALICE"}, "actions": []},
        {
            "type": "block_actions",
            "user": {"id": "U0ALICE"},
            "actions": [{"action_id": "gate_approve", "value": "../../etc"}],
        },
        {
            "type": "view_submission",
            "user": {"id": "U0BOB"},
            "view": {"callback_id": "gate_reject_reason"},
        },
    ],
)
def test_malformed_payloads_are_400(slack_gate_sqlite: Gate, payload: dict[str, Any]) -> None:
    r = interact(slack_gate_sqlite, payload)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "bad_slack_payload"


def test_other_interactions_are_acknowledged_and_ignored(slack_gate_sqlite: Gate) -> None:
    r = interact(slack_gate_sqlite, {"type": "shortcut", "user": {"id": "U0ALICE"}})
    assert r.status_code == 200
    r = interact(slack_gate_sqlite, block_actions("x", "U0ALICE", "some_other_button"))
    assert r.status_code == 200


@pytest.mark.parametrize("user", ["U0MALLORY", "U0STRANGER"])
def test_non_approver_gets_an_ephemeral_and_nothing_changes(
    slack_gate: Gate, fake_slack: FakeSlack, user: str
) -> None:
    request_id = _submit(slack_gate)
    r = interact(slack_gate, block_actions(request_id, user))
    assert r.status_code == 200
    r = interact(slack_gate, block_actions(request_id, user, "gate_reject"))
    assert r.status_code == 200
    wait_until(lambda: len(fake_slack.ephemerals) == 2)
    for ephemeral in fake_slack.ephemerals:
        assert ephemeral["user"] == user
        assert ephemeral["text"] == "Not recorded: you are not an approver for this rule."
    # no reason dialog for someone who cannot reject
    assert fake_slack.calls_to("views.open") == []
    after = _request(slack_gate, request_id)
    assert after["status"] == "pending" and after["votes"] == []


def test_the_requester_cannot_approve_their_own_call(
    slack_gate_sqlite: Gate, fake_slack: FakeSlack
) -> None:
    gate = slack_gate_sqlite
    answer = gate.submit(tool_name="pay_vendor", tool_args={"amount": 60000}, user_id="U0ALICE")
    request_id = answer["request"]["id"]
    assert interact(gate, block_actions(request_id, "U0ALICE")).status_code == 200
    wait_until(lambda: fake_slack.ephemerals)
    assert "cannot approve it yourself" in fake_slack.ephemerals[0]["text"]
    assert _request(gate, request_id)["status"] == "pending"


def test_the_requester_is_refused_under_another_of_their_identities(
    slack_gate_sqlite: Gate, fake_slack: FakeSlack
) -> None:
    # the agent named alice by her email; her Slack click is still her own request
    gate = slack_gate_sqlite
    answer = gate.submit(
        tool_name="pay_vendor", tool_args={"amount": 60000}, user_id="alice@example.com"
    )
    request_id = answer["request"]["id"]
    assert interact(gate, block_actions(request_id, "U0ALICE")).status_code == 200
    wait_until(lambda: fake_slack.ephemerals)
    assert "cannot approve it yourself" in fake_slack.ephemerals[0]["text"]
    assert _request(gate, request_id)["status"] == "pending"


def test_double_clicks_and_slack_retries_decide_once(
    slack_gate: Gate, fake_slack: FakeSlack
) -> None:
    request_id = _submit(slack_gate)
    payload = block_actions(request_id, "U0ALICE")
    assert interact(slack_gate, payload).status_code == 200
    retry = {"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}
    assert interact(slack_gate, payload, headers=retry).status_code == 200
    assert interact(slack_gate, payload).status_code == 200  # alice clicks again
    assert interact(slack_gate, block_actions(request_id, "U0BOB")).status_code == 200
    wait_until(lambda: len(fake_slack.ephemerals) == 2)
    after = _request(slack_gate, request_id)
    assert after["status"] == "approved" and after["decided_by"] == "alice"
    assert [v["approver"] for v in after["votes"]] == ["alice"]
    # the retry was answered silently; the later clicks hear who decided (each click is
    # decided on a worker after Slack's 200, so the two answers may arrive in either order)
    assert sorted(e["user"] for e in fake_slack.ephemerals) == ["U0ALICE", "U0BOB"]
    for ephemeral in fake_slack.ephemerals:
        assert ephemeral["text"].startswith("Already approved by alice at ")
    full = slack_gate.state.service.view(request_id, full=True)
    assert full is not None
    assert [e.kind for e in full.audit if e.kind in ("vote", "approved", "rejected")] == [
        "approved"
    ]


def test_unknown_request_says_so(slack_gate_sqlite: Gate, fake_slack: FakeSlack) -> None:
    r = interact(slack_gate_sqlite, block_actions("01JUNKNOWNREQUEST000000000", "U0ALICE"))
    assert r.status_code == 200
    wait_until(lambda: fake_slack.ephemerals)
    assert fake_slack.ephemerals[0]["text"] == "This request no longer exists."


def test_the_window_is_five_minutes_either_way_on_an_injected_clock() -> None:
    from pydantic import SecretStr

    from channels.slack import SlackChannel
    from channels.slack.settings import SlackSettings
    from gate.base.errors import Unauthenticated

    body = b"payload=%7B%7D"
    signed_at = 1_531_420_618
    headers = {k.lower(): v for k, v in sign(body, signed_at).items()}
    settings = SlackSettings(
        bot_token=SecretStr("xoxb-x"), signing_secret=SecretStr(SIGNING_SECRET)
    )
    no_gate: Any = None  # verify() never reaches gate
    for offset, ok in [(0, True), (300, True), (-300, True), (301, False), (-301, False)]:
        channel = SlackChannel(settings, no_gate, clock=lambda o=offset: float(signed_at + o))
        if ok:
            channel.verify(body, headers)
        else:
            with pytest.raises(Unauthenticated):
                channel.verify(body, headers)
