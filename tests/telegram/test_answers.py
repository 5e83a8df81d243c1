"""Answering a press: inside Telegram's patience even when deciding is slow, and acting once
even when the answer cannot be delivered."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from channels.telegram import TelegramChannel, TelegramSettings
from channels.telegram.replies import RECORDING
from channels.telegram.updates import Press, read_update
from gate.delivery.channel import validate_settings
from gate.server.state import ChannelGate
from tests.conftest import Gate
from tests.support import telegram_buttons
from tests.support.fake_telegram import BOT_ID, CHAT, Entity, FakeTelegram, Message
from tests.support.held import requests_locked
from tests.support.servers import wait_until
from tests.telegram.conftest import CALLBACK_SECRET, IDS, ask, card_of, push, state


def _channel(gate: Gate, **options: Any) -> TelegramChannel:
    """A Telegram channel of its own on the test gate's service, talking to the fake."""
    table = gate.settings.channels.configured()["telegram"]
    settings = validate_settings("telegram", table)
    assert isinstance(settings, TelegramSettings)
    return TelegramChannel(settings, ChannelGate(gate.state.service), **options)


def test_a_slow_decision_is_answered_at_once_and_still_lands(
    tg_gate: Gate, fake: FakeTelegram
) -> None:
    request_id = ask(tg_gate)
    card = card_of(fake, request_id)
    data = telegram_buttons.mint(CALLBACK_SECRET, request_id, "approve")
    update = fake.press(CHAT, card.message_id, data, IDS["alice"])

    async def press_with_no_patience() -> None:
        # A budget of 0 s: any decision is "slow", so the answer must not wait for it.
        ch = _channel(tg_gate, ack_budget=0.0)
        try:
            assert await ch.handle(json.dumps(update).encode()) == {}
        finally:
            await ch.aclose()  # lets the decision finish

    asyncio.run(press_with_no_patience())
    _, answer = fake.answer(update["callback_query"]["id"])
    assert answer is not None and answer["text"] == RECORDING
    assert state(tg_gate, request_id)["status"] == "approved"
    assert fake.replies_to(CHAT, card.message_id) == []  # it counted: the card says so


# Telegram facts the next tests rely on (Bot API reference, core.telegram.org/bots/api):
# * a press is answered once, with answerCallbackQuery (0-200 characters shown to the presser
#   alone, as a notice or an alert); the fake refuses a second answer ("query is already
#   answered"), so a decision that lands after "Recording..." cannot be told that way;
# * a bot has no message only one member of a group sees: sendMessage in the card's chat, with
#   `reply_parameters.message_id` naming the card (`allow_sending_without_reply` when it was
#   deleted meanwhile), is the word left;
# * in HTML parse mode `<a href="tg://user?id=<user_id>">name</a>` is an inline mention
#   ("Formatting options", "Inline mentions"): Telegram notifies that user, and it is "only
#   guaranteed to work if the user has contacted the bot in private in the past or has sent a
#   callback query to the bot via an inline button", which the presser just did.


def _late_words(fake: FakeTelegram, card_id: int) -> tuple[str, list[Entity]]:
    late: Message = wait_until(lambda: next(iter(fake.replies_to(CHAT, card_id)), None))
    assert late.parse_mode == "HTML"
    return late.shown()


def test_a_refusal_that_lands_after_recording_is_told_to_the_presser(
    tg_gate_db: Gate, fake: FakeTelegram
) -> None:
    gate = tg_gate_db
    request_id = ask(gate, user_id="alice")  # alice asked, so she cannot approve it herself
    card = card_of(fake, request_id)
    data = telegram_buttons.mint(CALLBACK_SECRET, request_id, "approve")
    update = fake.press(CHAT, card.message_id, data, IDS["alice"])
    # The decision waits behind another writer past the answer's 2.5 s: alice is told
    # "Recording...", and only then does gate refuse her.
    with requests_locked(gate.settings.server.database_url):
        assert push(gate, update).status_code == 200
        _, answer = fake.answer(update["callback_query"]["id"])
        assert answer is not None and answer["text"] == RECORDING
        assert fake.replies_to(CHAT, card.message_id) == []
    text, entities = _late_words(fake, card.message_id)
    assert text == (
        "alice: Not recorded: you asked for this call, so you cannot approve it yourself."
    )
    mention = f"tg://user?id={IDS['alice']}"
    assert [(e.type, e.offset, e.length, e.url) for e in entities] == [
        ("text_link", 0, len("alice"), mention)
    ]
    assert state(gate, request_id)["status"] == "pending"


def test_a_press_that_lands_after_another_decision_is_told_so(
    tg_gate: Gate, fake: FakeTelegram
) -> None:
    request_id = ask(tg_gate)
    card = card_of(fake, request_id)
    data = telegram_buttons.mint(CALLBACK_SECRET, request_id, "approve")
    first = fake.press(CHAT, card.message_id, data, IDS["alice"])
    with requests_locked(tg_gate.settings.server.database_url):
        assert push(tg_gate, first).status_code == 200
    wait_until(lambda: state(tg_gate, request_id)["status"] == "approved")
    assert fake.replies_to(CHAT, card.message_id) == []  # alice's counted: the card says so
    second = fake.press(CHAT, card.message_id, data, IDS["bob"])
    with requests_locked(tg_gate.settings.server.database_url):
        assert push(tg_gate, second).status_code == 200
    text, entities = _late_words(fake, card.message_id)
    assert text.startswith("bob: Already approved by alice at ")
    assert [e.type for e in entities] == ["text_link"]


def test_late_words_name_a_stranger_by_id_and_stay_inert(tg_gate: Gate, fake: FakeTelegram) -> None:
    request_id = ask(tg_gate)
    card = card_of(fake, request_id)
    update = fake.press(CHAT, card.message_id, "x", IDS["stranger"])
    press = read_update(update, BOT_ID)
    assert isinstance(press, Press)
    ch = _channel(tg_gate)

    async def tell() -> None:
        try:
            await ch._answer.late(press, CHAT, None, '<b>x</b> & <a href="https://e.example">y</a>')
        finally:
            await ch.aclose()

    asyncio.run(tell())
    text, entities = _late_words(fake, card.message_id)
    assert text == f'Telegram user {IDS["stranger"]}: <b>x</b> & <a href="https://e.example">y</a>'
    assert [e.url for e in entities] == [f"tg://user?id={IDS['stranger']}"]


def test_a_typed_command_refused_late_is_told_in_a_reply(tg_gate: Gate, fake: FakeTelegram) -> None:
    request_id = ask(tg_gate, user_id="alice")
    card_of(fake, request_id)
    code = telegram_buttons.code(CALLBACK_SECRET, request_id)
    update = fake.say(CHAT, IDS["alice"], f"/approve {code}")
    typed = update["message"]["message_id"]
    with requests_locked(tg_gate.settings.server.database_url):
        assert push(tg_gate, update).status_code == 200
    replies = wait_until(
        lambda: (found := fake.replies_to(CHAT, typed)) and len(found) == 2 and found
    )
    assert [m.shown()[0] for m in replies] == [
        RECORDING,
        "Not recorded: you asked for this call, so you cannot approve it yourself.",
    ]


def test_an_answer_telegram_refuses_does_not_undo_or_redo_the_press(
    tg_gate: Gate, fake: FakeTelegram
) -> None:
    request_id = ask(tg_gate, "refund_order", {"amount": 900})
    card = card_of(fake, request_id)
    before = state(tg_gate, request_id)["expires_at"]
    extend = next(
        b["callback_data"]
        for b in card.buttons
        if telegram_buttons.read(CALLBACK_SECRET, b["callback_data"])[1] == "extend"
    )
    update = fake.press(CHAT, card.message_id, extend, IDS["bob"])
    fake.fail("answerCallbackQuery", status=502, times=1)
    assert push(tg_gate, update).status_code == 200  # acted; Telegram must not resend
    moved = state(tg_gate, request_id)["expires_at"]
    assert moved != before
    assert push(tg_gate, update).status_code == 200  # resent anyway: acted on once
    assert state(tg_gate, request_id)["expires_at"] == moved
    wait_until(lambda: len(card.versions) > 1)  # the outbox shows the new deadline


def test_a_prompt_telegram_refuses_says_how_to_type_it(tg_gate: Gate, fake: FakeTelegram) -> None:
    request_id = ask(tg_gate)
    card = card_of(fake, request_id)
    data = telegram_buttons.mint(CALLBACK_SECRET, request_id, "reject")
    update = fake.press(CHAT, card.message_id, data, IDS["bob"])
    fake.flood("sendMessage", retry_after=5)
    assert push(tg_gate, update).status_code == 200
    _, answer = fake.answer(update["callback_query"]["id"])
    assert answer is not None and answer["show_alert"] is True
    assert "type the command shown on the card" in answer["text"]
    assert fake.replies_to(CHAT, card.message_id) == []
    assert state(tg_gate, request_id)["status"] == "pending"
