"""Fixtures for the WeCom channel: the fake server API and a gate that talks to it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import pytest

from gate.config.settings import Settings
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support import fake_wecom
from tests.support.chat_rules import CHAT_RULES
from tests.support.fake_wecom import FakeWeCom

TOKEN = "gateTestsToken0001"
AES_KEY = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFG"
TARGET = "alice|bob"


def user(person: str) -> str:
    """The WeCom userid the tests give an approver."""
    return f"u-{person}"


def wecom_settings(
    db_url: str, fake: FakeWeCom, *, extra_rules: Sequence[dict[str, Any]] = (), **overrides: Any
) -> Settings:
    """The standard settings plus the chat rules, with only the WeCom channel (the fake)."""
    data = cfg.settings_data(db_url)
    data["rules"] = [*extra_rules, *CHAT_RULES, *data["rules"]]
    for approver in data["approvers"]:
        approver["wecom"] = user(approver["name"])
    data["channels"] = {
        "wecom": {
            "corp_id": fake_wecom.CORP_ID,
            "agent_id": fake_wecom.AGENT_ID,
            "secret": fake_wecom.SECRET,
            "token": TOKEN,
            "encoding_aes_key": AES_KEY,
            "default_target": TARGET,
            "api_url": fake.url,
            **overrides,
        }
    }
    return Settings(**data)


@pytest.fixture
def fake() -> Iterator[FakeWeCom]:
    """A running fake WeCom server API."""
    running = FakeWeCom().start()
    yield running
    running.stop()


@pytest.fixture
def wecom_gate(make_gate: GateFactory, sqlite_url: str, fake: FakeWeCom) -> Gate:
    """A gate on SQLite whose only channel is WeCom (the fake)."""
    return make_gate(settings=wecom_settings(sqlite_url, fake))


@pytest.fixture
def wecom_gate_db(make_gate: GateFactory, db_url: str, fake: FakeWeCom) -> Gate:
    """A gate on each database (SQLite, and PostgreSQL when configured), talking to WeCom."""
    return make_gate(settings=wecom_settings(db_url, fake))


def deliver(gate: Gate, plain: bytes, **kwargs: Any) -> httpx.Response:
    """POST a callback to gate, encrypted and signed the way WeCom does it."""
    kwargs.setdefault("token", TOKEN)
    kwargs.setdefault("encoding_aes_key", AES_KEY)
    cb = fake_wecom.build_callback(plain, **kwargs)
    with gate.client() as c:
        return c.post("/channels/wecom/callback", params=cb.query, content=cb.body)


def press(
    gate: Gate, fake: FakeWeCom, request_id: str, person: str, key: str, **kwargs: Any
) -> httpx.Response:
    """`person` presses the button `key` on the card posted for `request_id`."""
    message = posted(fake, request_id)
    plain = fake_wecom.card_event_xml(
        user=user(person),
        task_id=message.task_id,
        event_key=key,
        response_code=fake.issue_code(message.task_id),
        **kwargs,
    )
    return deliver(gate, plain)


def say(gate: Gate, person: str, content: str) -> httpx.Response:
    """`person` sends the app a text message."""
    return deliver(gate, fake_wecom.text_xml(user=user(person), content=content))


def posted(fake: FakeWeCom, request_id: str) -> fake_wecom.Message:
    """The request's card as the fake holds it (waits for the post)."""
    from tests.support.servers import wait_until

    def find() -> fake_wecom.Message | None:
        return next((m for m in fake.posted() if m.task_id.startswith(f"gate-{request_id}-")), None)

    found: fake_wecom.Message = wait_until(find)
    return found


def ask(gate: Gate, tool: str = "pay_vendor", args: Any = None, **extra: Any) -> str:
    """Submit a call that needs a human; the request id."""
    extra.setdefault("user_id", "dave")
    answer = gate.submit(
        tool_name=tool, tool_args=args or {"amount": 60000, "vendor": "acme"}, **extra
    )
    assert answer["decision"] == "ask", answer
    request_id: str = answer["request"]["id"]
    return request_id
