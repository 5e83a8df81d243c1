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

import json
import logging
import sqlite3
import threading
import time
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.conftest import Gate, GateFactory
from tests.discord.conftest import USERS, ask, card_for, custom_id, discord_settings, status
from tests.support import config as cfg
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


# -- attacks that hold (kept so they keep holding) --------------------------------------------


def test_one_signed_body_sent_to_two_replicas_acts_once(
    make_gate: GateFactory, sqlite_url: str, fake_discord: FakeDiscord
) -> None:
    # Two replicas on one database, each with its own memory of interaction ids: a captured
    # body replayed to the other one inside the signature's window.
    settings = discord_settings(sqlite_url, fake_discord)
    first, second = make_gate(settings=settings), make_gate(settings=settings)
    quorum = ask(first, "wire_funds", {"amount": 10})
    message = card_for(fake_discord, quorum)
    approve = fake_discord.component(message, custom_id(message, "approve"), USERS["alice"])
    for gate in (first, second, second):
        assert fake_discord.deliver(gate.url, approve).status == 200
    now = status(first, quorum)
    assert now["status"] == "pending" and [v["approver"] for v in now["votes"]] == ["alice"]
    request_id = ask(first, "refund_order", {"amount": 900})
    message = card_for(fake_discord, request_id)
    before = datetime.fromisoformat(status(first, request_id)["expires_at"])
    extend = fake_discord.component(message, custom_id(message, "extend"), USERS["bob"])
    for gate in (first, second):
        assert fake_discord.deliver(gate.url, extend).status == 200
    after = datetime.fromisoformat(status(first, request_id)["expires_at"])
    assert after - before == timedelta(minutes=15)


def test_a_click_after_the_deadline_decides_nothing(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    gate = discord_gate_sqlite
    request_id = ask(gate, "ephemeral_probe", {"n": 1})  # gives up after one second
    message = card_for(fake_discord, request_id)
    extend, approve = custom_id(message, "extend"), custom_id(message, "approve")
    wait_until(lambda: status(gate, request_id)["status"] == "expired", timeout=10)
    for control in (extend, approve):
        delivered = fake_discord.deliver(
            gate.url, fake_discord.component(message, control, USERS["alice"])
        )
        assert delivered.private is not None and "Already expired" in delivered.private
    assert status(gate, request_id)["status"] == "expired"


def test_crafted_controls_do_only_what_the_rule_offers(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    # A modified client sends the custom_ids and modal inputs it likes, as bob (an approver).
    gate = discord_gate_sqlite
    args = {"amount": 900, "currency": "EUR", "customer": "c-1"}
    request_id = ask(gate, "refund_order", args)
    message = card_for(fake_discord, request_id)
    before = status(gate, request_id)["expires_at"]
    # An Extend carrying a deadline the card never showed moves nothing.
    crafted = f"gate:extend:{request_id}:{10**16}"
    fake_discord.deliver(gate.url, fake_discord.component(message, crafted, USERS["bob"]))
    assert status(gate, request_id)["expires_at"] == before
    # A grant the rule does not offer, confirmed through a made-up modal, approves nothing.
    grant = {"custom_id": f"gate:grantm:{request_id}:agent:9999999s", "components": []}
    answer = fake_discord.deliver(
        gate.url, fake_discord.modal_submit(message, grant, {}, USERS["bob"])
    )
    assert answer.private is not None and answer.private.startswith("Not recorded")
    assert status(gate, request_id)["status"] == "pending"
    # Edit boxes the modal never had (a later index, the customer by name) are not read.
    modal = {
        "custom_id": f"gate:editm:{request_id}",
        "components": [
            {"type": 1, "components": [{"type": 4, "custom_id": key, "value": "x"}]}
            for key in ("e0", "e7", "customer", "note")
        ],
    }
    texts = {"e0": "5", "e7": '"c-2"', "customer": '"c-2"', "note": "ok"}
    answer = fake_discord.deliver(
        gate.url, fake_discord.modal_submit(message, modal, texts, USERS["bob"])
    )
    now = status(gate, request_id)
    assert now["status"] == "approved" and now["approved_args"] == {**args, "amount": 5}


def test_flooded_interaction_bodies_are_refused(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    gate = discord_gate_sqlite
    huge = b'{"type": 1, "x": "' + b"x" * 2_000_000 + b'"}'
    assert fake_discord.post_raw(gate.url, huge, fake_discord.sign(huge)).status_code == 413
    deep = b'{"type": 3, "data": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    r = fake_discord.post_raw(gate.url, deep, fake_discord.sign(deep))
    assert r.status_code == 400, r.text
    assert fake_discord.post_raw(gate.url, deep, {}).status_code == 401  # unsigned: unread


def test_a_huge_deep_hostile_request_still_gets_a_card_discord_takes(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    # A card Discord refuses (over 6,000 characters of embed, a field over 1,024) could never
    # be decided from chat; the fake refuses what Discord refuses.
    deep: Any = "end"
    for _ in range(30):
        deep = {"k`\U0001f600": deep}
    args = {
        "blob": "```@everyone <@&1> [x](https://evil.example)" * 2_000,
        "deep": deep,
        **{f"key{i}" + "`" * 150: "<@1>" * 200 for i in range(20)},
    }
    summary = "``` @here <@&123> https://evil.example \u202e " * 200
    request_id = ask(discord_gate_sqlite, "ask_blob", args, summary=summary, agent_id="`" * 200)
    message = card_for(fake_discord, request_id)
    assert fake_discord.problems == []
    assert message.body["allowed_mentions"] == {"parse": []}


def test_a_final_card_with_long_changes_still_fits_discord(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    # A call shown whole (so approvable), every other part at its longest, then approved
    # with long edits: the outcome and the changed values come on top. Discord refuses an
    # embed over 6,000 characters, for good: the card would keep showing the request as
    # pending with its buttons, its outcome never shown. Once final, nothing on the card is
    # approved any more, so the arguments give way instead.
    gate = discord_gate_sqlite
    args = {f"k{i}": "x" * 270 for i in range(10)}
    long = "w" * 300
    request_id = ask(
        gate, "ask_" + "t" * 150, args, summary=long * 3, agent_id=long[:200], user_id=long[:200]
    )
    message = card_for(fake_discord, request_id)
    assert custom_id(message, "approve")  # whole: approvable
    edited = dict.fromkeys(args, "y" * 270)
    with gate.client(cfg.ALICE) as c:
        r = c.post(
            f"/v1/requests/{request_id}/decision",
            json={"verdict": "approve", "edited_args": edited, "comment": "c" * 1500},
        )
    assert r.status_code == 200, r.text
    wait_until(lambda: fake_discord.calls_to("PATCH"))
    assert all(call.status == 200 for call in fake_discord.calls_to("PATCH")), fake_discord.problems
    assert message.updates == 1 and message.body["components"][0]["components"][0]["style"] == 5
    assert "Approved with edits by alice" in json.dumps(message.body)
