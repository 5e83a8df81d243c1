"""Fixtures for the Discord channel: the fake on loopback, a gate wired to it, signed clicks."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from channels.discord import DiscordChannel
from channels.discord.settings import DiscordSettings
from gate.config.settings import Settings
from gate.delivery.channel import validate_settings
from gate.server.state import ChannelGate
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support.chat_rules import CHAT_RULES
from tests.support.fake_discord import CHANNEL, TOKEN, FakeDiscord, Message
from tests.support.servers import wait_until

FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: Discord ids of the standard approvers (snowflakes, as Discord sends them)
USERS = {
    "alice": "1000000000000000011",
    "bob": "1000000000000000012",
    "carol": "1000000000000000013",
    "mallory": "1000000000000000014",
}
STRANGER = "1000000000000000099"


def fixture(name: str) -> dict[str, Any]:
    """A documented payload from tests/discord/fixtures (a fresh copy)."""
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return copy.deepcopy(data)


def discord_settings(
    database_url: str,
    fake: FakeDiscord,
    *,
    extra_rules: Sequence[dict[str, Any]] = (),
    **discord: Any,
) -> Settings:
    """The standard settings plus the chat rules, with only `[channels.discord]` (the fake)."""
    data = cfg.settings_data(database_url)
    data["rules"] = [*extra_rules, *CHAT_RULES, *data["rules"]]
    for approver in data["approvers"]:
        approver["discord"] = USERS[approver["name"]]
    data["channels"] = {
        "discord": {
            "bot_token": TOKEN,
            "public_key": fake.public_key,
            "default_target": CHANNEL,
            "api_url": fake.api_url,
            **discord,
        }
    }
    return Settings(**data)


@pytest.fixture
def fake_discord() -> Iterator[FakeDiscord]:
    """A fake Discord, started on a free loopback port."""
    fake = FakeDiscord().start()
    yield fake
    fake.stop()


@pytest.fixture
def discord_gate(make_gate: GateFactory, db_url: str, fake_discord: FakeDiscord) -> Gate:
    """A gate with the Discord channel, on each database."""
    return make_gate(settings=discord_settings(db_url, fake_discord))


@pytest.fixture
def discord_gate_sqlite(make_gate: GateFactory, sqlite_url: str, fake_discord: FakeDiscord) -> Gate:
    """A gate with the Discord channel on SQLite, for tests that are not about the database."""
    return make_gate(settings=discord_settings(sqlite_url, fake_discord))


def standalone(gate: Gate, port: Any = None, **kwargs: Any) -> DiscordChannel:
    """A second DiscordChannel on the gate's settings, driven from the test's own event loop
    (`port`: the channel port to use instead of the gate's own)."""
    settings = validate_settings("discord", gate.settings.channels.configured()["discord"])
    assert isinstance(settings, DiscordSettings)
    return DiscordChannel(settings, port or ChannelGate(gate.state.service), **kwargs)


def ask(gate: Gate, tool: str = "pay_vendor", args: Any = None, **extra: Any) -> str:
    """Submit a call that needs a human; the request's id."""
    extra.setdefault("user_id", "dave")
    body = {"tool_name": tool, "tool_args": args or {"amount": 60000, "vendor": "acme"}}
    answer = gate.submit(**body, **extra)
    assert answer["decision"] == "ask", answer
    request_id: str = answer["request"]["id"]
    return request_id


def card_for(fake: FakeDiscord, request_id: str) -> Message:
    """The posted card whose controls carry `request_id` (waits for it)."""

    def find() -> Message | None:
        for message in fake.posted():
            if request_id in json.dumps(message.body):
                return message
        return None

    found: Message = wait_until(find)
    return found


def custom_id(message: Message, verb: str) -> str:
    """The custom_id of the card's control for `verb` (approve, reject, reasons, ...)."""
    for row in message.body["components"]:
        for component in row["components"]:
            if str(component.get("custom_id", "")).startswith(f"gate:{verb}:"):
                return str(component["custom_id"])
    raise AssertionError(f"no {verb} control on the card")


def status(gate: Gate, request_id: str) -> dict[str, Any]:
    """The request as the API shows it."""
    with gate.client(cfg.ADMIN) as c:
        data: dict[str, Any] = c.get(f"/v1/requests/{request_id}").json()
    return data
