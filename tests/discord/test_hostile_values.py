"""Values a modified Discord client can put in a correctly signed interaction that no card of
gate's carries: a deadline past what a datetime holds, text that is not Unicode. Each gets a
clear answer, never a 500, and decides nothing it should not."""

from __future__ import annotations

import pytest

from tests.conftest import Gate
from tests.discord.conftest import USERS, ask, card_for, custom_id, status
from tests.support.fake_discord import FakeDiscord


@pytest.mark.parametrize("digits", ["9" * 20, str(10**19), "3" * 18])
def test_an_extend_past_year_9999_is_refused_not_a_500(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord, digits: str
) -> None:
    gate = discord_gate_sqlite
    request_id = ask(gate, "refund_order", {"amount": 900})
    message = card_for(fake_discord, request_id)
    before = status(gate, request_id)["expires_at"]
    crafted = f"gate:extend:{request_id}:{digits}"  # microseconds since 1970: past year 9999
    delivered = fake_discord.deliver(
        gate.url, fake_discord.component(message, crafted, USERS["bob"])
    )
    assert delivered.status == 400
    assert delivered.answer["error"]["code"] == "bad_discord_payload"
    assert status(gate, request_id)["expires_at"] == before
    # the card's own Extend still works
    own = fake_discord.component(message, custom_id(message, "extend"), USERS["bob"])
    assert fake_discord.deliver(gate.url, own).status == 200
    assert status(gate, request_id)["expires_at"] != before


def test_a_lone_surrogate_in_a_reason_or_an_edit_note_is_recorded(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    gate = discord_gate_sqlite
    rejected = ask(gate, "refund_order", {"amount": 900})
    message = card_for(fake_discord, rejected)
    modal = {
        "custom_id": f"gate:rejectm:{rejected}:0",
        "components": [{"type": 1, "components": [{"type": 4, "custom_id": "reason"}]}],
    }
    submit = fake_discord.modal_submit(message, modal, {"reason": "no \ud800 way"}, USERS["bob"])
    assert fake_discord.deliver(gate.url, submit).status == 200
    now = status(gate, rejected)
    assert now["status"] == "rejected" and "no \ufffd way" in now["reason"]

    edited = ask(gate, "refund_order", {"amount": 900})
    message = card_for(fake_discord, edited)
    modal = {
        "custom_id": f"gate:editm:{edited}",
        "components": [
            {"type": 1, "components": [{"type": 4, "custom_id": key, "value": ""}]}
            for key in ("e0", "note")
        ],
    }
    texts = {"e0": "450", "note": "halved \udfff"}
    submit = fake_discord.modal_submit(message, modal, texts, USERS["alice"])
    assert fake_discord.deliver(gate.url, submit).status == 200
    now = status(gate, edited)
    assert now["status"] == "approved" and now["approved_args"] == {"amount": 450}
    assert [v["comment"] for v in now["votes"]] == ["halved \ufffd"]
