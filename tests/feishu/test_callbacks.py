"""The Feishu callback endpoint over a real gate: challenge, clicks, refusals, duplicates."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from tests.conftest import Gate, GateFactory
from tests.feishu.conftest import (
    CHAT,
    VERIFICATION_TOKEN,
    feishu_settings,
    send_callback,
)
from tests.support import config as cfg
from tests.support.fake_feishu import FakeFeishu, Message, check_card, encrypt, url_verification
from tests.support.servers import wait_until


def submit_and_card(
    gate: Gate, fake: FakeFeishu, tool: str = "pay_vendor", **args: Any
) -> tuple[str, Message]:
    """Submit a call that needs approval and wait for its card to reach Feishu."""
    answer = gate.submit(tool_name=tool, tool_args=args or {"amount": 60000}, user_id="dave")
    assert answer["decision"] == "ask", answer
    request_id = answer["request"]["id"]

    def card() -> Message | None:
        for message in fake.posted():
            values = json.dumps(message.cards[0])
            if request_id in values:
                return message
        return None

    return request_id, wait_until(card)


class Waiter(threading.Thread):
    """An agent long-polling /wait in the background."""

    def __init__(self, gate: Gate, request_id: str) -> None:
        super().__init__(daemon=True)
        self.gate, self.request_id = gate, request_id
        self.result: dict[str, Any] = {}
        self.start()

    def run(self) -> None:
        with self.gate.client(cfg.AGENT) as c:
            r = c.get(f"/v1/requests/{self.request_id}/wait", params={"timeout": 20})
        self.result = r.json()


def state(gate: Gate, request_id: str) -> dict[str, Any]:
    with gate.client(cfg.ADMIN) as c:
        r = c.get(f"/v1/requests/{request_id}")
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def click(fake: FakeFeishu, message: Message, button: str, open_id: str, **kw: Any) -> Any:
    return fake.click(
        message.message_id,
        button,
        open_id=open_id,
        verification_token=VERIFICATION_TOKEN,
        **kw,
    )


# -- url verification -------------------------------------------------------------------------


def test_challenge_plain_and_encrypted(feishu_gate: Gate, fake_feishu: FakeFeishu) -> None:
    plain = send_callback(feishu_gate, url_verification(VERIFICATION_TOKEN), encrypted=False)
    assert plain.status_code == 200
    assert plain.json() == {"challenge": "ajls384kdjx98XX"}
    # Feishu sends the challenge encrypted (and unsigned) once an Encrypt Key is set.
    body = url_verification(VERIFICATION_TOKEN, "c-8f2e")
    encrypted = send_callback(feishu_gate, body, signed=False)
    assert encrypted.status_code == 200
    assert encrypted.json() == {"challenge": "c-8f2e"}
    wrong = send_callback(feishu_gate, url_verification("not-the-token"), signed=False)
    assert wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "bad_token"


def test_challenge_without_encrypt_key(
    make_gate: GateFactory, sqlite_url: str, fake_feishu: FakeFeishu
) -> None:
    gate = make_gate(settings=feishu_settings(sqlite_url, fake_feishu, encrypt_key=None))
    r = send_callback(gate, url_verification(VERIFICATION_TOKEN), encrypted=False, encrypt_key=None)
    assert r.json() == {"challenge": "ajls384kdjx98XX"}


# -- clicks -----------------------------------------------------------------------------------


def test_card_posted_on_submit(
    make_gate: GateFactory, db_url: str, fake_feishu: FakeFeishu
) -> None:
    gate = make_gate(settings=feishu_settings(db_url, fake_feishu))
    request_id, message = submit_and_card(gate, fake_feishu)
    assert message.receive_id == CHAT and message.receive_id_type == "chat_id"
    (create,) = fake_feishu.recorded("POST", "/open-apis/im/v1/messages")
    assert create.headers["authorization"].startswith("Bearer t-")
    assert create.body["msg_type"] == "interactive"
    assert check_card(create.body["content"]) == []
    assert fake_feishu.card_problems == []
    view = gate.state.service.view(request_id, full=True)
    assert view is not None
    (delivery,) = view.deliveries
    wait_until(
        lambda: gate.state.service.view(request_id, full=True).deliveries[0].status == "sent"
    )
    delivery = gate.state.service.view(request_id, full=True).deliveries[0]
    assert delivery.message_ref == message.message_id


def test_encrypted_click_approves_and_the_waiter_returns(
    make_gate: GateFactory, db_url: str, fake_feishu: FakeFeishu
) -> None:
    gate = make_gate(settings=feishu_settings(db_url, fake_feishu))
    request_id, message = submit_and_card(gate, fake_feishu)
    waiter = Waiter(gate, request_id)
    r = send_callback(gate, click(fake_feishu, message, "approve", "ou_alice"))
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["toast"] == {"type": "success", "content": "Approved by alice in Feishu."}
    card = answer["card"]
    assert card["type"] == "raw"
    assert card["data"]["header"]["template"] == "green"
    assert check_card(json.dumps(card["data"])) == []
    assert '"tag": "form"' not in json.dumps(card["data"])  # no buttons once decided
    waiter.join(15)
    assert waiter.result["status"] == "approved"
    assert waiter.result["decided_by"] == "alice"
    assert waiter.result["decided_via"] == "feishu"
    # The outbox also refreshes the card for everyone in the chat (PATCH).
    wait_until(lambda: len(message.cards) >= 2)
    assert message.card["header"]["template"] == "green"


def test_reject_asks_for_a_reason_and_the_reason_reaches_the_waiter(
    feishu_gate: Gate, fake_feishu: FakeFeishu
) -> None:
    fake = fake_feishu
    request_id, message = submit_and_card(feishu_gate, fake)
    bare = send_callback(feishu_gate, click(fake, message, "reject", "ou_bob"))
    assert bare.status_code == 200
    assert bare.json()["toast"]["type"] == "error"
    assert "reason" in bare.json()["toast"]["content"]
    assert state(feishu_gate, request_id)["status"] == "pending"

    waiter = Waiter(feishu_gate, request_id)
    reason = "Vendor is not on the approved list"
    r = send_callback(feishu_gate, click(fake, message, "reject", "ou_bob", reason=reason))
    assert r.json()["toast"]["type"] == "success"
    assert r.json()["card"]["data"]["header"]["template"] == "red"
    waiter.join(15)
    assert waiter.result["status"] == "rejected"
    assert waiter.result["reason"] == f"Rejected by bob in Feishu: {reason}"


def test_non_approver_gets_a_toast_and_nothing_changes(
    feishu_gate: Gate, fake_feishu: FakeFeishu
) -> None:
    fake = fake_feishu
    request_id, message = submit_and_card(feishu_gate, fake)
    for open_id in ("ou_mallory", "ou_stranger"):
        r = send_callback(feishu_gate, click(fake, message, "approve", open_id))
        assert r.status_code == 200
        assert r.json()["toast"] == {
            "type": "error",
            "content": "Not recorded: you are not an approver for this rule.",
        }
        assert r.json()["card"]["data"]["header"]["template"] == "orange"
    after = state(feishu_gate, request_id)
    assert after["status"] == "pending" and after["votes"] == []


def test_a_finished_request_answers_already_decided(
    feishu_gate: Gate, fake_feishu: FakeFeishu
) -> None:
    fake = fake_feishu
    request_id, message = submit_and_card(feishu_gate, fake)
    late = click(fake, message, "reject", "ou_bob", reason="late")  # bob still sees buttons
    assert feishu_gate.decide(request_id, cfg.ALICE).status_code == 200
    r = send_callback(feishu_gate, late)
    toast = r.json()["toast"]
    assert toast["type"] == "info"
    assert toast["content"].startswith("Already approved by alice at ")
    assert r.json()["card"]["data"]["header"]["template"] == "green"
    assert state(feishu_gate, request_id)["status"] == "approved"


def test_duplicate_event_ids_decide_once(feishu_gate: Gate, fake_feishu: FakeFeishu) -> None:
    fake = fake_feishu
    request_id, message = submit_and_card(feishu_gate, fake, "wire_funds", amount=1)
    payload = click(fake, message, "approve", "ou_alice", event_id="ev-duplicate-1")
    answers: list[dict[str, Any]] = []

    def deliver() -> None:
        answers.append(send_callback(feishu_gate, payload).json())

    threads = [threading.Thread(target=deliver) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    deliver()  # and once more after the first answers were given
    assert len(answers) == 4
    assert all(a == answers[0] for a in answers)
    assert answers[0]["toast"]["content"] == "Your approval is recorded (1 of 2)."
    view = feishu_gate.state.service.view(request_id, full=True)
    assert view is not None
    assert [v.approver for v in view.votes] == ["alice"]
    assert [a.kind for a in view.audit].count("vote") == 1
    # A new click (new event id) from the same person is not counted twice either.
    again = send_callback(feishu_gate, click(fake, message, "approve", "ou_alice"))
    assert again.json()["toast"] == {
        "type": "info",
        "content": "You already voted to approve this request.",
    }


def test_legacy_card_callback_signed_with_the_verification_token(
    make_gate: GateFactory, sqlite_url: str, fake_feishu: FakeFeishu
) -> None:
    # Only without an Encrypt Key: with one, tests/feishu/test_feishu_hostile.py shows the
    # token-signed callback refused.
    fake = fake_feishu
    feishu_gate = make_gate(settings=feishu_settings(sqlite_url, fake, encrypt_key=None))
    request_id, message = submit_and_card(feishu_gate, fake)
    legacy = {
        "open_id": "ou_alice",
        "open_message_id": message.message_id,
        "open_chat_id": CHAT,
        "tenant_key": "2df73991750",
        "token": "c-" + "0" * 40,
        "action": {"tag": "button", "value": {"request_id": request_id, "verdict": "approve"}},
    }
    r = send_callback(
        feishu_gate, legacy, encrypted=False, signing_secret=VERIFICATION_TOKEN, algo="sha1"
    )
    assert r.status_code == 200, r.text
    assert r.json() == {"toast": {"type": "success", "content": "Approved by alice in Feishu."}}
    assert state(feishu_gate, request_id)["status"] == "approved"


def test_other_events_are_acknowledged_and_ignored(
    feishu_gate: Gate, fake_feishu: FakeFeishu
) -> None:
    event = {
        "schema": "2.0",
        "header": {"event_type": "im.message.receive_v1", "token": VERIFICATION_TOKEN},
        "event": {},
    }
    r = send_callback(feishu_gate, event)
    assert r.status_code == 200 and r.json() == {}


# -- refusals ---------------------------------------------------------------------------------

REFUSALS: dict[str, tuple[dict[str, Any], int, str]] = {
    "bad signature": ({"signing_secret": "not-the-encrypt-key"}, 401, "bad_signature"),
    "unsigned": ({"signed": False}, 401, "bad_signature"),
    "stale timestamp": ({"timestamp": int(time.time()) - 3600}, 401, "stale_request"),
    "future timestamp": ({"timestamp": int(time.time()) + 3600}, 401, "stale_request"),
    "wrong verification token": ({"token": "not-the-token"}, 401, "bad_token"),
    "undecryptable body": ({"cipher_key": "some-other-key"}, 400, "undecryptable"),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_refused_callbacks_change_nothing(
    feishu_gate: Gate, fake_feishu: FakeFeishu, case: str
) -> None:
    fake = fake_feishu
    request_id, message = submit_and_card(feishu_gate, fake)
    options, status, code = REFUSALS[case]
    payload = click(fake, message, "approve", "ou_alice")
    if "token" in options:
        payload["header"]["token"] = options.pop("token")
    if "cipher_key" in options:
        body = json.dumps(
            {"encrypt": encrypt(options.pop("cipher_key"), json.dumps(payload).encode())}
        )
        r = send_callback(feishu_gate, body.encode(), encrypted=False)
    else:
        r = send_callback(feishu_gate, payload, **options)
    assert r.status_code == status, r.text
    assert set(r.json()) == {"error"}
    assert r.json()["error"]["code"] == code
    after = state(feishu_gate, request_id)
    assert after["status"] == "pending" and after["votes"] == []


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ({"X-Lark-Signature": "abc", "X-Lark-Request-Nonce": "n"}, b"{}"),
        (
            {"X-Lark-Signature": "abc", "X-Lark-Request-Timestamp": "yesterday"},
            b"{}",
        ),
    ],
)
def test_malformed_signature_headers_are_401(
    feishu_gate: Gate, headers: dict[str, str], body: bytes
) -> None:
    with feishu_gate.client() as c:
        r = c.post("/channels/feishu/events", content=body, headers=headers)
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "bad_signature"


def test_signed_garbage_is_a_precise_400(feishu_gate: Gate, fake_feishu: FakeFeishu) -> None:
    r = send_callback(feishu_gate, b"not json at all", encrypted=False)
    assert r.status_code == 400
    assert r.json()["error"] == {"code": "bad_callback", "message": "body is not JSON"}
    r = send_callback(feishu_gate, b'{"encrypt": "%%%"}', encrypted=False)
    assert r.status_code == 400 and r.json()["error"]["code"] == "undecryptable"
