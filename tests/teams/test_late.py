"""A decision that lands after the "Recording..." answer and did not count is told to the
presser: a reply to the card that @mentions them; one that counted sends nothing more. Gate
is made slow for real: another connection holds the lock the decision waits for
(`tests/support/held.py`)."""

from __future__ import annotations

import asyncio
import json

import pytest

from channels.teams.answers import MESSAGE_TYPE, late_reply
from channels.teams.channel import RECORDING
from tests.conftest import Gate, GateFactory
from tests.support.fake_teams import CONVERSATION, FakeTeams, Message, Reply, check_card
from tests.support.held import requests_locked
from tests.support.servers import wait_until
from tests.teams.conftest import ask, object_id, send, teams_settings, walk
from tests.teams.test_clicks import state
from tests.teams.test_delivery import standalone

# Teams facts these tests rely on:
# * an `adaptiveCard/action` invoke is answered once, within 5 s (gate answers by 4 s): a
#   decision that lands later cannot be told in that answer, and a bot has no message only
#   one member of a channel sees, so the words go in the card's conversation
#   (learn.microsoft.com/microsoftteams/platform/task-modules-and-cards/cards/
#   universal-actions-for-adaptive-cards/work-with-universal-actions-for-adaptive-cards);
# * a reply to a message is `POST {serviceUrl}/v3/conversations/{conversationId}/activities/
#   {activityId}` with the bot's token, the reply's `replyToId` naming that activity
#   (learn.microsoft.com/dotnet/api/microsoft.bot.builder.integration.aspnet.core.
#   channelservicecontroller.replytoactivityasync; learn.microsoft.com/bot-framework/rest-api/
#   bot-framework-rest-connector-send-and-receive-messages, "Create a reply");
# * the press's invoke names the card's message as its `replyToId` (the SDKs update a card
#   with `updateActivity(id=activity.replyToId)`); NOT confirmed in a reference page read
#   here, so a reply the connector refuses is posted as a message of its own instead;
# * a mention is `<at>name</at>` in the message's `text` plus an entity `{"type":
#   "mention", "text": "<at>name</at>", "mentioned": {"id": <the member's Teams id, from.id>,
#   "name": ...}}`; Teams notifies the person it names (learn.microsoft.com/microsoftteams/
#   platform/bots/how-to/conversations/channel-and-group-conversations, "Add mentions to
#   your messages");
# * an Adaptive Card `TextRun` renders no markdown, while a message's `text` and a
#   `TextBlock` read some, and `<at>` anywhere in `text` is a mention: gate's words go in a
#   TextRun with tag-shaped text defused, as on the approval card (channels/teams/card.py).

SELF_APPROVAL = "Not recorded: you asked for this call, so you cannot approve it yourself."


@pytest.fixture
def teams_gate_db(make_gate: GateFactory, db_url: str, fake_teams: FakeTeams) -> Gate:
    """A Teams gate on each database (SQLite, and PostgreSQL when configured)."""
    return make_gate(settings=teams_settings(db_url, fake_teams))


def _card(fake: FakeTeams, request_id: str) -> Message:
    def found() -> Message | None:
        return next((m for m in fake.posted() if request_id in json.dumps(m.cards[0])), None)

    message: Message = wait_until(found)
    return message


def _held_press(gate: Gate, fake: FakeTeams, person: str, request_id: str, card: Message) -> None:
    """`person` presses Approve on the card; the decision waits behind another writer past
    the 4 s answer, so the answer is "Recording...". The writer holds on for 8 s: the
    press must reach the decision within 4 s of the lock, on a loaded CI host too (at 5 s
    a press that took over a second to arrive was refused inside the 4 s)."""
    activity = fake.invoke(
        verb="approve", data={"request_id": request_id}, object_id=object_id(person),
        service_url=fake.url + "/", reply_to=card.activity_id,
    )  # fmt: skip
    with requests_locked(gate.settings.server.database_url):
        r = send(gate, fake, activity)
        assert r.status_code == 200, r.text
        assert r.json() == {"statusCode": 200, "type": MESSAGE_TYPE, "value": RECORDING}
        assert fake.replies_to(card.activity_id) == []


def _words(reply: Reply) -> str:
    (block,) = reply.card["body"]
    assert block["type"] == "RichTextBlock"
    return "".join(r["text"] for r in block["inlines"])


def test_a_refusal_that_lands_after_recording_mentions_the_presser(
    teams_gate_db: Gate, fake_teams: FakeTeams
) -> None:
    gate = teams_gate_db
    request_id = ask(gate, user_id="alice")  # alice asked, so she cannot approve it herself
    card = _card(fake_teams, request_id)
    _held_press(gate, fake_teams, "alice", request_id, card)
    (reply,) = wait_until(lambda: fake_teams.replies_to(card.activity_id) or None)
    assert reply.conversation == CONVERSATION
    assert reply.text == "<at>alice</at>"
    member = fake_teams.members[object_id("alice")]
    assert reply.mentions == [
        {"type": "mention", "text": "<at>alice</at>", "mentioned": {"id": member, "name": "alice"}}
    ]
    assert _words(reply) == SELF_APPROVAL
    assert state(gate, request_id)["status"] == "pending"
    assert fake_teams.card_problems == []


def test_a_press_after_another_decision_is_told_and_one_that_counted_is_not(
    teams_gate: Gate, fake_teams: FakeTeams
) -> None:
    request_id = ask(teams_gate)
    card = _card(fake_teams, request_id)
    _held_press(teams_gate, fake_teams, "alice", request_id, card)
    wait_until(lambda: state(teams_gate, request_id)["status"] == "approved")
    wait_until(lambda: len(card.cards) == 2)  # the card is replaced: it says so
    assert fake_teams.replies_to(card.activity_id) == []  # alice's counted: nothing more
    _held_press(teams_gate, fake_teams, "bob", request_id, card)
    (reply,) = wait_until(lambda: fake_teams.replies_to(card.activity_id) or None)
    assert reply.text == "<at>bob</at>"
    assert reply.mentions[0]["mentioned"]["id"] == fake_teams.members[object_id("bob")]
    assert _words(reply).startswith("Already approved by alice at ")


def test_late_words_stay_inert(teams_gate: Gate, fake_teams: FakeTeams) -> None:
    hostile = "<at>everyone</at> [approve](https://evil.example) **now**"
    activity = late_reply(f"Not recorded: {hostile}", "alice", "29:1alice")
    card = activity["attachments"][0]["content"]
    assert check_card(card) == []
    assert activity["text"] == "<at>alice</at>"  # the one mention, of the presser
    (run,) = [el for el in walk(card) if el.get("type") == "TextRun"]
    assert "<at>" not in run["text"] and "‹at>everyone" in run["text"]
    assert [el["type"] for el in walk(card) if "text" in el] == ["TextRun"]  # no TextBlock
    # The connector takes it as a reply to the card.
    card_message = _card(fake_teams, ask(teams_gate))

    async def reply() -> None:
        ch = standalone(teams_gate)
        try:
            await ch.api.reply(CONVERSATION, card_message.activity_id, activity)
        finally:
            await ch.aclose()

    asyncio.run(reply())
    (sent,) = fake_teams.replies_to(card_message.activity_id)
    assert sent.text == "<at>alice</at>" and fake_teams.card_problems == []


def test_a_reply_to_an_unknown_message_is_posted_in_the_conversation(
    teams_gate: Gate, fake_teams: FakeTeams
) -> None:
    activity = late_reply("Not recorded: you may not act on this request.", "bob", "29:1bob")

    async def reply() -> None:
        ch = standalone(teams_gate)
        try:
            await ch.api.reply(CONVERSATION, "1799999999999", activity)
        finally:
            await ch.aclose()

    asyncio.run(reply())
    assert fake_teams.replies == []
    (posted,) = [m for m in fake_teams.posted() if "late_text" in json.dumps(m.card)]
    assert posted.conversation == CONVERSATION
    assert fake_teams.card_problems == []


def test_a_slow_press_from_another_conversation_acts_on_nothing_and_is_told_nothing(
    teams_gate_db: Gate, fake_teams: FakeTeams
) -> None:
    """The conversation check reads the request within Teams' 4 s: when the database is slow
    the press is answered in time, and only a card in the press's own conversation is acted
    on, then or later."""
    gate = teams_gate_db
    request_id = ask(gate, user_id="dave")
    card = _card(fake_teams, request_id)
    elsewhere = "19:someone-else@thread.v2"
    pressed = {
        verb: fake_teams.invoke(
            verb=verb,
            data={"request_id": request_id},
            object_id=object_id("alice"),
            service_url=fake_teams.url + "/",
            conversation=elsewhere,
            reply_to=card.activity_id,
        )  # fmt: skip
        for verb in ("approve", "reject")
    }
    with requests_locked(gate.settings.server.database_url):
        answers = {verb: send(gate, fake_teams, activity) for verb, activity in pressed.items()}
    for r in answers.values():
        assert r.status_code == 200, r.text
        assert r.json()["type"] == MESSAGE_TYPE  # words only, within the budget
    # once the lock is gone, the approval from elsewhere still changes nothing and says nothing
    asyncio.run(asyncio.sleep(1.0))
    assert state(gate, request_id)["status"] == "pending"
    assert fake_teams.replies_to(card.activity_id) == []
