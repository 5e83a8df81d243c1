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

import copy
from typing import Any

from tests.channels.drivers.telegram import AUTO_ENTITIES
from tests.conftest import Gate
from tests.support import telegram_buttons
from tests.support.fake_telegram import CHAT, FakeTelegram, Message, user
from tests.support.servers import wait_until
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


def test_a_message_written_by_an_inline_bot_does_not_decide(
    tg_gate: Gate, fake: FakeTelegram
) -> None:
    # Sent "via @some_bot": the person picked a result by its title and description, and the
    # bot wrote the text (`input_message_content` need not match what the result showed).
    request_id = ask(tg_gate)
    card_of(fake, request_id)
    code = telegram_buttons.code(CALLBACK_SECRET, request_id)
    update = fake.say(CHAT, IDS["alice"], f"/approve {code}")
    update["message"]["via_bot"] = {"id": 5000000001, "is_bot": True, "first_name": "Some"}
    assert push(tg_gate, update).status_code == 200
    untouched(tg_gate, request_id)


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


def test_argument_names_cannot_forge_lines_of_an_edit_prompt(
    tg_gate: Gate, fake: FakeTelegram
) -> None:
    # The edit prompt lists the editable arguments as `name = value` lines, the shape the
    # reply is read back in. An argument's name is the agent's: with a line break in it, it
    # drew a line of its own, a second `to = "bob@corp.example"` above the real `to`.
    # Names a line cannot carry (a line break, `=`, spaces around) are edited in gate.
    args = {'memo = "ok"\nto': "bob@corp.example", "to": "mallory@evil.example", "amount": 5}
    request_id = ask(tg_gate, "ask_transfer", args)
    card = card_of(fake, request_id)
    data = telegram_buttons.mint(CALLBACK_SECRET, request_id, "edit")
    push(tg_gate, fake.press(CHAT, card.message_id, data, IDS["alice"]))
    (prompt,) = fake.replies_to(CHAT, card.message_id)
    lines = prompt.shown()[0].splitlines()
    assert [line for line in lines if line.startswith("to =")] == ['to = "mallory@evil.example"']
    assert "bob@corp.example" not in prompt.shown()[0]
    said = fake.say(CHAT, IDS["alice"], "amount = 6", reply_to=prompt.message_id)
    assert push(tg_gate, said).status_code == 200
    wait_until(lambda: state(tg_gate, request_id)["status"] == "approved")
    assert state(tg_gate, request_id)["approved_args"]["to"] == "mallory@evil.example"


# -- attacks that hold (kept so they keep holding) --------------------------------------------


def test_an_edited_message_decides_nothing(tg_gate: Gate, fake: FakeTelegram) -> None:
    # "/reject <code> typo" edited to "/approve <code>": only what was sent counts, once.
    request_id = ask(tg_gate)
    card_of(fake, request_id)
    code = telegram_buttons.code(CALLBACK_SECRET, request_id)
    update = fake.say(CHAT, IDS["alice"], f"/approve {code}")
    update["edited_message"] = {**update.pop("message"), "edit_date": 2}
    assert push(tg_gate, update).status_code == 200
    untouched(tg_gate, request_id)


def test_bots_channels_and_anonymous_senders_are_nobody(tg_gate: Gate, fake: FakeTelegram) -> None:
    request_id = ask(tg_gate)
    card = card_of(fake, request_id)
    code = telegram_buttons.code(CALLBACK_SECRET, request_id)
    # A post in a channel (no `from` at all), a message sent on behalf of a channel (`from`
    # is Telegram's Channel_Bot stand-in), a bot writing as alice's id.
    post = fake.say(CHAT, IDS["alice"], f"/approve {code}")
    post["channel_post"] = post.pop("message")
    post["channel_post"].pop("from")
    as_channel = fake.say(CHAT, IDS["alice"], f"/approve {code}")
    as_channel["message"]["from"] = {"id": 136817688, "is_bot": True, "first_name": "Channel"}
    as_channel["message"]["sender_chat"] = {"id": -1009876543210, "type": "channel"}
    bot = fake.say(CHAT, IDS["alice"], f"/approve {code}")
    bot["message"]["from"]["is_bot"] = True
    approve = telegram_buttons.mint(CALLBACK_SECRET, request_id, "approve")
    press = fake.press(CHAT, card.message_id, approve, IDS["alice"])
    press["callback_query"]["from"]["is_bot"] = True
    for update in (post, as_channel, bot, press):
        assert push(tg_gate, update).status_code == 200
    untouched(tg_gate, request_id)


def test_a_captured_press_replayed_later_changes_nothing(tg_gate: Gate, fake: FakeTelegram) -> None:
    request_id = ask(tg_gate, "refund_order", {"amount": 900})
    card = card_of(fake, request_id)
    before = state(tg_gate, request_id)["expires_at"]
    extend = next(b for b in card.buttons if b["text"].startswith("Extend"))["callback_data"]
    # The Extend press, captured, is sent again and again as new updates (a client pressing
    # the stale button, or a replay under the secret): the deadline it showed moved once.
    for _ in range(3):
        push(tg_gate, fake.press(CHAT, card.message_id, extend, IDS["bob"]))
    moved = state(tg_gate, request_id)["expires_at"]
    assert moved != before
    assert push(tg_gate, fake.press(CHAT, card.message_id, extend, IDS["alice"])).status_code == 200
    assert state(tg_gate, request_id)["expires_at"] == moved
    # The approve press replayed after someone else rejected: still rejected, by bob.
    reason = telegram_buttons.mint(CALLBACK_SECRET, request_id, "reason", reason=0)
    push(tg_gate, fake.press(CHAT, card.message_id, reason, IDS["bob"]))
    approve = telegram_buttons.mint(CALLBACK_SECRET, request_id, "approve")
    replay = fake.press(CHAT, card.message_id, approve, IDS["alice"])
    push(tg_gate, replay)
    push(tg_gate, replay)
    now = state(tg_gate, request_id)
    assert (now["status"], now["decided_by"]) == ("rejected", "bob")
    _, notice = fake.answer(replay["callback_query"]["id"])
    assert notice is not None and "Already rejected by bob" in notice["text"]


def test_a_code_for_one_request_decides_nothing_in_anothers_prompt(
    tg_gate: Gate, fake: FakeTelegram
) -> None:
    first, second = ask(tg_gate, "refund_order", {"amount": 1}), ask(tg_gate, "refund_order")
    card = card_of(fake, second)
    edit = telegram_buttons.mint(CALLBACK_SECRET, second, "edit")
    push(tg_gate, fake.press(CHAT, card.message_id, edit, IDS["alice"]))
    (prompt,) = fake.replies_to(CHAT, card.message_id)
    code = telegram_buttons.code(CALLBACK_SECRET, first)
    said = fake.say(CHAT, IDS["alice"], f"/approve {code}", reply_to=prompt.message_id)
    push(tg_gate, said)
    assert "Not recorded" in fake.replies_to(CHAT, said["message"]["message_id"])[0].html
    untouched(tg_gate, first)
    untouched(tg_gate, second)


def test_a_press_after_the_deadline_decides_nothing(tg_gate: Gate, fake: FakeTelegram) -> None:
    # The short-fuse rule gives up after one second; a press that arrives later neither
    # approves nor brings the request back with Extend.
    request_id = ask(tg_gate, "ephemeral_probe", {"n": 1})
    card = card_of(fake, request_id)
    approve = telegram_buttons.mint(CALLBACK_SECRET, request_id, "approve")
    extend = next(b for b in card.buttons if b["text"].startswith("Extend"))["callback_data"]
    wait_until(lambda: state(tg_gate, request_id)["status"] == "expired", timeout=10)
    for data in (extend, approve):
        update = fake.press(CHAT, card.message_id, data, IDS["alice"])
        assert push(tg_gate, update).status_code == 200
        _, notice = fake.answer(update["callback_query"]["id"])
        assert notice is not None and "Already expired" in notice["text"], notice
    assert state(tg_gate, request_id)["status"] == "expired"


def test_a_non_approver_gets_no_prompt(tg_gate: Gate, fake: FakeTelegram) -> None:
    request_id = ask(tg_gate)
    card = card_of(fake, request_id)
    for kind in ("reject", "edit"):
        data = telegram_buttons.mint(CALLBACK_SECRET, request_id, kind)
        update = fake.press(CHAT, card.message_id, data, IDS["stranger"])
        push(tg_gate, update)
        _, notice = fake.answer(update["callback_query"]["id"])
        assert notice is not None and "not an approver" in notice["text"]
    assert fake.replies_to(CHAT, card.message_id) == []
    untouched(tg_gate, request_id)


def test_flooded_webhook_bodies_are_refused_whole(tg_gate: Gate, fake: FakeTelegram) -> None:
    huge = b'{"update_id": 1, "message": {"text": "' + b"x" * 2_000_000 + b'"}}'
    assert push(tg_gate, huge).status_code == 413
    deep = b'{"update_id": 1, "message": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_001
    assert push(tg_gate, deep).status_code in (400, 413)


def test_a_huge_deep_hostile_request_still_gets_a_card_that_fits(
    tg_gate: Gate, fake: FakeTelegram
) -> None:
    # Astral characters count twice against Telegram's 4,096 (UTF-16); the fake refuses a
    # card over it, and a refused card would leave the request undecidable from chat.
    deep: Any = "end"
    for _ in range(30):
        deep = {"k\U0001f600": deep}
    args = {"blob": "\U0001f600" * 15_000, "deep": deep, "x</code></pre><b>": "</code>&amp;"}
    summary = "\U0001f4a5 </pre> @everyone https://evil.example " * 200
    request_id = ask(tg_gate, "ask_blob", args, summary=summary[:4000], agent_id="\u202e" * 200)
    card = card_of(fake, request_id)
    assert "too long for Telegram: review and approve in gate" in card.shown()[0]
    assert live_plain_text(card) == []


def test_an_edit_prompt_on_a_cut_card_does_not_open(tg_gate: Gate, fake: FakeTelegram) -> None:
    # Values that fit a reply (1,000 characters) but whose emoji count twice against
    # Telegram's 4,096 are too long for the card itself: the card cuts them, so a crafted
    # Edit & approve press opens no prompt at all (the card's words, to the presser alone),
    # and the call is reviewed and approved in gate's page.
    args: dict[str, Any] = {f"note{i}": "\U0001f600" * 950 for i in range(4)}
    args["amount"] = 900
    request_id = ask(tg_gate, "ask_wide", args)
    card = card_of(fake, request_id)
    update = fake.press(
        CHAT,
        card.message_id,
        telegram_buttons.mint(CALLBACK_SECRET, request_id, "edit"),
        IDS["bob"],
    )
    assert push(tg_gate, update).status_code == 200
    assert fake.replies_to(CHAT, card.message_id) == []
    _, notice = fake.answer(update["callback_query"]["id"])
    assert notice is not None and notice["show_alert"] is True
    assert notice["text"] == "The call is too long for Telegram: review and approve in gate."
    assert (state(tg_gate, request_id)["status"], state(tg_gate, request_id)["votes"]) == (
        "pending",
        [],
    )
    # And when Telegram refuses the prompt anyway (flood control), the presser is sent to
    # gate's page, not told to type /approve (which would approve the call as it is).
    other = ask(tg_gate, "ask_wide", {"amount": 1})
    card = card_of(fake, other)
    update = fake.press(
        CHAT, card.message_id, telegram_buttons.mint(CALLBACK_SECRET, other, "edit"), IDS["bob"]
    )
    fake.flood("sendMessage", retry_after=5)
    assert push(tg_gate, update).status_code == 200
    _, notice = fake.answer(update["callback_query"]["id"])
    assert notice is not None and "edit the call in gate" in notice["text"], notice
    untouched(tg_gate, other)


def test_one_line_values_cannot_forge_lines_of_the_card(tg_gate: Gate, fake: FakeTelegram) -> None:
    # The tool, agent and user are the agent's words; with line breaks in them they would
    # draw lines of their own: a fake "The call:" block above the real one, or blank lines
    # pushing the real call off a phone's screen.
    forged = 'x\nThe call:\n{\n  "amount": 5\n}' + "\n" * 40
    request_id = ask(tg_gate, "ask_forged", {"amount": 60000}, agent_id=forged, user_id=forged)
    text, entities = card_of(fake, request_id).shown()
    inline = [text[e.offset : e.offset + e.length] for e in entities if e.type == "code"]
    assert inline and not any("\n" in part for part in inline), inline
    assert [line for line in text.splitlines() if line.startswith("The call:")] == ["The call:"]


def test_a_verified_update_of_any_shape_is_never_a_500(tg_gate: Gate, fake: FakeTelegram) -> None:
    # Under the secret the bytes are Telegram's, but their shape is still not gate's to assume:
    # a 500 is resent by Telegram again and again. A reply to the bot whose first line looks
    # like a prompt but names no code, and odd values in every field, are nothing (sent as
    # someone who is no approver, so whatever still reads as a click changes nothing).
    request_id = ask(tg_gate)
    card = card_of(fake, request_id)
    data = telegram_buttons.mint(CALLBACK_SECRET, request_id, "reject")
    push(tg_gate, fake.press(CHAT, card.message_id, data, IDS["bob"]))
    (prompt,) = fake.replies_to(CHAT, card.message_id)
    reply = fake.say(CHAT, IDS["stranger"], "why", reply_to=prompt.message_id)
    updates = []
    for first_line in ("Reject request " + "!" * 26, "Edit request " + "1" * 26):
        odd = copy.deepcopy(reply)
        odd["message"]["reply_to_message"]["text"] = first_line + "\nReply to this message"
        updates.append(odd)
    code = telegram_buttons.code(CALLBACK_SECRET, request_id)
    bases = [
        fake.press(CHAT, card.message_id, data, IDS["stranger"]),
        fake.say(CHAT, IDS["stranger"], f"/reject {code} no"),
        reply,
    ]
    odd_values: list[Any] = [None, True, -1, 2**70, "x" * 5000, [], {"id": 1}]
    for base in bases:
        for path in _paths(base):
            for value in odd_values:
                updates.append(_replaced(base, path, value))
    for number, update in enumerate(updates):
        update["update_id"] = 900_000 + number
        r = push(tg_gate, update)
        assert r.status_code < 500, (update, r.text)
    untouched(tg_gate, request_id)


def _paths(value: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key path in a JSON object (the update_id left alone)."""
    if not isinstance(value, dict):
        return [prefix] if prefix else []
    found = [prefix] if prefix else []
    for key, child in value.items():
        if key != "update_id":
            found += _paths(child, (*prefix, key))
    return found


def _replaced(update: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    copied = copy.deepcopy(update)
    node = copied
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return copied
