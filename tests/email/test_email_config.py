"""`[channels.email]`: secrets from the environment, and start-up refused with the key named
when the channel could not send safely."""

from __future__ import annotations

from typing import Any

import pytest

from channels.email import EmailChannel
from gate.app import create_app
from gate.base.errors import ConfigError
from gate.config.settings import Settings
from gate.delivery.channel import load_channels, validate_settings
from tests.email.conftest import LINK_SECRET
from tests.support import config as cfg
from tests.support import docs


class _Gate:
    """A context with settings only: building the channel asks gate for nothing else."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings


def _data(sqlite_url: str, **email: Any) -> dict[str, Any]:
    data = cfg.settings_data(sqlite_url)
    data["channels"] = {
        "email": {
            "host": "smtp.example.com",
            "sender": "gate <gate@example.com>",
            "default_target": "approvers",
            **email,
        }
    }
    return data


def test_secrets_come_from_the_environment(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATE_CHANNELS__EMAIL__LINK_SECRET", LINK_SECRET)
    monkeypatch.setenv("GATE_CHANNELS__EMAIL__USERNAME", "gate@example.com")
    monkeypatch.setenv("GATE_CHANNELS__EMAIL__PASSWORD", "smtp-secret-from-env")
    monkeypatch.setenv("GATE_CHANNELS__EMAIL__PORT", "465")
    settings = Settings(**_data(sqlite_url, security="tls"))
    email = validate_settings("email", settings.channels.configured()["email"])
    assert email.port == 465 and email.password.get_secret_value() == "smtp-secret-from-env"
    assert "smtp-secret-from-env" not in repr(settings) and LINK_SECRET not in repr(email)
    channels = load_channels({"email": email}, _Gate(settings))  # type: ignore[arg-type]
    assert isinstance(channels["email"], EmailChannel)


@pytest.mark.parametrize(
    ("table", "key", "words"),
    [
        ({}, "channels.email.link_secret", "at least 32 characters"),
        ({"link_secret": "short"}, "channels.email.link_secret", "at least 32"),
        ({"link_secret": LINK_SECRET, "sender": None}, "channels.email.sender", "sender"),
        ({"link_secret": LINK_SECRET, "sender": "a\r\nBcc: x@y"}, "channels.email.sender", "one"),
        ({"link_secret": LINK_SECRET, "sender": "not an address"}, "channels.email.sender", ""),
        (
            {"link_secret": LINK_SECRET, "security": "none", "username": "u", "password": "p"},
            "channels.email.security",
            "only over TLS",
        ),
        ({"link_secret": LINK_SECRET, "username": "u"}, "channels.email.password", "both"),
        ({"link_secret": LINK_SECRET, "security": "ssl"}, "channels.email.security", ""),
        ({"link_secret": LINK_SECRET, "link-secret": "x"}, "channels.email.link-secret", ""),
    ],
)
def test_start_up_names_the_bad_key(
    sqlite_url: str, table: dict[str, Any], key: str, words: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        create_app(Settings(**_data(sqlite_url, **table)))
    assert caught.value.key == key, caught.value
    assert words in str(caught.value)


def test_outcome_emails_by_rule() -> None:
    from channels.email.settings import EmailSettings

    assert EmailSettings().sends_outcome("any")
    assert not EmailSettings(outcome_emails=False).sends_outcome("any")
    chosen = EmailSettings(outcome_emails=["refunds"])
    assert chosen.sends_outcome("refunds") and not chosen.sends_outcome("other")
    assert not chosen.sends_outcome(None)


def test_every_setting_is_documented() -> None:
    from channels.email.settings import EmailSettings

    section = docs.section("email")
    for key in EmailSettings.model_fields:
        assert f"`{key}`" in section, f"the email channel's page does not explain `{key}`"
