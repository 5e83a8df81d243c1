"""What reaches gate from Discord: one neutral `Click` per interaction, and nothing past the port.

The Discord adapter here talks to a recording port wrapped around a running gate's real
`ChannelGate` (clicks go through the real decision pipeline): each test checks the exact
`Click` gate received, and that the adapter never read gate's settings, i.e. never worked out
for itself who may act or what a rule offers.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Any

from channels.discord.card import ARGS_CHARS
from gate.config.settings import Settings
from gate.decisions.acting import Result
from gate.decisions.clicks import Click
from gate.decisions.readmodel import RequestView
from gate.server.state import ChannelGate
from tests.conftest import Gate
from tests.discord.conftest import USERS, ask, card_for, custom_id, standalone, status
from tests.support.fake_discord import FakeDiscord


class RecordingGate:
    """The channel port of a running gate, recording each click; settings are off limits."""

    def __init__(self, real: ChannelGate) -> None:
        self._real = real
        self.clicks: list[Click] = []

    @property
    def settings(self) -> Settings:
        raise AssertionError("the Discord adapter read gate's settings")

    async def act(self, click: Click) -> Result:
        self.clicks.append(click)
        return await self._real.act(click)

    async def view(self, request_id: str) -> RequestView | None:
        return await self._real.view(request_id)


def _through(
    gate: Gate, payloads: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[Click]]:
    """Hand each payload to a recording adapter in turn; its answers and the clicks gate got."""
    port = RecordingGate(ChannelGate(gate.state.service))

    async def run() -> list[dict[str, Any]]:
        channel = standalone(gate, port)
        try:
            return [await channel.handle(json.dumps(p).encode()) for p in payloads]
        finally:
            await channel.aclose()

    answers = asyncio.run(run())
    return answers, port.clicks


def test_reject_with_presets_and_text_is_one_click(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    gate = discord_gate_sqlite
    request_id = ask(gate, "refund_order", {"amount": 900})
    message = card_for(fake_discord, request_id)
    pick = fake_discord.component(
        message, custom_id(message, "reasons"), USERS["bob"], values=["r1", "r0"]
    )
    [opened], clicks = _through(gate, [pick])
    assert opened["type"] == 9 and [c.action for c in clicks] == ["check"]
    modal = opened["data"]
    assert modal["custom_id"] == f"gate:rejectm:{request_id}:3"
    assert modal["components"][0]["components"][0]["required"] is False
    submit = fake_discord.modal_submit(message, modal, {"reason": " see ticket 42 "}, USERS["bob"])
    [answer], clicks = _through(gate, [submit])
    assert answer["type"] == 7
    assert clicks == [
        Click("discord", USERS["bob"], request_id, "reject", comment="see ticket 42",
              reasons=("wrong customer", "too expensive"), args_chars=ARGS_CHARS)
    ]  # fmt: skip


def test_edits_reach_gate_by_argument_name_and_only_what_changed(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    gate = discord_gate_sqlite
    # a credential token masked in text (a value masked whole under a secret-named key
    # would make the card offer no approval at all: tests/web/test_reveal.py)
    args = {"amount": 900, "currency": "EUR", "customer": "c-1", "memo": "api_key=sk-secret"}
    request_id = ask(gate, "refund_order", args)
    message = card_for(fake_discord, request_id)
    press = fake_discord.component(message, custom_id(message, "edit"), USERS["alice"])
    [opened], _ = _through(gate, [press])
    modal = opened["data"]
    labels = [row["components"][0]["label"] for row in modal["components"]]
    assert labels == ["amount", "currency", "Note for the agent"]  # no secret, no extra field
    texts = {"e0": "500", "note": "halved"}
    [answer], clicks = _through(
        gate, [fake_discord.modal_submit(message, modal, texts, USERS["alice"])]
    )
    assert answer["type"] == 7
    assert clicks == [
        Click(
            "discord",
            USERS["alice"],
            request_id,
            "approve",
            comment="halved",
            edits={"amount": 500},
            args_chars=ARGS_CHARS,
        )
    ]
    assert status(gate, request_id)["approved_args"] == {**args, "amount": 500}


def test_a_grant_pick_confirms_then_approves_with_the_grant(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    gate = discord_gate_sqlite
    request_id = ask(gate, "shell_run", {"cmd": "ls"}, session_id="s-port")
    message = card_for(fake_discord, request_id)
    pick = fake_discord.component(
        message, custom_id(message, "grant"), USERS["alice"], values=["session:1800s"]
    )
    [opened], clicks = _through(gate, [pick])
    assert opened["type"] == 9 and opened["data"]["title"] == "Approve and grant?"
    assert [c.action for c in clicks] == ["check"]
    submit = fake_discord.modal_submit(message, opened["data"], {}, USERS["alice"])
    [answer], clicks = _through(gate, [submit])
    assert answer["type"] == 7
    assert clicks == [
        Click(
            "discord",
            USERS["alice"],
            request_id,
            "approve",
            grant=("session", "1800s"),
            args_chars=ARGS_CHARS,
        )  # fmt: skip
    ]


def test_extend_carries_the_deadline_the_card_showed(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    gate = discord_gate_sqlite
    request_id = ask(gate, "refund_order", {"amount": 900})
    shown = datetime.fromisoformat(status(gate, request_id)["expires_at"])
    message = card_for(fake_discord, request_id)
    press = fake_discord.component(message, custom_id(message, "extend"), USERS["bob"])
    [answer, again], clicks = _through(gate, [press, press])  # one body delivered twice
    assert answer == again and answer["data"]["flags"] == 64
    assert clicks == [
        Click(
            "discord",
            USERS["bob"],
            request_id,
            "extend",
            extend_by="15m",
            extend_from=shown,
            args_chars=ARGS_CHARS,
        )  # fmt: skip
    ]
