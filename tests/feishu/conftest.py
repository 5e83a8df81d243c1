"""Fixtures for the Feishu channel: the fake open platform and a gate that talks to it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import pytest

from channels.feishu import FeishuChannel
from gate.config.settings import Settings
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support.fake_feishu import APP_ID, APP_SECRET, FakeFeishu, build_callback

VERIFICATION_TOKEN = "vt-gate-tests-0001"
ENCRYPT_KEY = "ek-gate-tests-0001"
CHAT = "oc_approvals"


def feishu_settings(
    db_url: str, fake: FakeFeishu, *, extra_rules: Sequence[dict[str, Any]] = (), **overrides: Any
) -> Settings:
    """The standard settings with only the Feishu channel, pointed at the fake.

    `extra_rules` are matched before the standard ones.
    """
    data = cfg.settings_data(db_url)
    data["rules"] = [*extra_rules, *data["rules"]]
    data["channels"] = {
        "feishu": {
            "app_id": APP_ID,
            "app_secret": APP_SECRET,
            "verification_token": VERIFICATION_TOKEN,
            "encrypt_key": ENCRYPT_KEY,
            "default_target": CHAT,
            "base_url": fake.url,
            **overrides,
        }
    }
    return Settings(**data)


@pytest.fixture
def fake_feishu() -> Iterator[FakeFeishu]:
    """A running fake open platform."""
    fake = FakeFeishu().start()
    yield fake
    fake.stop()


@pytest.fixture
def feishu_gate(make_gate: GateFactory, sqlite_url: str, fake_feishu: FakeFeishu) -> Gate:
    """A gate on SQLite whose only channel is Feishu (the fake)."""
    return make_gate(settings=feishu_settings(sqlite_url, fake_feishu))


@pytest.fixture
def feishu_gate_db(make_gate: GateFactory, db_url: str, fake_feishu: FakeFeishu) -> Gate:
    """A Feishu gate on each database (SQLite, and PostgreSQL when configured)."""
    return make_gate(settings=feishu_settings(db_url, fake_feishu))


def channel(gate: Gate) -> FeishuChannel:
    """The live FeishuChannel inside a running gate."""
    found = gate.state.channels["feishu"]
    assert isinstance(found, FeishuChannel)
    return found


def send_callback(
    gate: Gate,
    payload: dict[str, Any] | bytes,
    *,
    encrypted: bool = True,
    **kwargs: Any,
) -> httpx.Response:
    """POST a callback to gate, signed (and encrypted) the way Feishu does."""
    kwargs.setdefault("encrypt_key", ENCRYPT_KEY)
    cb = build_callback(payload, encrypted=encrypted, **kwargs)
    with gate.client() as c:
        return c.post("/channels/feishu/events", content=cb.body, headers=cb.headers)
