"""Callbacks through a real gate over HTTP: URL verification, refusals before reading,
card clicks, typed reasons and edits, the reasons form, and what the clicker is told."""

from __future__ import annotations

import time

import httpx

from tests.conftest import Gate
from tests.support import config as cfg
from tests.support import fake_wecom
from tests.support.fake_wecom import FakeWeCom
from tests.support.http import TLS
from tests.support.servers import wait_until
from tests.wecom.conftest import (
    AES_KEY,
    TOKEN,
    ask,
    deliver,
    posted,
    press,
    say,
    user,
)

URL = "/channels/wecom/callback"


def status(gate: Gate, request_id: str) -> str:
    with gate.client(cfg.ADMIN) as c:
        return str(c.get(f"/v1/requests/{request_id}").json()["status"])


def told(fake: FakeWeCom, person: str, nth: int = -1) -> str:
    texts: list[str] = wait_until(lambda: fake.texts_to(user(person)))
    return texts[nth]


def test_url_verification_answers_the_decrypted_echostr(wecom_gate: Gate) -> None:
    query = fake_wecom.url_verification(token=TOKEN, encoding_aes_key=AES_KEY, echo="12345678")
    with wecom_gate.client() as c:
        r = c.get(URL, params=query)
        assert (r.status_code, r.text) == (200, "12345678")
        forged = c.get(URL, params={**query, "msg_signature": "0" * 40})
        assert forged.status_code == 401 and forged.json()["error"]["code"] == "bad_signature"
        wrong_key = fake_wecom.url_verification(
            token=TOKEN, encoding_aes_key="Z" * 42 + "A", echo="x"
        )
        assert c.get(URL, params=wrong_key).status_code == 400  # signed, not ours to decrypt


def test_bodies_that_cannot_be_checked_are_401(wecom_gate: Gate, fake: FakeWeCom) -> None:
    request_id = ask(wecom_gate)
    message = posted(fake, request_id)
    plain = fake_wecom.card_event_xml(
        user=user("alice"), task_id=message.task_id, event_key="approve", response_code="rc"
    )
    good = fake_wecom.build_callback(plain, token=TOKEN, encoding_aes_key=AES_KEY)
    with wecom_gate.client() as c:
        huge = c.post(URL, params=good.query, content=good.body + b" " * 70_000)
        assert huge.status_code == 401
        no_encrypt = c.post(URL, params=good.query, content=b"<xml><Encrypt></Encrypt></xml>")
        assert no_encrypt.status_code == 401
        future = fake_wecom.build_callback(
            plain, token=TOKEN, encoding_aes_key=AES_KEY, timestamp=int(time.time()) + 900
        )
        assert c.post(URL, params=future.query, content=future.body).status_code == 401
    assert status(wecom_gate, request_id) == "pending"


def test_a_click_approves_and_the_card_is_replaced(wecom_gate_db: Gate, fake: FakeWeCom) -> None:
    request_id = ask(wecom_gate_db)
    message = posted(fake, request_id)
    assert message.recipients == {"touser": "alice|bob"}
    assert press(wecom_gate_db, fake, request_id, "alice", "approve").text == ""
    assert status(wecom_gate_db, request_id) == "approved"
    wait_until(lambda: len(message.cards) == 2)
    assert message.card["card_type"] == "text_notice"
    assert "Approved by alice in WeCom" in message.card["sub_title_text"]
    assert fake.card_problems == []


def test_a_card_gate_did_not_make_is_ignored(wecom_gate: Gate, fake: FakeWeCom) -> None:
    plain = fake_wecom.card_event_xml(
        user=user("alice"), task_id="someone-elses-task", event_key="approve", response_code="x"
    )
    assert deliver(wecom_gate, plain).status_code == 200
    assert fake.texts_to(user("alice")) == []


def test_reject_is_typed_with_a_reason(wecom_gate: Gate, fake: FakeWeCom) -> None:
    request_id = ask(wecom_gate)
    press(wecom_gate, fake, request_id, "bob", "reject")
    hint = told(fake, "bob")
    assert f"reject {request_id} [your reason]" in hint
    assert status(wecom_gate, request_id) == "pending"
    say(wecom_gate, "bob", f"reject {request_id}")
    assert "say why" in told(fake, "bob")
    say(wecom_gate, "bob", f"REJECT {request_id} Split it\nin two, please")
    assert status(wecom_gate, request_id) == "rejected"
    with wecom_gate.client(cfg.ADMIN) as c:
        reason = c.get(f"/v1/requests/{request_id}").json()["reason"]
    assert reason.endswith(": Split it\nin two, please")
    assert told(fake, "bob").startswith("Rejected by bob")


def test_preset_reasons_come_as_a_private_form(wecom_gate: Gate, fake: FakeWeCom) -> None:
    request_id = ask(wecom_gate, "refund_order", {"amount": 900})
    press(wecom_gate, fake, request_id, "bob", "reject")
    form = wait_until(
        lambda: next((m for m in fake.posted() if m.task_id.startswith("why-")), None)
    )
    assert form.recipients == {"touser": user("bob")}  # sent to the clicker alone
    options = form.card["checkbox"]["option_list"]
    assert [o["text"] for o in options] == ["wrong customer", "too expensive"]
    plain = fake_wecom.card_event_xml(
        user=user("bob"),
        task_id=form.task_id,
        event_key="reject",
        response_code=fake.issue_code(form.task_id),
        card_type="vote_interaction",
        selected={"reasons": ["r1"]},
    )
    assert deliver(wecom_gate, plain).status_code == 200
    assert status(wecom_gate, request_id) == "rejected"


def test_edits_are_typed_from_the_template(wecom_gate: Gate, fake: FakeWeCom) -> None:
    args = {"amount": 900, "currency": "EUR", "customer": "c-1"}
    request_id = ask(wecom_gate, "refund_order", args)
    press(wecom_gate, fake, request_id, "alice", "edit")
    template = told(fake, "alice")
    assert f'edit {request_id}\namount=900\ncurrency="EUR"' in template
    say(wecom_gate, "alice", f"edit {request_id}\ncustomer=c-2")
    assert "not an argument you can edit" in told(fake, "alice")
    say(wecom_gate, "alice", f"edit {request_id}\namount=lots")
    assert "expected a number" in told(fake, "alice")
    say(wecom_gate, "alice", f"edit {request_id}\namount = 500\n")
    assert status(wecom_gate, request_id) == "approved"
    with wecom_gate.client(cfg.ADMIN) as c:
        assert c.get(f"/v1/requests/{request_id}").json()["approved_args"]["amount"] == 500


def test_a_typed_message_is_acted_on_once(wecom_gate: Gate, fake: FakeWeCom) -> None:
    request_id = ask(wecom_gate, "wire_funds", {"amount": 10})  # needs two approvals
    plain = fake_wecom.text_xml(user=user("alice"), content=f"reject {request_id} no", msg_id=7)
    cb = fake_wecom.build_callback(plain, token=TOKEN, encoding_aes_key=AES_KEY)
    with httpx.Client(base_url=wecom_gate.url, verify=TLS) as c:
        for _ in range(3):  # WeCom retries an unanswered callback three times
            assert c.post(URL, params=cb.query, content=cb.body).status_code == 200
    assert len(fake.texts_to(user("alice"))) == 1


def test_other_text_gets_help_and_hostile_text_stays_inert(
    wecom_gate: Gate, fake: FakeWeCom
) -> None:
    say(wecom_gate, "alice", "hello?")
    assert "reject [request id] [reason]" in told(fake, "alice")
    hostile = '<a href="https://evil.example">Approve here</a>\u202e'
    say(wecom_gate, "alice", f"edit 01NOPE\n{hostile}=1")
    answer = told(fake, "alice")
    assert "<" not in answer and "\u202e" not in answer  # a text message would render <a>


def test_a_callback_for_another_app_is_ignored(wecom_gate: Gate, fake: FakeWeCom) -> None:
    request_id = ask(wecom_gate)
    task = posted(fake, request_id).task_id
    plain = fake_wecom.card_event_xml(
        user=user("alice"), task_id=task, event_key="approve", response_code="rc-other"
    ).replace(b"<AgentID>1000002</AgentID>", b"<AgentID>1000099</AgentID>")
    assert deliver(wecom_gate, plain).status_code == 200
    assert status(wecom_gate, request_id) == "pending"
