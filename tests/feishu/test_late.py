"""A decision that lands after the "Recording..." toast and did not count is told to the
clicker, privately; one that counted sends nothing more. Gate is made slow for real: another
connection holds the lock the decision waits for (`tests/support/held.py`)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from channels.feishu.answers import late_content
from channels.feishu.channel import RECORDING
from gate.delivery.channel import DeliveryError
from tests.conftest import Gate
from tests.feishu.conftest import CHAT, send_callback
from tests.feishu.test_callbacks import click, state
from tests.feishu.test_delivery import standalone
from tests.support.fake_feishu import FakeFeishu, Message, check_card
from tests.support.held import requests_locked
from tests.support.servers import wait_until

# Feishu facts these tests rely on:
# * a card callback is answered once, within 3 s, and not re-pushed: the toast in that answer
#   is the only word the clicker gets with it, so a decision that lands later needs a message
#   of its own (/work/shared/reference/feishu.md §0, "Ack deadline", "Retries");
# * the app messages one person with `POST /open-apis/im/v1/messages?receive_id_type=open_id`,
#   `Authorization: Bearer <tenant_access_token>`, body `{"receive_id": "ou_...", "msg_type":
#   ..., "content": "<JSON as a string>"}`; the person must be in the app's availability
#   range (error 230013) (open.larkoffice.com/document/uAjLw4CM/ukTMukTMukTM/reference/
#   im-v1/message/create, "前提条件"; reference §B3, §B11);
# * the callback names the clicker as `event.operator.open_id`, an id per app, the one the
#   app sends to (reference §B6);
# * a `text` message reads `<at user_id="all"></at>` as a mention of everyone
#   (open.larksuite.com/document/server-docs/historic-version/im-chat/message/send-message/
#   send-text-message): gate's words go in an interactive card's `plain_text` instead, with
#   tag-shaped text defused as on the approval card (reference §B10).

SELF_APPROVAL = "Not recorded: you asked for this call, so you cannot approve it yourself."


def _ask(gate: Gate, fake: FakeFeishu, user_id: str = "dave") -> tuple[str, Message]:
    answer = gate.submit(tool_name="pay_vendor", tool_args={"amount": 60000}, user_id=user_id)
    assert answer["decision"] == "ask", answer
    request_id: str = answer["request"]["id"]

    def card() -> Message | None:
        return next((m for m in fake.posted() if request_id in json.dumps(m.cards[0])), None)

    return request_id, wait_until(card)


def _held_click(gate: Gate, payload: dict[str, Any], request_id: str) -> None:
    """A click whose decision waits behind another writer past the 2.5 s answer."""
    with requests_locked(gate.settings.server.database_url):
        r = send_callback(gate, payload)
        assert r.status_code == 200, r.text
        assert r.json() == {"toast": {"type": "info", "content": RECORDING}}


def _told(fake: FakeFeishu, open_id: str) -> str:
    """The words of the one private message `open_id` got (checked as Feishu would)."""
    (late,) = wait_until(lambda: fake.to_user(open_id) or None)
    (div,) = late.card["body"]["elements"]
    assert div["text"]["tag"] == "plain_text"
    text: str = div["text"]["content"]
    return text


def test_a_refusal_that_lands_after_recording_is_told_privately(
    feishu_gate_db: Gate, fake_feishu: FakeFeishu
) -> None:
    gate = feishu_gate_db
    request_id, card = _ask(gate, fake_feishu, user_id="alice")  # alice may not approve it
    _held_click(gate, click(fake_feishu, card, "approve", "ou_alice"), request_id)
    assert _told(fake_feishu, "ou_alice") == SELF_APPROVAL
    dm = fake_feishu.recorded("POST", "/open-apis/im/v1/messages")[-1]
    assert dm.query == {"receive_id_type": "open_id"}
    assert dm.body["receive_id"] == "ou_alice" and dm.body["msg_type"] == "interactive"
    assert dm.headers["authorization"].startswith("Bearer t-")
    # To her alone: nothing more in the chat than the card, which still asks.
    assert [m.receive_id for m in fake_feishu.posted()] == [CHAT, "ou_alice"]
    assert state(gate, request_id)["status"] == "pending"
    assert fake_feishu.card_problems == []


def test_a_click_after_another_decision_is_told_and_one_that_counted_is_not(
    feishu_gate: Gate, fake_feishu: FakeFeishu
) -> None:
    request_id, card = _ask(feishu_gate, fake_feishu)
    _held_click(feishu_gate, click(fake_feishu, card, "approve", "ou_alice"), request_id)
    wait_until(lambda: state(feishu_gate, request_id)["status"] == "approved")
    wait_until(lambda: len(card.cards) == 2)  # the outbox refreshed the card: it says so
    # bob presses Approve on the card as he still sees it (his client had not refreshed).
    pressed = click(fake_feishu, card, "approve", "ou_bob", card=card.cards[0])
    _held_click(feishu_gate, pressed, request_id)
    assert _told(fake_feishu, "ou_bob").startswith("Already approved by alice at ")
    assert fake_feishu.to_user("ou_alice") == []  # hers counted: nothing more is sent


def test_late_words_stay_inert() -> None:
    hostile = '<at user_id="all"></at> [approve](https://evil.example) **now** ```'
    content = late_content(f"Not recorded: {hostile}")
    assert check_card(content) == []
    (div,) = json.loads(content)["body"]["elements"]
    assert div["text"]["tag"] == "plain_text"
    assert "<at" not in div["text"]["content"] and "‹at" in div["text"]["content"]


def test_a_late_answer_goes_to_an_open_id_never_to_a_chat(
    feishu_gate: Gate, fake_feishu: FakeFeishu
) -> None:
    # An id from a callback is named an open_id: a chat id in its place is refused, not
    # read as the chat to post in. Someone outside the app's range is not reached either.
    fake_feishu.users = {"ou_alice"}

    async def run() -> list[DeliveryError]:
        ch = standalone(feishu_gate)
        errors = []
        try:
            for open_id in (CHAT, "ou_outsider"):
                try:
                    await ch.api.message_user(open_id, late_content("Not recorded."))
                except DeliveryError as exc:
                    errors.append(exc)
            await ch.api.message_user("ou_alice", late_content("Not recorded."))
        finally:
            await ch.aclose()
        return errors

    errors = asyncio.run(run())
    assert [e.permanent for e in errors] == [True, True]
    assert "99992402" in str(errors[0]) and "230013" in str(errors[1])
    assert [m.receive_id for m in fake_feishu.posted()] == ["ou_alice"]
