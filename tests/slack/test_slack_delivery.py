"""Slack being down, slow or misconfigured: cards retry through the outbox or die visibly."""

from __future__ import annotations

from typing import Any

import pytest

from gate.decisions.readmodel import DeliveryView
from tests.conftest import Gate, GateFactory
from tests.slack.conftest import card_for, card_text, has_buttons, slack_settings
from tests.support import config as cfg
from tests.support.fake_slack import FakeSlack
from tests.support.servers import wait_until


def _submit(gate: Gate, amount: int = 60000) -> str:
    answer = gate.submit(tool_name="pay_vendor", tool_args={"amount": amount}, user_id="dave")
    request_id: str = answer["request"]["id"]
    return request_id


def _slack_rows(gate: Gate, request_id: str) -> list[DeliveryView]:
    view = gate.state.service.view(request_id, full=True)
    assert view is not None
    return [d for d in view.deliveries if d.channel == "slack"]


def _posts_for(fake: FakeSlack, request_id: str, *, ok: bool) -> int:
    return sum(
        1
        for call in fake.calls_to("chat.postMessage", ok=ok)
        if request_id in str(call.body.get("blocks"))
    )


def test_slack_down_requests_stay_decidable_and_cards_arrive_once_back(
    slack_gate: Gate, fake_slack: FakeSlack
) -> None:
    fake_slack.fail(status=500, times=None, html=True)  # a proxy's HTML error page
    decided_meanwhile = _submit(slack_gate)
    still_pending = _submit(slack_gate, amount=70000)
    wait_until(lambda: _posts_for(fake_slack, still_pending, ok=False) >= 1)
    wait_until(lambda: all(d.last_error for d in _slack_rows(slack_gate, still_pending)))
    assert "Slack chat.postMessage failed: no error code (HTTP 500)" == (
        _slack_rows(slack_gate, still_pending)[0].last_error or ""
    )

    r = slack_gate.decide(decided_meanwhile, cfg.ALICE, "approve", "ok from the API")
    assert r.status_code == 200 and r.json()["status"] == "approved"

    fake_slack.heal()
    pending_card = card_for(fake_slack, still_pending)
    assert has_buttons(pending_card)
    decided_card = card_for(fake_slack, decided_meanwhile)
    wait_until(lambda: "Approved by alice in the API" in card_text(decided_card))
    assert not has_buttons(decided_card)
    wait_until(lambda: all(d.status == "sent" for d in _slack_rows(slack_gate, decided_meanwhile)))
    for request_id in (decided_meanwhile, still_pending):
        assert _posts_for(fake_slack, request_id, ok=True) == 1
    assert len(fake_slack.posted()) == 2


def test_rate_limit_is_retried_after_retry_after(
    slack_gate_sqlite: Gate, fake_slack: FakeSlack
) -> None:
    fake_slack.fail("chat.postMessage", status=429, retry_after=1, times=1)
    request_id = _submit(slack_gate_sqlite)
    card_for(fake_slack, request_id)
    statuses = [c.status for c in fake_slack.calls_to("chat.postMessage")]
    # One 429, seen by the outbox (slack-sdk's own retry handlers are off), then one post.
    assert statuses == [429, 200]
    wait_until(lambda: _slack_rows(slack_gate_sqlite, request_id)[0].status == "sent")
    [row] = _slack_rows(slack_gate_sqlite, request_id)
    assert row.attempts == 2


def test_network_failure_is_retried(
    make_gate: GateFactory, sqlite_url: str, fake_slack: FakeSlack
) -> None:
    from tests.support.servers import free_port

    unreachable = f"http://127.0.0.1:{free_port()}/api/"
    gate = make_gate(settings=slack_settings(sqlite_url, fake_slack, api_url=unreachable))
    request_id = _submit(gate)
    wait_until(lambda: (rows := _slack_rows(gate, request_id)) and rows[0].last_error)
    [row] = _slack_rows(gate, request_id)
    assert row.status == "pending"
    assert "ClientConnectorError" in (row.last_error or "")


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"default_target": "C0GONE"}, "channel_not_found"),
        ({"bot_token": "xoxb-revoked-or-wrong"}, "invalid_auth"),
    ],
)
def test_permanent_errors_mark_the_delivery_dead(
    make_gate: GateFactory,
    db_url: str,
    fake_slack: FakeSlack,
    settings: dict[str, Any],
    error: str,
) -> None:
    gate = make_gate(settings=slack_settings(db_url, fake_slack, **settings))
    request_id = _submit(gate)
    wait_until(lambda: [d for d in _slack_rows(gate, request_id) if d.status == "dead"])
    [row] = _slack_rows(gate, request_id)
    assert row.attempts == 1
    assert row.last_error == f"Slack chat.postMessage failed: {error}"
    assert len(fake_slack.calls_to("chat.postMessage")) == 1
    # the request itself is unaffected: still decidable from the API
    r = gate.decide(request_id, cfg.BOB, "reject", "no")
    assert r.status_code == 200 and r.json()["status"] == "rejected"


@pytest.mark.parametrize("error", ["not_in_channel", "token_revoked", "missing_scope"])
def test_other_permanent_slack_errors(
    slack_gate_sqlite: Gate, fake_slack: FakeSlack, error: str
) -> None:
    fake_slack.fail("chat.postMessage", error=error, times=1)
    request_id = _submit(slack_gate_sqlite)
    wait_until(
        lambda: [d for d in _slack_rows(slack_gate_sqlite, request_id) if d.status == "dead"]
    )
    [row] = _slack_rows(slack_gate_sqlite, request_id)
    assert row.last_error == f"Slack chat.postMessage failed: {error}"


def test_an_update_failure_does_not_lose_the_outcome(
    slack_gate_sqlite: Gate, fake_slack: FakeSlack
) -> None:
    request_id = _submit(slack_gate_sqlite)
    card = card_for(fake_slack, request_id)
    fake_slack.fail("chat.update", status=503, times=1)
    assert slack_gate_sqlite.decide(request_id, cfg.ALICE).status_code == 200
    wait_until(lambda: not has_buttons(card), timeout=15)
    assert [c.status for c in fake_slack.calls_to("chat.update")] == [503, 200]
