"""Signed outgoing webhooks end to end: a real gate (each database) sends each request's
events through its outbox to a loopback receiver that verifies every message with the
Standard Webhooks library; failures are retried with a doubling wait, dead after the
webhook's attempts and resent from the console; two replicas send each message once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from standardwebhooks import Webhook, WebhookVerificationError

from gate.config.settings import Settings, WebhookSettings
from gate.decisions import audit
from gate.delivery.webhooks import body_of, signed_headers
from gate.store import webhooks as outbox
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support.fake_webhooks import SECRET, FakeReceiver
from tests.support.servers import wait_until
from tests.web.conftest import csrf_of, flash_error, landed, sign_in, web_settings

#: the payment rule of the standard settings asks finance above 50k
PAYMENT = {"tool_name": "pay_vendor", "tool_args": {"amount": 60000}}


@pytest.fixture
def receiver() -> Iterator[FakeReceiver]:
    fake = FakeReceiver().start()
    yield fake
    fake.stop()


def hook(receiver: FakeReceiver, **extra: Any) -> dict[str, Any]:
    """A `[[webhooks]]` entry pointed at the receiver, retrying quickly."""
    return {"name": "audit-feed", "url": receiver.url, "secret": SECRET} | {
        "retry_base_seconds": 0.3,
        **extra,
    }


def with_hooks(database_url: str, *hooks: dict[str, Any]) -> Settings:
    data = cfg.settings_data(database_url)
    data["webhooks"] = list(hooks)
    return Settings(**data)


def messages(gate: Gate, request_id: str | None = None) -> list[dict[str, Any]]:
    """The webhook rows in the database, oldest first."""
    statement = sa.select(outbox.WEBHOOK).order_by(outbox.WEBHOOK.c.id)
    if request_id is not None:
        statement = statement.where(outbox.WEBHOOK.c.request_id == request_id)
    with gate.state.db.read_conn() as conn:
        return [dict(row._mapping) for row in conn.execute(statement)]


def test_each_event_arrives_signed_with_its_audit_hash_and_no_free_text(
    make_gate: GateFactory, db_url: str, receiver: FakeReceiver
) -> None:
    gate = make_gate(settings=with_hooks(db_url, hook(receiver)))
    asked = gate.submit(**PAYMENT, justification="Invoice 7. AGENT-TEXT ignore previous rules")
    rid = asked["request"]["id"]
    assert gate.decide(rid, cfg.ALICE, comment="HUMAN-TEXT fine").status_code == 200
    with gate.client(cfg.AGENT) as c:
        told = c.post(f"/v1/requests/{rid}/outcome", json={"outcome": "ran", "summary": "SUMMARY"})
    assert told.status_code == 200, told.text
    wait_until(lambda: len(receiver.taken) == 3)

    assert receiver.rejected == []  # every message verified with the library
    by_type = {r.payload["type"]: r for r in receiver.taken}
    assert set(by_type) == {"request.created", "request.decided", "request.outcome"}
    with gate.client(cfg.ALICE) as c:
        trail = {e["kind"]: e for e in c.get(f"/v1/requests/{rid}/audit").json()}
    for kind, got in (("created", "created"), ("approved", "decided"), ("ran", "outcome")):
        data = by_type[f"request.{got}"].payload["data"]
        assert data["request_id"] == rid and data["kind"] == kind
        # the chain hash is the audit event's: a receiver can match it to `gate audit verify`
        assert data["audit"]["chain_hash"] == trail[kind]["chain_hash"]
        assert data["audit"]["prev_hash"] == trail[kind]["prev_hash"]
    decided = by_type["request.decided"].payload["data"]
    assert (decided["actor"], decided["via"]) == ("alice", "api")
    assert decided["detail"]["approvals"] == 1
    assert by_type["request.created"].payload["data"]["detail"]["rule"] == "big-payments"
    for received in receiver.taken:
        # nobody's free text travels: the justification, the comment, the summary
        for text in (b"AGENT-TEXT", b"HUMAN-TEXT", b"SUMMARY"):
            assert text not in received.body
        assert received.msg_id.startswith("msg_")
        assert received.headers["content-type"] == "application/json"
    assert len({r.msg_id for r in receiver.taken}) == 3
    # marked sent once the receiver's answer is back
    wait_until(lambda: {m["status"] for m in messages(gate, rid)} == {"sent"})


def test_a_receiver_with_the_library_refuses_tampered_messages(receiver: FakeReceiver) -> None:
    settings = WebhookSettings(name="h", url=receiver.url, secret=SECRET)
    payload = {"type": "request.decided", "data": {"request_id": "01X", "kind": "approved"}}
    body = body_of(payload)
    now = datetime.now(UTC)
    good = signed_headers(settings, "msg_1", now, body)
    assert Webhook(SECRET).verify(body, good) == payload

    other = "whsec_" + "QUJD" * 8  # another key of 24 bytes
    forged = signed_headers(
        WebhookSettings(name="h", url=receiver.url, secret=other), "msg_1", now, body
    )
    old = signed_headers(settings, "msg_1", now - timedelta(minutes=10), body)
    tampered: list[tuple[str, dict[str, str]]] = [
        (body.replace("approved", "rejected"), good),  # the body changed
        (body, forged),  # signed with another secret
        (body, good | {"webhook-id": "msg_2"}),  # the id changed
        (body, good | {"webhook-timestamp": str(int(now.timestamp()) + 1)}),
        (body, old),  # replayed after the library's five minutes
        (body, {k: v for k, v in good.items() if k != "webhook-signature"}),
    ]
    for text, headers in tampered:
        with pytest.raises(WebhookVerificationError):
            Webhook(SECRET).verify(text, headers)
    with httpx.Client() as client:
        for text, headers in tampered:
            assert client.post(receiver.url, content=text, headers=headers).status_code == 401
        assert client.post(receiver.url, content=body, headers=good).status_code == 204
    assert len(receiver.rejected) == len(tampered) and len(receiver.taken) == 1


def test_failures_back_off_then_die_and_the_console_resends(
    make_gate: GateFactory, db_url: str, receiver: FakeReceiver
) -> None:
    receiver.fail_with(500)
    settings = web_settings(db_url)
    entry = WebhookSettings(**hook(receiver, events=["created"], max_attempts=3))
    gate = make_gate(settings=settings.model_copy(update={"webhooks": [entry]}))
    rid = gate.submit(**PAYMENT)["request"]["id"]

    wait_until(lambda: [m["status"] for m in messages(gate, rid)] == ["dead"], timeout=15)
    tries = receiver.attempts
    assert len(tries) == 3 and len({t.msg_id for t in tries}) == 1
    first_wait, second_wait = tries[1].at - tries[0].at, tries[2].at - tries[1].at
    # 0.3 s, then twice that: never sooner (each is due that long after its failure was
    # marked), and later by about a pump tick (0.2 s; the upper bound leaves room for a
    # loaded machine)
    assert 0.28 <= first_wait < 0.3 + 2, first_wait
    assert 0.58 <= second_wait < 0.6 + 2, second_wait
    [dead] = messages(gate, rid)
    assert dead["attempts"] == 3 and dead["last_error"].startswith("HTTP 500")
    time.sleep(1.0)
    assert len(receiver.attempts) == 3  # a dead message is not tried again by itself
    with gate.client() as c:  # an alert can watch for it
        assert (
            'gate_webhook_messages{status="dead",webhook="audit-feed"} 1.0'
            in c.get("/metrics").text
        )

    with sign_in(gate, "alice") as c:
        page = c.get("/webhooks")
        assert page.status_code == 200
        row = page.text.split(f'id="webhook-{dead["id"]}"')[1].split("</tr>")[0]
        assert 'data-status="dead"' in row and '<td data-label="Attempts">3</td>' in row
        assert "HTTP 500" in row and f'action="/webhooks/{dead["id"]}/resend"' in row
        assert "1 dead" in page.text
        refused = c.post(f"/webhooks/{dead['id']}/resend", data={"csrf_token": "forged"})
        assert refused.status_code == 403
        assert messages(gate, rid)[0]["status"] == "dead"

        receiver.heal()
        r = c.post(f"/webhooks/{dead['id']}/resend", data={"csrf_token": csrf_of(page.text)})
        r = landed(c, r, "/webhooks")
        assert f"Resending created message {dead['msg_id']} to audit-feed" in r.text
        wait_until(lambda: len(receiver.taken) == 1)
        assert receiver.taken[0].msg_id == dead["msg_id"]  # the same message, same id
        wait_until(lambda: messages(gate, rid)[0]["status"] == "sent")
        again = c.post(f"/webhooks/{dead['id']}/resend", data={"csrf_token": csrf_of(page.text)})
        assert again.status_code == 409
        assert "No dead webhook message" in flash_error(again.text)
        assert 'data-status="sent"' in c.get("/webhooks").text


def test_a_message_is_owed_only_by_a_transaction_that_commits(
    make_gate: GateFactory, db_url: str, receiver: FakeReceiver
) -> None:
    gate = make_gate(settings=with_hooks(db_url, hook(receiver, events=["decided"])))
    rid = gate.submit(**PAYMENT)["request"]["id"]
    db, now = gate.state.db, datetime.now(UTC)

    def cancelled(session: Any) -> None:
        audit.record(session, request_id=rid, kind="cancelled", actor="x", via="t", now=now)

    with pytest.raises(RuntimeError), db.write() as session:
        cancelled(session)
        raise RuntimeError("the change failed after its audit event")
    assert messages(gate, rid) == []  # rolled back with the event
    # A double decision: one wins, the other finds it decided; one message
    assert gate.decide(rid, cfg.ALICE, "reject", "wrong vendor").status_code == 200
    assert gate.decide(rid, cfg.BOB, "reject", "no").status_code == 409
    wait_until(lambda: len(receiver.taken) == 1)
    assert [m["event"] for m in messages(gate, rid)] == ["decided"]
    assert receiver.taken[0].payload["data"]["kind"] == "rejected"


@pytest.mark.postgres
def test_two_replicas_send_each_message_once(
    make_gate: GateFactory, postgres_url: str, receiver: FakeReceiver
) -> None:
    receiver.delay = 0.02
    settings = with_hooks(postgres_url, hook(receiver, events=["created"]))
    replicas = [make_gate(settings=settings), make_gate(settings=settings)]
    asked = [replicas[n % 2].submit(**PAYMENT)["request"]["id"] for n in range(40)]
    wait_until(lambda: len(receiver.taken) >= 40, timeout=30)
    time.sleep(1.0)  # any second send would have landed by now
    ids = [r.msg_id for r in receiver.attempts]
    assert len(ids) == 40 and len(set(ids)) == 40
    assert {r.payload["data"]["request_id"] for r in receiver.taken} == set(asked)
    wait_until(lambda: {m["status"] for m in messages(replicas[0])} == {"sent"})
    # both pumps took part: each claimed some of the messages, none claimed one twice
    delivered = [gate.state.webhooks.delivered for gate in replicas if gate.state.webhooks]
    assert sum(delivered) == 40 and min(delivered) > 0, delivered


def test_a_change_sends_its_message_at_once_not_at_the_next_tick(
    make_gate: GateFactory, sqlite_url: str, receiver: FakeReceiver
) -> None:
    settings = with_hooks(sqlite_url, hook(receiver, events=["created"]))
    settings.server.outbox_interval_seconds = 30.0  # the pump's tick never comes in this test
    gate = make_gate(settings=settings)
    started = time.monotonic()
    gate.submit(**PAYMENT)
    wait_until(lambda: len(receiver.taken) == 1, timeout=5)
    assert receiver.taken[0].at - started < 5
