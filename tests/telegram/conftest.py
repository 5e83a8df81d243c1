"""Fixtures for the Telegram channel: the fake Bot API and a gate that talks to it."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from gate.config.settings import Settings
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support import fake_telegram
from tests.support.chat_rules import CHAT_RULES
from tests.support.fake_telegram import CHAT, FakeTelegram, Message
from tests.support.servers import wait_until

WEBHOOK_SECRET = "telegram-tests-webhook-secret-0001"
CALLBACK_SECRET = "telegram-tests-callback-secret-0123456789abcdef"
WEBHOOK = "/channels/telegram/webhook"
FIXTURES = Path(__file__).parent / "fixtures"
#: numeric Telegram ids of the standard approvers (and of people gate does not know)
IDS = {"alice": 111001, "bob": 111002, "carol": 111003, "mallory": 111004, "stranger": 999999}


def telegram_settings(
    db_url: str, fake: FakeTelegram, *, extra_rules: Sequence[dict[str, Any]] = (), **overrides: Any
) -> Settings:
    """The standard settings plus the chat rules, with only Telegram, pointed at the fake."""
    data = cfg.settings_data(db_url)
    data["rules"] = [*extra_rules, *CHAT_RULES, *data["rules"]]
    for approver in data["approvers"]:
        if approver["name"] in IDS:
            approver["telegram"] = str(IDS[approver["name"]])
    data["channels"] = {
        "telegram": {
            "bot_token": fake_telegram.TOKEN,
            "webhook_secret": WEBHOOK_SECRET,
            "callback_secret": CALLBACK_SECRET,
            "default_target": str(CHAT),
            "bot_username": fake_telegram.BOT_USERNAME,
            "api_url": fake.url,
            **overrides,
        }
    }
    return Settings(**data)


def fixture(name: str) -> Any:
    """A captured Bot API shape from `fixtures/` (see SOURCES.md)."""
    return json.loads((FIXTURES / name).read_text())


@pytest.fixture
def fake() -> Iterator[FakeTelegram]:
    """A running fake Bot API."""
    found = FakeTelegram().start()
    yield found
    found.stop()


@pytest.fixture
def tg_gate(make_gate: GateFactory, sqlite_url: str, fake: FakeTelegram) -> Gate:
    """A gate on SQLite whose only channel is Telegram (the fake)."""
    return make_gate(settings=telegram_settings(sqlite_url, fake))


@pytest.fixture
def tg_gate_db(make_gate: GateFactory, db_url: str, fake: FakeTelegram) -> Gate:
    """A Telegram gate on each database (SQLite, and PostgreSQL when configured)."""
    return make_gate(settings=telegram_settings(db_url, fake))


def push(
    gate: Gate, update: dict[str, Any] | bytes, secret: str | None = WEBHOOK_SECRET
) -> httpx.Response:
    """POST an update to gate's webhook the way Telegram does."""
    delivery = fake_telegram.deliver(update, secret)
    with gate.client() as c:
        return c.post(WEBHOOK, content=delivery.body, headers=delivery.headers)


def ask(gate: Gate, tool: str = "pay_vendor", args: Any = None, **extra: Any) -> str:
    """Submit a call that needs a human; the request's id."""
    extra.setdefault("user_id", "dave")
    answer = gate.submit(tool_name=tool, tool_args=args or {"amount": 60000}, **extra)
    assert answer["decision"] == "ask", answer
    request_id: str = answer["request"]["id"]
    return request_id


def card_of(fake: FakeTelegram, request_id: str) -> Message:
    """The card posted for a request (waits for the outbox)."""

    def found() -> Message | None:
        for message in fake.bot_messages():
            if message.parse_mode == "HTML" and request_id in message.shown()[0]:
                return message
        return None

    message: Message = wait_until(found)
    return message


def state(gate: Gate, request_id: str) -> dict[str, Any]:
    """The request as the API shows it."""
    with gate.client(cfg.ADMIN) as c:
        r = c.get(f"/v1/requests/{request_id}")
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data
