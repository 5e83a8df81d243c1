"""`/link <code>` to the bot: a console's one-time code binds the sender's Telegram id, on
each database, only from a private chat with the bot (a code sent in a group is used up and
binds nothing: whoever read it could send it first)."""

from __future__ import annotations

from gate.base.statuses import utcnow
from gate.decisions import identities
from tests.conftest import Gate
from tests.support.fake_telegram import CHAT, FakeTelegram
from tests.support.servers import wait_until
from tests.telegram.conftest import IDS, push

NEW_ID = IDS["stranger"]


def said(gate: Gate, fake: FakeTelegram, chat: int, text: str) -> str:
    """Send `text` as the stranger in `chat`; the bot's reply."""
    fake.chats.add(chat)
    update = fake.say(chat, NEW_ID, text)
    assert push(gate, update).status_code == 200
    message_id = update["message"]["message_id"]
    return str(wait_until(lambda: fake.replies_to(chat, message_id))[-1].shown()[0])


def bound_to_bob(gate: Gate) -> list[str]:
    """The Telegram ids bound to bob in the database."""
    bob = gate.settings.approver("bob")
    assert bob is not None
    found = identities.bindings(gate.settings, gate.state.db, bob)
    return [b.user_id for b in found if b.platform == "telegram" and b.id is not None]


def test_a_code_sent_privately_binds_and_one_sent_in_a_group_is_used_up(
    tg_gate_db: Gate, fake: FakeTelegram
) -> None:
    gate, bob = tg_gate_db, tg_gate_db.settings.approver("bob")
    assert bob is not None
    seen = identities.start_link(gate.state.db, bob, "telegram", utcnow())
    assert "no longer works" in said(gate, fake, CHAT, f"/link {seen}")
    assert "not valid" in said(gate, fake, NEW_ID, f"/link {seen}")  # used up in the group
    assert bound_to_bob(gate) == []
    assert "followed by the code" in said(gate, fake, NEW_ID, "/link")
    code = identities.start_link(gate.state.db, bob, "telegram", utcnow())
    answer = said(gate, fake, NEW_ID, f"/link {code}")
    assert answer.startswith("Linked: your Telegram clicks now count as bob"), answer
    assert bound_to_bob(gate) == [str(NEW_ID)]
