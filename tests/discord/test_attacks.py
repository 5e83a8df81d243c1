"""Attacks on the Discord channel, each through the interactions endpoint of a real gate.

Every case plays someone the promise must hold against ("a flagged call runs only when the
people its rule names approved that exact call; when gate cannot tell, the call does not
run"): a Discord user whose client sends any custom_id it likes (Discord's signature proves
Discord relayed the click and who made it, not that gate put that control on the card),
someone replaying a captured signed body, and anyone who reads gate's logs. Interactions are
built and signed by `FakeDiscord` with its own Ed25519 key, the way Discord signs them.

Discord facts relied on (discord.com/developers/docs/interactions/receiving-and-responding):
an interaction's `token` is valid for 15 minutes and is the only credential needed to send
follow-up messages and to edit or delete the original response (`/webhooks/<application
id>/<token>/messages/@original`): it is a secret, like the bot token.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

import pytest

from tests.conftest import Gate
from tests.discord.conftest import USERS, ask, card_for, custom_id, status
from tests.support.fake_discord import FakeDiscord
from tests.support.servers import wait_until


def hold_the_database(gate: Gate, seconds: float) -> threading.Thread:
    """Another writer holds SQLite's write lock for `seconds`: gate's next write waits for it,
    so a click that writes is answered past Discord's 3 s, as on a busy server."""
    path = gate.settings.server.database_url.removeprefix("sqlite:///")
    locked = threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(path, timeout=30)
        try:
            conn.execute("BEGIN IMMEDIATE")
            locked.set()
            time.sleep(seconds)
            conn.rollback()
        finally:
            conn.close()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert locked.wait(10)
    return holder


# -- secrets stay out of the logs -------------------------------------------------------------


def test_an_interaction_token_stays_out_of_the_logs(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord, caplog: pytest.LogCaptureFixture
) -> None:
    # An Extend answered late is told by a follow-up on the interaction's token; when Discord
    # refuses it (the token expired), the failure is logged, and must not carry the token.
    gate = discord_gate_sqlite
    request_id = ask(gate, "refund_order", {"amount": 900})
    message = card_for(fake_discord, request_id)
    before = status(gate, request_id)["expires_at"]
    payload = fake_discord.component(message, custom_id(message, "extend"), USERS["bob"])
    payload["token"] = "aW50ZXJhY3Rpb246expired-token-0123456789"  # one Discord no longer takes
    with caplog.at_level(logging.INFO):
        holder = hold_the_database(gate, 3.5)
        delivered = fake_discord.deliver(gate.url, payload)
        assert delivered.status == 200 and delivered.private is not None
        holder.join()
        wait_until(lambda: status(gate, request_id)["expires_at"] != before)
        wait_until(lambda: [c for c in fake_discord.calls_to("POST") if "/webhooks/" in c.path])
        wait_until(lambda: "follow-up" in caplog.text)
    assert "401" in caplog.text  # the failure is logged...
    assert payload["token"] not in caplog.text  # ...without the credential
