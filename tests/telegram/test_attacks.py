"""Attacks on the Telegram channel, each through the real webhook of a real gate.

Every case plays someone the promise must hold against ("a flagged call runs only when the
people its rule names approved that exact call; when gate cannot tell, the call does not
run"): a person whose words are forwarded by an approver, a group member who is not an
approver, someone replaying a captured delivery, a client that sends button data of its
choice, and text typed to make gate's bot post something live. Updates are built by
`FakeTelegram` (Telegram's shapes) and pushed with the webhook's secret header.

Telegram facts relied on (Bot API, core.telegram.org/bots/api#message): a forwarded message
carries `forward_origin` (a MessageOrigin: who wrote it first; Bot API 7.0, replacing
`forward_from`, `forward_from_chat`, `forward_sender_name` and `forward_date`), and a channel
post copied into its linked discussion group carries `is_automatic_forward`; its `from` is
the person who forwarded it. In a plain-text part of a message, clients make links of URLs and
bare domains and mentions of `@names` (see AUTO_ENTITIES in tests/channels/drivers/telegram).
"""

from __future__ import annotations

from typing import Any

from tests.channels.drivers.telegram import AUTO_ENTITIES
from tests.conftest import Gate
from tests.support import telegram_buttons
from tests.support.fake_telegram import CHAT, FakeTelegram, Message, user
from tests.telegram.conftest import (
    CALLBACK_SECRET,
    IDS,
    ask,
    card_of,
    push,
    state,
)


def untouched(gate: Gate, request_id: str) -> None:
    now = state(gate, request_id)
    assert now["status"] == "pending" and now["votes"] == [], now


def live_plain_text(message: Message) -> list[str]:
    """What a Telegram client would make live in a message's plain text (outside code/pre)."""
    text, entities = message.shown()
    inert = [False] * len(text)
    for entity in entities:
        if entity.type in ("code", "pre"):
            inert[entity.offset : entity.offset + entity.length] = [True] * entity.length
    return [
        found.group()
        for found in AUTO_ENTITIES.finditer(text)
        if not all(inert[found.start() : found.end()])
    ]


# -- forwarded words are not the forwarder's decision -----------------------------------------


def forwarded(update: dict[str, Any], author: int) -> dict[str, Any]:
    """`update`'s message as Telegram delivers it when its sender forwarded someone's message."""
    message = update["message"]
    message["forward_origin"] = {"type": "user", "sender_user": user(author), "date": 1}
    return update


def test_a_forwarded_command_does_not_decide_as_the_forwarder(
    tg_gate: Gate, fake: FakeTelegram
) -> None:
    # A group member (not an approver) sees the code on the card and sends alice a message
    # "/approve <code>"; alice forwards it to the group to ask what it is. The text is not
    # alice's: forwarding it must not approve in her name.
    request_id = ask(tg_gate)
    card_of(fake, request_id)
    code = telegram_buttons.code(CALLBACK_SECRET, request_id)
    update = forwarded(fake.say(CHAT, IDS["alice"], f"/approve {code}"), IDS["stranger"])
    assert push(tg_gate, update).status_code == 200
    # A channel's post copied into its discussion group is a forward too.
    auto = fake.say(CHAT, IDS["bob"], f"/approve {code}")
    auto["message"]["is_automatic_forward"] = True
    assert push(tg_gate, auto).status_code == 200
    # The same words, written by alice herself, do approve (the code is right).
    untouched(tg_gate, request_id)
    assert push(tg_gate, fake.say(CHAT, IDS["alice"], f"/approve {code}")).status_code == 200
    assert state(tg_gate, request_id)["decided_by"] == "alice"


def test_a_forwarded_reply_to_a_prompt_does_not_decide(tg_gate: Gate, fake: FakeTelegram) -> None:
    request_id = ask(tg_gate)
    card = card_of(fake, request_id)
    data = telegram_buttons.mint(CALLBACK_SECRET, request_id, "reject")
    push(tg_gate, fake.press(CHAT, card.message_id, data, IDS["bob"]))
    (prompt,) = fake.replies_to(CHAT, card.message_id)
    said = fake.say(CHAT, IDS["bob"], "someone else's words", reply_to=prompt.message_id)
    assert push(tg_gate, forwarded(said, IDS["stranger"])).status_code == 200
    untouched(tg_gate, request_id)


# -- nothing typed comes back live in the bot's own words -------------------------------------


def test_an_edit_reply_cannot_make_the_bot_post_a_live_link(
    tg_gate: Gate, fake: FakeTelegram
) -> None:
    # Anyone in the group may reply to an "Edit request" prompt; the bot answers a value it
    # cannot take by naming where the problem is, and that path is the replier's own text.
    # In plain text it would be a link (or a mention) posted by gate's bot to every approver.
    request_id = ask(tg_gate, "ask_config", {"settings": {"retries": 3}})
    card = card_of(fake, request_id)
    data = telegram_buttons.mint(CALLBACK_SECRET, request_id, "edit")
    push(tg_gate, fake.press(CHAT, card.message_id, data, IDS["alice"]))
    (prompt,) = fake.replies_to(CHAT, card.message_id)
    for typed in (
        r'settings = {"https://evil.example/go\u0000": 1}',
        r'settings = {"see evil.example/approve\u0000": 1}',
        r'settings = {"@alice_approver\u0000": 1}',
    ):
        for person in ("stranger", "alice"):
            said = fake.say(CHAT, IDS[person], typed, reply_to=prompt.message_id)
            assert push(tg_gate, said).status_code == 200
            (answer,) = fake.replies_to(CHAT, said["message"]["message_id"])
            assert "Not recorded" in answer.shown()[0], answer.shown()
            assert "evil.example" in answer.shown()[0] or "alice_approver" in answer.shown()[0]
            assert live_plain_text(answer) == [], (typed, answer.html)
    untouched(tg_gate, request_id)
