"""The webhook over a real gate: the secret header before anything is read, bad bodies as
400s, and what each kind of Update does (or does not do)."""

from __future__ import annotations

import copy

import pytest

from tests.conftest import Gate
from tests.support import telegram_buttons
from tests.support.fake_telegram import CHAT, FakeTelegram
from tests.support.servers import wait_until
from tests.telegram.conftest import (
    CALLBACK_SECRET,
    IDS,
    WEBHOOK,
    WEBHOOK_SECRET,
    ask,
    card_of,
    fixture,
    push,
    state,
)


def untouched(gate: Gate, request_id: str) -> None:
    now = state(gate, request_id)
    assert now["status"] == "pending" and now["votes"] == [], now


@pytest.mark.parametrize(
    ("secret", "body"),
    [
        (None, b"\xff{not json"),
        ("wrong-secret-wrong-secret", b"\xff{not json"),
        ("", b"{}"),
        ("telegram-tests-webhook-secret-0001x", b"{}"),
        ("TELEGRAM-tests-webhook-secret-0001", b"{}"),
    ],
)
def test_no_secret_no_reading(tg_gate: Gate, secret: str | None, body: bytes) -> None:
    r = push(tg_gate, body, secret=secret)
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == "bad_secret"


def test_a_secret_header_that_is_not_ascii_is_a_mismatch(tg_gate: Gate) -> None:
    header = (WEBHOOK_SECRET[:-1] + "\u00e9").encode("latin-1")
    with tg_gate.client() as c:
        r = c.post(WEBHOOK, content=b"{}", headers={"X-Telegram-Bot-Api-Secret-Token": header})
    assert r.status_code == 401, r.text


@pytest.mark.parametrize(
    "body",
    [b"\xff{not json", b"[" * 100_000, b"[1, 2]", b'{"update_id": "7"}', b'{"update_id": true}'],
)
def test_a_body_that_is_no_update_is_a_400(tg_gate: Gate, body: bytes) -> None:
    r = push(tg_gate, body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "bad_update"


def test_updates_that_ask_nothing_are_acknowledged(tg_gate: Gate, fake: FakeTelegram) -> None:
    request_id = ask(tg_gate)
    card_of(fake, request_id)
    before = len(fake.calls)
    for update in [
        {"update_id": 1, "edited_message": {"message_id": 1, "text": "/approve x"}},
        {"update_id": 2, "my_chat_member": {"chat": {"id": CHAT}}},
        {"update_id": 3, "message": {"message_id": 9, "chat": {"id": CHAT}, "text": "hi"}},
    ]:
        assert push(tg_gate, update).status_code == 200
    assert len(fake.calls) == before  # nothing answered, nothing sent
    untouched(tg_gate, request_id)


def test_a_forged_button_is_refused_and_changes_nothing(tg_gate: Gate, fake: FakeTelegram) -> None:
    request_id = ask(tg_gate)
    card = card_of(fake, request_id)
    forged = telegram_buttons.mint("some-other-gate-secret-0123456789abcdef", request_id, "approve")
    for data in (forged, "approve", request_id, forged[:-2]):
        update = fake.press(CHAT, card.message_id, data, IDS["alice"])
        assert push(tg_gate, update).status_code == 200
        person, answer = fake.answer(update["callback_query"]["id"])
        assert answer is not None and answer["show_alert"] is True
        assert "not one of gate's" in answer["text"]
    untouched(tg_gate, request_id)


def test_identity_is_the_numeric_id_never_the_name(tg_gate: Gate, fake: FakeTelegram) -> None:
    request_id = ask(tg_gate)
    card = card_of(fake, request_id)
    data = telegram_buttons.mint(CALLBACK_SECRET, request_id, "approve")
    update = fake.press(CHAT, card.message_id, data, IDS["stranger"])
    update["callback_query"]["from"] |= {"first_name": "alice", "username": "alice"}
    assert push(tg_gate, update).status_code == 200
    _, answer = fake.answer(update["callback_query"]["id"])
    assert answer is not None and "not an approver" in answer["text"]
    untouched(tg_gate, request_id)


def test_typed_commands_decide(tg_gate_db: Gate, fake: FakeTelegram) -> None:
    first, second = ask(tg_gate_db), ask(tg_gate_db)
    code = telegram_buttons.code(CALLBACK_SECRET, first)
    said = fake.say(CHAT, IDS["alice"], f"/approve@gate_test_bot {code} looks fine")
    assert push(tg_gate_db, said).status_code == 200
    now = state(tg_gate_db, first)
    assert (now["status"], now["decided_by"], now["decided_via"]) == (
        "approved",
        "alice",
        "telegram",
    )
    (reply,) = fake.replies_to(CHAT, said["message"]["message_id"])
    assert "Approved by alice in Telegram" in reply.shown()[0]

    code = telegram_buttons.code(CALLBACK_SECRET, second)
    said = fake.say(CHAT, IDS["bob"], f"/reject {code}")
    push(tg_gate_db, said)
    assert "write the reason" in fake.replies_to(CHAT, said["message"]["message_id"])[0].html
    untouched(tg_gate_db, second)
    push(tg_gate_db, fake.say(CHAT, IDS["bob"], f"/reject {code.upper()} Split it\nin two"))
    now = state(tg_gate_db, second)
    assert now["status"] == "rejected" and "Split it\nin two" in now["reason"]


def test_commands_for_others_and_from_bots_are_ignored(tg_gate: Gate, fake: FakeTelegram) -> None:
    request_id = ask(tg_gate)
    card_of(fake, request_id)
    code = telegram_buttons.code(CALLBACK_SECRET, request_id)
    other = fake.say(CHAT, IDS["alice"], f"/approve@another_bot {code}")
    assert push(tg_gate, other).status_code == 200
    anonymous = fixture("update_anonymous_admin.json")
    anonymous["message"]["text"] = f"/approve {code}"
    assert push(tg_gate, anonymous).status_code == 200
    assert fake.replies_to(CHAT, other["message"]["message_id"]) == []
    untouched(tg_gate, request_id)


def test_a_code_cannot_be_bent_into_another_request(tg_gate: Gate, fake: FakeTelegram) -> None:
    request_id = ask(tg_gate)
    code = telegram_buttons.code(CALLBACK_SECRET, request_id)
    bent = ("b" if code[0] != "b" else "c") + code[1:]
    said = fake.say(CHAT, IDS["alice"], f"/approve {bent}")
    push(tg_gate, said)
    assert "no longer exists" in fake.replies_to(CHAT, said["message"]["message_id"])[0].html
    said = fake.say(CHAT, IDS["alice"], f"/approve {request_id}")  # the id itself is no code
    push(tg_gate, said)
    assert "not a code" in fake.replies_to(CHAT, said["message"]["message_id"])[0].html
    untouched(tg_gate, request_id)


def test_a_redelivered_command_acts_once(tg_gate_db: Gate, fake: FakeTelegram) -> None:
    request_id = ask(tg_gate_db, "wire_funds", {"amount": 10})  # needs two approvals
    code = telegram_buttons.code(CALLBACK_SECRET, request_id)
    said = fake.say(CHAT, IDS["alice"], f"/approve {code}")
    for _ in range(3):
        assert push(tg_gate_db, said).status_code == 200
    now = state(tg_gate_db, request_id)
    assert now["status"] == "pending" and [v["approver"] for v in now["votes"]] == ["alice"]
    assert len(fake.replies_to(CHAT, said["message"]["message_id"])) == 1


def test_replies_count_only_on_the_bots_own_prompts(tg_gate: Gate, fake: FakeTelegram) -> None:
    request_id = ask(tg_gate)
    card = card_of(fake, request_id)
    code = telegram_buttons.code(CALLBACK_SECRET, request_id)
    # A person writing the prompt's words is not the bot asking.
    mimic = fake.say(CHAT, IDS["mallory"], f"Reject request {code}")
    push(tg_gate, mimic)
    push(tg_gate, fake.say(CHAT, IDS["bob"], "no way", reply_to=mimic["message"]["message_id"]))
    # A reply to the card itself is chat, not a decision.
    push(tg_gate, fake.say(CHAT, IDS["bob"], "no way", reply_to=card.message_id))
    untouched(tg_gate, request_id)


def test_a_reject_prompt_ties_the_reply_to_its_request(
    tg_gate_db: Gate, fake: FakeTelegram
) -> None:
    request_id = ask(tg_gate_db)
    card = card_of(fake, request_id)
    data = telegram_buttons.mint(CALLBACK_SECRET, request_id, "reject")
    push(tg_gate_db, fake.press(CHAT, card.message_id, data, IDS["bob"]))
    (prompt,) = fake.replies_to(CHAT, card.message_id)
    assert prompt.markup == {"force_reply": True, "input_field_placeholder": "Reason to reject"}
    code = telegram_buttons.code(CALLBACK_SECRET, request_id)
    assert prompt.shown()[0].startswith(f"Reject request {code}\n")
    # Anyone may reply; gate decides who counts.
    said = fake.say(CHAT, IDS["mallory"], "nope", reply_to=prompt.message_id)
    push(tg_gate_db, said)
    assert "not an approver" in fake.replies_to(CHAT, said["message"]["message_id"])[0].html
    untouched(tg_gate_db, request_id)
    said = fake.say(CHAT, IDS["bob"], "   ", reply_to=prompt.message_id)
    push(tg_gate_db, said)
    untouched(tg_gate_db, request_id)
    push(tg_gate_db, fake.say(CHAT, IDS["bob"], "Wrong vendor", reply_to=prompt.message_id))
    now = state(tg_gate_db, request_id)
    assert now["status"] == "rejected" and now["reason"].endswith("Wrong vendor")


def test_edit_replies_are_read_by_name(tg_gate_db: Gate, fake: FakeTelegram) -> None:
    # a credential token masked in text (a value masked whole under a secret-named key
    # would make the card offer no approval at all: tests/web/test_reveal.py)
    args = {"amount": 900, "currency": "EUR", "memo": "password=hunter2-edit-secret"}
    request_id = ask(tg_gate_db, "refund_order", args)
    card = card_of(fake, request_id)
    data = telegram_buttons.mint(CALLBACK_SECRET, request_id, "edit")
    push(tg_gate_db, fake.press(CHAT, card.message_id, data, IDS["alice"]))
    (prompt,) = fake.replies_to(CHAT, card.message_id)
    text = prompt.shown()[0]
    assert "amount = 900" in text and 'currency = "EUR"' in text
    assert "memo" not in text and "hunter2" not in text  # not editable, nor shown here

    def reply(lines: str) -> str:
        said = fake.say(CHAT, IDS["alice"], lines, reply_to=prompt.message_id)
        push(tg_gate_db, said)
        return fake.replies_to(CHAT, said["message"]["message_id"])[0].shown()[0]

    assert "cannot be edited here" in reply('memo = "mine"')
    assert "write name = value" in reply("amount 500")
    assert "expected a number" in reply("amount = lots")
    untouched(tg_gate_db, request_id)
    assert "Approved" in reply("amount = 500\ncurrency = USD")
    now = state(tg_gate_db, request_id)
    assert now["approved_args"] == {**args, "amount": 500, "currency": "USD"}


def test_the_fakes_updates_have_telegrams_shape(fake: FakeTelegram) -> None:
    # What the fake builds carries every field the captured updates carry (SOURCES.md).
    fake.messages.clear()
    message = fake.say(CHAT, IDS["alice"], "/approve x")
    captured = fixture("update_message_command.json")
    assert set(captured) <= set(message)
    assert set(captured["message"]) - {"entities"} <= set(message["message"]) | {"entities"}
    press = fake.press(CHAT, message["message"]["message_id"], "x", IDS["alice"])
    captured = fixture("update_callback_query.json")
    assert set(captured["callback_query"]) <= set(press["callback_query"])
    reply = fake.say(CHAT, IDS["bob"], "why", reply_to=message["message"]["message_id"])
    captured = fixture("update_message_reply.json")
    assert set(captured["message"]) <= set(reply["message"])


def test_captured_updates_read_as_telegram_sends_them(tg_gate: Gate, fake: FakeTelegram) -> None:
    request_id = ask(tg_gate)
    card_of(fake, request_id)
    update = copy.deepcopy(fixture("update_message_command.json"))
    code = telegram_buttons.code(CALLBACK_SECRET, request_id)
    update["message"]["text"] = f"/approve@gate_test_bot {code}"
    update["message"]["from"]["id"] = IDS["alice"]
    assert push(tg_gate, update).status_code == 200
    wait_until(lambda: state(tg_gate, request_id)["status"] == "approved")
