"""Answering a press: inside Telegram's patience even when deciding is slow, and acting once
even when the answer cannot be delivered."""

from __future__ import annotations

import asyncio
import json

from channels.telegram import TelegramChannel, TelegramSettings
from channels.telegram.replies import RECORDING
from gate.channel import validate_settings
from gate.state import ChannelGate
from tests.conftest import Gate
from tests.support import telegram_buttons
from tests.support.fake_telegram import CHAT, FakeTelegram
from tests.support.servers import wait_until
from tests.telegram.conftest import CALLBACK_SECRET, IDS, ask, card_of, push, state


def test_a_slow_decision_is_answered_at_once_and_still_lands(
    tg_gate: Gate, fake: FakeTelegram
) -> None:
    request_id = ask(tg_gate)
    card = card_of(fake, request_id)
    data = telegram_buttons.mint(CALLBACK_SECRET, request_id, "approve")
    update = fake.press(CHAT, card.message_id, data, IDS["alice"])
    table = tg_gate.settings.channels.configured()["telegram"]
    settings = validate_settings("telegram", table)
    assert isinstance(settings, TelegramSettings)

    async def press_with_no_patience() -> None:
        # A budget of 0 s: any decision is "slow", so the answer must not wait for it.
        ch = TelegramChannel(settings, ChannelGate(tg_gate.state.service), ack_budget=0.0)
        try:
            assert await ch.handle(json.dumps(update).encode()) == {}
        finally:
            await ch.aclose()  # lets the decision finish

    asyncio.run(press_with_no_patience())
    _, answer = fake.answer(update["callback_query"]["id"])
    assert answer is not None and answer["text"] == RECORDING
    assert state(tg_gate, request_id)["status"] == "approved"


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
