"""Every interaction is verified on its raw bytes before anything reads it; PING is answered."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from channels.discord.verify import public_key, verify_signature
from gate.base.errors import ConfigError, Unauthenticated
from gate.delivery.channel import validate_settings
from tests.conftest import Gate
from tests.discord.conftest import USERS, ask, card_for, custom_id, status
from tests.support.fake_discord import FakeDiscord

PING = {"type": 1, "id": "1", "application_id": "2", "token": "t", "version": 1}


def _sent(fake: FakeDiscord, gate: Gate, body: bytes, headers: Mapping[str, str | bytes]) -> Any:
    return fake.post_raw(gate.url, body, headers)


def test_ping_is_answered_with_pong(discord_gate_sqlite: Gate, fake_discord: FakeDiscord) -> None:
    delivered = fake_discord.deliver(discord_gate_sqlite.url, PING)
    assert (delivered.status, delivered.answer, delivered.problems) == (200, {"type": 1}, [])


def test_a_ping_discord_did_not_sign_is_refused(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    # Discord checks the endpoint by sending bad signatures too: they must get a 401.
    body = json.dumps(PING).encode()
    r = _sent(
        fake_discord,
        discord_gate_sqlite,
        body,
        fake_discord.sign(body, key=Ed25519PrivateKey.generate()),
    )
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_signature"


def _headers(fake: FakeDiscord, body: bytes, **change: str | bytes) -> dict[str, str | bytes]:
    headers: dict[str, str | bytes] = dict(fake.sign(body))
    for name, value in change.items():
        key = {"ts": "X-Signature-Timestamp", "sig": "X-Signature-Ed25519"}[name]
        headers[key] = value
    return headers


def test_every_malformed_signature_is_a_401_and_nothing_changes(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    gate = discord_gate_sqlite
    request_id = ask(gate)
    message = card_for(fake_discord, request_id)
    payload = fake_discord.component(message, custom_id(message, "approve"), USERS["alice"])
    body = json.dumps(payload).encode()
    good = fake_discord.sign(body)
    now = int(time.time())
    cases: dict[str, Mapping[str, str | bytes]] = {
        "no timestamp": {k: v for k, v in good.items() if k != "X-Signature-Timestamp"},
        "no signature": {k: v for k, v in good.items() if k != "X-Signature-Ed25519"},
        "superscript digit": _headers(fake_discord, body, ts="²".encode("latin-1")),
        "timestamp of 13 digits": _headers(fake_discord, body, ts="1" * 13),
        "signature not hex": _headers(fake_discord, body, sig="zz" * 64),
        "signature too short": _headers(fake_discord, body, sig=good["X-Signature-Ed25519"][:-2]),
        "another timestamp, same signature": _headers(fake_discord, body, ts=str(now - 1)),
        "from the future": fake_discord.sign(body, timestamp=now + 400),
        "stale": fake_discord.sign(body, timestamp=now - 301 - 5),
    }
    for case, headers in cases.items():
        r = _sent(fake_discord, gate, body, headers)
        assert r.status_code == 401, (case, r.text)
        assert r.json()["error"]["code"] == "invalid_signature", case
    # a signed body changed by one byte
    r = _sent(fake_discord, gate, body.replace(b'"type": 3', b'"type":  3'), good)
    assert r.status_code == 401
    # non-ASCII header bytes are a refusal, not a 500
    r = _sent(
        fake_discord, gate, body, {**good, "X-Signature-Ed25519": ("é" * 128).encode("latin-1")}
    )
    assert r.status_code in (400, 401)
    assert status(gate, request_id)["status"] == "pending"


def test_a_signed_body_gate_cannot_read_is_a_400(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    for body in (b"\xff not json", b"[1, 2]", b"[" * 100_000, json.dumps({"type": 99}).encode()):
        r = _sent(fake_discord, discord_gate_sqlite, body, fake_discord.sign(body))
        assert r.status_code == 400, body[:20]
        assert r.json()["error"]["code"] == "bad_discord_payload"


def test_verify_signature_accepts_discords_signature_and_nothing_else() -> None:
    private = Ed25519PrivateKey.generate()
    key = public_key(private.public_key().public_bytes_raw().hex())
    body, ts = b'{"type":1}', "1700000000"
    headers = {
        "x-signature-timestamp": ts,
        "x-signature-ed25519": private.sign(ts.encode() + body).hex(),
    }
    verify_signature(key, body, headers, now=1700000000)
    verify_signature(key, body, headers, now=1700000000 + 300)
    with pytest.raises(Unauthenticated):
        verify_signature(key, body, headers, now=1700000000 + 301)
    with pytest.raises(Unauthenticated):
        verify_signature(key, body + b" ", headers, now=1700000000)


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"public_key": "00" * 32}, "channels.discord.bot_token"),
        ({"bot_token": "x"}, "channels.discord.public_key"),
    ],
)
def test_a_channel_without_its_secrets_does_not_load(table: dict[str, str], key: str) -> None:
    from channels.discord import DiscordChannel

    settings = validate_settings("discord", table)
    with pytest.raises(ConfigError) as caught:
        DiscordChannel(settings, None)  # type: ignore[arg-type]
    assert caught.value.key == key


@pytest.mark.parametrize(
    ("table", "where"),
    [
        ({"public_key": "not hex"}, "channels.discord.public_key"),
        ({"public_key": "ab" * 31}, "channels.discord.public_key"),
        ({"default_target": "#approvals"}, "channels.discord.default_target"),
        ({"public-key": "ab" * 32}, "channels.discord.public-key"),
    ],
)
def test_bad_settings_stop_start_up_naming_the_key(table: dict[str, str], where: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_settings("discord", table)
    assert caught.value.key == where


@pytest.mark.parametrize("user_id", ["alice", "@alice", "8035111022467891200000"])
def test_an_approver_id_that_is_not_a_user_id_stops_start_up(
    fake_discord: FakeDiscord, sqlite_url: str, user_id: object
) -> None:
    from gate.app import create_app
    from tests.discord.conftest import discord_settings

    settings = discord_settings(sqlite_url, fake_discord)
    settings.approvers[0].__pydantic_extra__["discord"] = user_id  # type: ignore[index]
    with pytest.raises(ConfigError) as caught:
        create_app(settings)
    assert caught.value.key == "approvers.discord" and "alice" in str(caught.value)
