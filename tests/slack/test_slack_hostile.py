"""Hostile Slack callbacks over the real app: odd signature headers, bodies nested too deeply to
parse, and one Extend click delivered more than once."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Any

import httpx
import pytest

from tests.conftest import Gate, GateFactory
from tests.slack.conftest import INTERACTIONS, block_actions, form, interact, sign, slack_settings
from tests.support import config as cfg
from tests.support.fake_slack import FakeSlack
from tests.support.http import TLS
from tests.support.servers import wait_until


def _submit(gate: Gate) -> str:
    answer = gate.submit(tool_name="pay_vendor", tool_args={"amount": 60000}, user_id="dave")
    request_id: str = answer["request"]["id"]
    return request_id


def _request(gate: Gate, request_id: str) -> dict[str, Any]:
    with gate.client(cfg.ADMIN) as c:
        data: dict[str, Any] = c.get(f"/v1/requests/{request_id}").json()
    return data


def _audit_kinds(gate: Gate, request_id: str) -> list[str]:
    view = gate.state.service.view(request_id, full=True)
    assert view is not None
    return [event.kind for event in view.audit]


def _post_raw(gate: Gate, body: bytes, headers: dict[str, Any]) -> httpx.Response:
    sent = {"Content-Type": "application/x-www-form-urlencoded", **headers}
    with httpx.Client(base_url=gate.url, timeout=10, verify=TLS) as client:
        return client.post(INTERACTIONS, content=body, headers=sent)


# -- signatures ---------------------------------------------------------------------------------


def _latin1_signature(body: bytes) -> dict[str, Any]:
    return {**sign(body), "X-Slack-Signature": b"v0=\xe9\xe9\xe9"}


def _valid_signature_plus_non_ascii(body: bytes) -> dict[str, Any]:
    good = sign(body)
    return {**good, "X-Slack-Signature": good["X-Slack-Signature"].encode() + b"\xff"}


def _superscript_timestamp(body: bytes) -> dict[str, Any]:
    # "²" is a digit to str.isdigit() and not to int(): the latin-1 byte 0xB2.
    return {**sign(body), "X-Slack-Request-Timestamp": b"\xb2"}


def _endless_timestamp(body: bytes) -> dict[str, Any]:
    return {**sign(body), "X-Slack-Request-Timestamp": "9" * 5000}


@pytest.mark.parametrize(
    "headers",
    [
        _latin1_signature,
        _valid_signature_plus_non_ascii,
        _superscript_timestamp,
        _endless_timestamp,
    ],
)
def test_non_ascii_or_absurd_signature_headers_are_401(
    slack_gate_sqlite: Gate, fake_slack: FakeSlack, headers: Any
) -> None:
    gate = slack_gate_sqlite
    request_id = _submit(gate)
    body = form(block_actions(request_id, "U0ALICE"))
    r = _post_raw(gate, body, headers(body))
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == "invalid_signature"
    after = _request(gate, request_id)
    assert after["status"] == "pending" and after["votes"] == []


# -- bodies -------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["form", "raw json"])
def test_a_signed_body_nested_too_deeply_is_400(slack_gate_sqlite: Gate, shape: str) -> None:
    gate = slack_gate_sqlite
    request_id = _submit(gate)
    deep = '{"type": "block_actions", "x": ' + "[" * 50_000 + "]" * 50_000 + "}"
    body = ("payload=" + deep).encode() if shape == "form" else deep.encode()
    r = _post_raw(gate, body, sign(body))
    assert r.status_code == 400, r.text
    assert r.json()["error"] == {
        "code": "bad_slack_payload",
        "message": "not a Slack interaction: the JSON is nested too deeply",
    }
    assert _request(gate, request_id)["status"] == "pending"


# -- one click, one extension -------------------------------------------------------------------


def test_one_extend_click_delivered_three_times_extends_once(
    slack_gate: Gate, fake_slack: FakeSlack
) -> None:
    gate = slack_gate
    request_id = _submit(gate)
    before = datetime.fromisoformat(_request(gate, request_id)["expires_at"])
    click = block_actions(request_id, "U0BOB", "gate_extend", trigger_id="trig-extend-1")

    # Two deliveries at once (the second arrives while the first is still being handled)...
    answers: list[int] = []
    both = [
        threading.Thread(target=lambda: answers.append(interact(gate, click).status_code))
        for _ in range(2)
    ]
    for thread in both:
        thread.start()
    for thread in both:
        thread.join(20)
    # ...and Slack's retry of it, later.
    retry = interact(gate, click, headers={"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "x"})
    assert answers == [200, 200] and retry.status_code == 200

    wait_until(lambda: fake_slack.ephemerals)
    after = datetime.fromisoformat(_request(gate, request_id)["expires_at"])
    assert (after - before).total_seconds() == 15 * 60
    assert _audit_kinds(gate, request_id).count("extended") == 1
    time.sleep(0.3)  # an answer to a repeat would have been posted by now
    assert [e["text"][:17] for e in fake_slack.ephemerals] == ["Deadline moved to"]

    # A new click (its own trigger and time) is not a repeat: it extends again.
    again = block_actions(request_id, "U0BOB", "gate_extend", trigger_id="trig-extend-2")
    assert interact(gate, again).status_code == 200
    later = datetime.fromisoformat(_request(gate, request_id)["expires_at"])
    assert (later - before).total_seconds() == 30 * 60
    assert _audit_kinds(gate, request_id).count("extended") == 2


def test_one_extend_click_delivered_to_two_replicas_extends_once(
    make_gate: GateFactory, db_url: str, fake_slack: FakeSlack
) -> None:
    # Two replicas on one database: the in-memory dedupe of each cannot see the other's
    # deliveries, so the card's Extend button carries the deadline it showed and the move is
    # a compare-and-set on it.
    settings = slack_settings(db_url, fake_slack)
    first, second = make_gate(settings=settings), make_gate(settings=settings)
    request_id = _submit(first)
    before = datetime.fromisoformat(_request(first, request_id)["expires_at"])
    card = wait_until(lambda: next(iter(fake_slack.posted()), None))
    button = next(
        element
        for block in card.blocks
        if block.get("type") == "actions"
        for element in block["elements"]
        if element.get("action_id") == "gate_extend"
    )
    assert button["value"].startswith(f"{request_id}|")
    click = block_actions(request_id, "U0BOB", "gate_extend", trigger_id="trig-two-replicas")
    click["actions"][0]["value"] = button["value"]
    assert interact(first, click).status_code == 200
    assert interact(second, click).status_code == 200  # Slack's retry, to the other replica
    after = datetime.fromisoformat(_request(first, request_id)["expires_at"])
    assert (after - before).total_seconds() == 15 * 60
    assert _audit_kinds(first, request_id).count("extended") == 1
