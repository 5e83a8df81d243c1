"""Clicks through a real gate: who clicked, what the answer is, and within what time."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from gate.decisions.acting import Result
from gate.decisions.clicks import Click
from gate.decisions.readmodel import RequestView
from gate.server.state import ChannelGate
from tests.conftest import Gate
from tests.discord.conftest import (
    STRANGER,
    USERS,
    ask,
    card_for,
    custom_id,
    fixture,
    standalone,
    status,
)
from tests.support.fake_discord import FakeDiscord
from tests.support.servers import wait_until


def test_an_approve_click_updates_its_card_at_once(
    discord_gate: Gate, fake_discord: FakeDiscord
) -> None:
    request_id = ask(discord_gate)
    message = card_for(fake_discord, request_id)
    payload = fake_discord.component(message, custom_id(message, "approve"), USERS["alice"])
    delivered = fake_discord.deliver(discord_gate.url, payload)
    assert delivered.status == 200 and delivered.kind == 7 and delivered.problems == []
    # UPDATE_MESSAGE replaced the card in the same answer: no buttons, who and where
    assert message.updates >= 1
    assert message.body["components"][0]["components"][0]["style"] == 5
    assert "Approved by alice in Discord" in json.dumps(message.body)
    now = status(discord_gate, request_id)
    assert (now["status"], now["decided_by"], now["decided_via"]) == (
        "approved",
        "alice",
        "discord",
    )
    # the outbox still edits the card (every card of the request, on any replica)
    wait_until(lambda: len(fake_discord.calls_to("PATCH")) >= 1)


def test_the_clicker_is_the_user_id_never_the_name(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    gate = discord_gate_sqlite
    request_id = ask(gate)
    message = card_for(fake_discord, request_id)
    # Discord's documented button click, aimed at our card: the name says mallory, the id is alice
    payload = fixture("interaction_button_docs.json")
    payload["data"]["custom_id"] = custom_id(message, "approve")
    payload["message"] = {"id": message.id, "channel_id": message.channel_id, **message.body}
    payload["member"]["user"].update({"id": USERS["alice"], "username": "mallory"})
    payload["member"]["nick"] = "mallory"
    assert fake_discord.deliver(gate.url, payload).kind == 7
    assert status(gate, request_id)["decided_by"] == "alice"
    # in a DM the clicker comes as `user`; a stranger's id is nobody, whatever their name
    other = ask(gate)
    message = card_for(fake_discord, other)
    dm = fake_discord.component(message, custom_id(message, "approve"), STRANGER)
    dm["user"] = {**dm.pop("member")["user"], "username": "alice", "global_name": "alice"}
    delivered = fake_discord.deliver(gate.url, dm)
    assert delivered.private == "Not recorded: you are not an approver for this rule."
    assert status(gate, other)["status"] == "pending"


def test_a_control_for_another_request_does_not_repaint_this_card(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    gate = discord_gate_sqlite
    shown, other = ask(gate), ask(gate)
    message = card_for(fake_discord, shown)
    card_for(fake_discord, other)
    before = json.dumps(message.body)
    # a signed interaction whose custom_id names another request than the card it came from
    payload = fake_discord.component(message, f"gate:approve:{other}", USERS["alice"])
    delivered = fake_discord.deliver(gate.url, payload)
    assert delivered.kind == 6  # acknowledged; the outbox updates the other request's card
    assert json.dumps(message.body) == before
    assert (
        status(gate, other)["status"] == "approved" and status(gate, shown)["status"] == "pending"
    )


def test_extend_moves_once_per_card_deadline_whatever_the_interaction(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    gate = discord_gate_sqlite
    request_id = ask(gate, "refund_order", {"amount": 900})
    message = card_for(fake_discord, request_id)
    extend = custom_id(message, "extend")
    before = status(gate, request_id)["expires_at"]
    # two interactions (two ids, as on two replicas) from one card: one move
    answers = [
        fake_discord.deliver(gate.url, fake_discord.component(message, extend, USERS["bob"]))
        for _ in range(2)
    ]
    assert all(a.private and a.private.startswith("Deadline moved") for a in answers)
    after = status(gate, request_id)["expires_at"]
    assert after != before
    wait_until(lambda: message.updates >= 1)
    fresh = custom_id(message, "extend")
    assert fresh != extend  # the refreshed card carries the new deadline
    fake_discord.deliver(gate.url, fake_discord.component(message, fresh, USERS["bob"]))
    assert status(gate, request_id)["expires_at"] != after


def test_commands_and_autocomplete_are_answered(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    command = fake_discord.interaction(
        2, {"id": "1", "name": "gate", "type": 1}, USERS["alice"], None
    )
    assert fake_discord.deliver(discord_gate_sqlite.url, command).private is not None
    auto = fake_discord.interaction(4, {"id": "1", "name": "gate", "type": 1}, USERS["alice"], None)
    r = fake_discord.post_raw(
        discord_gate_sqlite.url,
        json.dumps(auto).encode(),
        fake_discord.sign(json.dumps(auto).encode()),
    )
    assert r.json() == {"type": 8, "data": {"choices": []}}


def test_shapes_gate_did_not_send_are_a_400(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    gate = discord_gate_sqlite
    request_id = ask(gate)
    message = card_for(fake_discord, request_id)
    approve = custom_id(message, "approve")
    select = fake_discord.component(
        message, approve, USERS["alice"], values=["r0"]
    )  # a button id as a select
    no_user = fake_discord.component(message, approve, USERS["alice"])
    no_user["member"]["user"]["id"] = "alice"
    too_many = fake_discord.component(
        message, f"gate:reasons:{request_id}", USERS["bob"], ["r0"] * 26
    )
    modal = fake_discord.modal_submit(
        message, {"custom_id": f"gate:editm:{request_id}", "components": []}, {}, USERS["alice"]
    )
    modal["data"]["components"] = [{"type": 1, "components": [{"type": 4, "custom_id": "e0"}]}]
    for payload in (select, no_user, too_many, modal):
        delivered = fake_discord.deliver(gate.url, payload)
        assert delivered.status == 400, delivered.answer
        assert delivered.answer["error"]["code"] == "bad_discord_payload"
    assert status(gate, request_id)["status"] == "pending"


def test_crafted_reasons_in_a_modal_are_refused(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    gate = discord_gate_sqlite
    request_id = ask(gate, "refund_order", {"amount": 900})  # two preset reasons
    message = card_for(fake_discord, request_id)
    modal = {
        "custom_id": f"gate:rejectm:{request_id}:4",
        "components": [{"type": 1, "components": [{"type": 4, "custom_id": "reason"}]}],
    }
    delivered = fake_discord.deliver(
        gate.url, fake_discord.modal_submit(message, modal, {"reason": ""}, USERS["bob"])
    )
    assert delivered.private is not None and "not one of this rule" in delivered.private
    assert status(gate, request_id)["status"] == "pending"


class SlowGate:
    """gate's channel port, answering each click only after `delay` seconds."""

    def __init__(self, real: ChannelGate, delay: float) -> None:
        self._real, self.delay = real, delay

    @property
    def settings(self) -> Any:
        return self._real.settings

    async def act(self, click: Click) -> Result:
        await asyncio.sleep(self.delay)
        return await self._real.act(click)

    async def view(self, request_id: str) -> RequestView | None:
        return await self._real.view(request_id)


def test_a_slow_decision_is_acknowledged_in_time_and_still_lands(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    gate = discord_gate_sqlite
    request_id = ask(gate)
    message = card_for(fake_discord, request_id)
    payload = fake_discord.component(message, custom_id(message, "approve"), USERS["alice"])

    async def run() -> dict[str, Any]:
        slow = SlowGate(ChannelGate(gate.state.service), 0.3)
        channel = standalone(gate, slow, answer_budget=0.05)
        try:
            return await channel.handle(json.dumps(payload).encode())
        finally:
            await channel.aclose()  # waits for the decision still in flight

    assert asyncio.run(run()) == {"type": 6}  # DEFERRED_UPDATE_MESSAGE: the outbox edits the card
    assert status(gate, request_id)["decided_by"] == "alice"
    assert fake_discord.follow_ups == []  # the card is the answer everybody sees
    wait_until(lambda: "Approved by alice" in json.dumps(message.body))


def test_signed_bodies_of_any_shape_get_a_400_never_a_500(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    gate = discord_gate_sqlite
    request_id = ask(gate)
    message = card_for(fake_discord, request_id)
    base = fake_discord.component(message, custom_id(message, "approve"), USERS["alice"])
    custom_ids = [
        "", "x" * 101, f"gate:approve:{request_id}:extra", f"gate:extend:{request_id}:abc",
        f"gate:extend:{request_id}:{'9' * 21}", f"gate:delete:{request_id}", "gate:approve:../x",
        f"gate:rejectm:{request_id}:zz", f"gate:grantm:{request_id}:session", 7, None, ["a"],
    ]  # fmt: skip
    bodies: list[dict[str, Any]] = [
        {**base, "data": {**base["data"], "custom_id": c}} for c in custom_ids
    ]
    grant, edit = f"gate:grant:{request_id}", f"gate:editm:{request_id}"
    not_a_text_input = {"type": 18, "component": {"type": 3}}
    bodies += [
        {**base, "data": []},
        {**base, "member": "alice"},
        {**base, "member": {"user": {"id": 11}}},
        {**base, "id": "not-a-snowflake"},
        {**base, "type": "3"},
        {**base, "data": {"custom_id": grant, "component_type": 3, "values": "x"}},
        {**base, "data": {"custom_id": grant, "component_type": 3, "values": [1]}},
        {**base, "type": 5, "data": {"custom_id": edit, "components": [[]]}},
        {**base, "type": 5, "data": {"custom_id": edit, "components": [not_a_text_input]}},
    ]  # fmt: skip
    for body in bodies:
        raw = json.dumps(body).encode()
        r = fake_discord.post_raw(gate.url, raw, fake_discord.sign(raw))
        assert r.status_code == 400, (body.get("data"), r.text)
        assert r.json()["error"]["code"] == "bad_discord_payload"
    assert status(gate, request_id)["status"] == "pending"


def test_past_the_budget_a_refusal_still_reaches_the_clicker(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    gate = discord_gate_sqlite
    request_id = ask(gate)
    message = card_for(fake_discord, request_id)
    payload = fake_discord.component(message, custom_id(message, "approve"), STRANGER)

    async def run() -> dict[str, Any]:
        slow = SlowGate(ChannelGate(gate.state.service), 0.3)
        channel = standalone(gate, slow, answer_budget=0.05)
        try:
            return await channel.handle(json.dumps(payload).encode())
        finally:
            await channel.aclose()  # waits for the follow-up

    assert asyncio.run(run()) == {"type": 6}
    # DEFERRED_UPDATE_MESSAGE first, then the refusal as an ephemeral follow-up message
    [(token, body)] = fake_discord.follow_ups
    assert token == payload["token"]
    assert body["flags"] == 64 and body["allowed_mentions"] == {"parse": []}
    assert body["content"] == "Not recorded: you are not an approver for this rule."
    assert status(gate, request_id)["status"] == "pending"


def test_a_refusal_quoting_a_crafted_value_is_inert(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    gate = discord_gate_sqlite
    request_id = ask(gate, "refund_order", {"amount": 900})
    message = card_for(fake_discord, request_id)
    crafted = "@everyone <@1>\u202e [x](https://evil.example)"
    pick = fake_discord.component(message, custom_id(message, "reasons"), USERS["bob"], [crafted])
    told = fake_discord.deliver(gate.url, pick).private
    assert told is not None and told.startswith("Not recorded: not one of this rule's reasons")
    assert "\\@everyone \\<\\@1\\>" in told and "\u202e" not in told and "https\\://" in told
