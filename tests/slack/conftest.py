"""Fixtures for the Slack channel: a fake Slack on loopback, a gate wired to it, signed clicks."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from gate.config.settings import Settings
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support.fake_slack import CHANNEL, TOKEN, FakeSlack, Message
from tests.support.http import TLS
from tests.support.servers import wait_until

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
INTERACTIONS = "/channels/slack/interactions"
FIXTURES = Path(__file__).resolve().parent / "payloads"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # slack-sdk routes every call through HTTP(S)_PROXY when set, ignoring NO_PROXY, which
    # would send calls meant for the loopback fake to the proxy.
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    """A fake Slack Web API, started on a free loopback port."""
    fake = FakeSlack().start()
    yield fake
    fake.stop()


def slack_settings(
    database_url: str, fake: FakeSlack, *, extra_rules: Sequence[dict[str, Any]] = (), **slack: Any
) -> Settings:
    """The standard test settings plus `[channels.slack]` pointed at the fake.

    `extra_rules` are matched before the standard ones.
    """
    data = cfg.settings_data(database_url)
    data["rules"] = [*extra_rules, *data["rules"]]
    data["channels"]["slack"] = {
        "bot_token": TOKEN,
        "signing_secret": SIGNING_SECRET,
        "default_target": CHANNEL,
        "api_url": fake.api_url,
        **slack,
    }
    return Settings(**data)


@pytest.fixture
def slack_gate(make_gate: GateFactory, db_url: str, fake_slack: FakeSlack) -> Gate:
    """A gate with the Slack channel, on each database."""
    return make_gate(settings=slack_settings(db_url, fake_slack))


@pytest.fixture
def slack_gate_sqlite(make_gate: GateFactory, sqlite_url: str, fake_slack: FakeSlack) -> Gate:
    """A gate with the Slack channel on SQLite, for tests that are not about the database."""
    return make_gate(settings=slack_settings(sqlite_url, fake_slack))


# -- signing and sending, the way Slack does ------------------------------------------------


def sign(body: bytes, timestamp: int | None = None, secret: str = SIGNING_SECRET) -> dict[str, str]:
    """Slack's headers for `body`: v0=hex(HMAC-SHA256(secret, "v0:{ts}:{body}"))."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    base = b"v0:" + ts.encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


def form(payload: dict[str, Any]) -> bytes:
    """The form-encoded `payload=<json>` body Slack posts."""
    return ("payload=" + quote(json.dumps(payload, separators=(",", ":")))).encode()


def interact(
    gate: Gate,
    payload: dict[str, Any],
    *,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> httpx.Response:
    """POST a signed interaction (unless `headers` says otherwise) to the gate."""
    raw = form(payload) if body is None else body
    sent = {"Content-Type": "application/x-www-form-urlencoded", **sign(raw), **(headers or {})}
    with httpx.Client(base_url=gate.url, timeout=10, verify=TLS) as client:
        return client.post(INTERACTIONS, content=raw, headers=sent)


def _fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def block_actions(
    request_id: str,
    user: str,
    action_id: str = "gate_approve",
    *,
    message: Message | None = None,
    trigger_id: str = "1234.5678.abcdef",
) -> dict[str, Any]:
    """A click on one of our buttons, shaped like the captured real payload."""
    payload = copy.deepcopy(_fixture("slack_block_actions_button_with_state.json"))
    channel, ts = (message.channel, message.ts) if message else (CHANNEL, "1700000000.000100")
    payload["user"] = {"id": user, "username": user.lower(), "name": user.lower(), "team_id": "T0"}
    payload["container"] = {
        "type": "message",
        "message_ts": ts,
        "channel_id": channel,
        "is_ephemeral": False,
    }
    payload["channel"] = {"id": channel, "name": "approvals"}
    payload["trigger_id"] = trigger_id
    payload["state"] = {"values": {}}
    if message is not None:
        payload["message"] = {"type": "message", "ts": ts, "blocks": message.blocks}
    payload["actions"] = [
        {
            "action_id": action_id,
            "block_id": "decide-pending-0",
            "text": {"type": "plain_text", "text": "Approve", "emoji": False},
            "value": request_id,
            "style": "primary",
            "type": "button",
            "action_ts": f"{time.time():.6f}",
        }
    ]
    return payload


def view_submission(view: dict[str, Any], user: str, reason: str) -> dict[str, Any]:
    """Submitting the modal gate opened, shaped like the captured real payload."""
    payload = copy.deepcopy(_fixture("slack_view_submission_modal.json"))
    payload["user"] = {"id": user, "username": user.lower(), "name": user.lower(), "team_id": "T0"}
    submitted = payload["view"]
    submitted.update(
        {
            "callback_id": view["callback_id"],
            "private_metadata": view["private_metadata"],
            "blocks": view["blocks"],
            "state": {
                "values": {
                    "reason": {"reason_input": {"type": "plain_text_input", "value": reason}}
                }
            },
        }
    )
    return payload


# -- waiting on the fake --------------------------------------------------------------------


def card_for(fake: FakeSlack, request_id: str) -> Message:
    """The posted card whose buttons or link carry `request_id` (waits for it)."""

    def find() -> Message | None:
        for message in fake.posted():
            if request_id in json.dumps(message.blocks):
                return message
        return None

    found: Message = wait_until(find)
    return found


def card_text(message: Message) -> str:
    """Every text in the card, joined, for assertions."""
    return json.dumps(message.blocks, ensure_ascii=False)


def has_buttons(message: Message) -> bool:
    """True while the card still offers Approve / Reject."""
    return any(b.get("type") == "actions" for b in message.blocks)
