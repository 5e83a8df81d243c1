"""`[channels.slack]` settings: secrets from the environment, and a clear failure without them."""

from __future__ import annotations

import pytest

from channels.slack import SlackChannel
from gate.app import create_app
from gate.base.errors import ConfigError
from gate.config.settings import Settings
from gate.delivery.channel import load_channels, validate_settings
from tests.support import config as cfg
from tests.support.fake_slack import TOKEN


class _NoGate:
    settings = None


def _data(sqlite_url: str, **slack: str) -> dict[str, object]:
    data = cfg.settings_data(sqlite_url)
    data["channels"]["slack"] = {"default_target": "C0APPROVALS", **slack}
    return data


def test_secrets_come_from_the_environment(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATE_CHANNELS__SLACK__BOT_TOKEN", TOKEN)
    monkeypatch.setenv("GATE_CHANNELS__SLACK__SIGNING_SECRET", "from-env")
    monkeypatch.setenv("GATE_CHANNELS__SLACK__API_URL", "http://127.0.0.1:9/api/")
    settings = Settings(**_data(sqlite_url))
    slack = validate_settings("slack", settings.channels.configured()["slack"])
    assert slack is not None and slack.default_target == "C0APPROVALS"
    assert slack.bot_token is not None and slack.bot_token.get_secret_value() == TOKEN
    assert slack.api_url == "http://127.0.0.1:9/api/"
    assert "from-env" not in repr(settings)  # secrets stay out of logs and tracebacks
    channels = load_channels({"slack": slack}, _NoGate())  # type: ignore[arg-type]
    assert isinstance(channels["slack"], SlackChannel)


@pytest.mark.parametrize(
    ("slack", "key"),
    [
        ({"signing_secret": "s"}, "channels.slack.bot_token"),
        ({"bot_token": TOKEN}, "channels.slack.signing_secret"),
        ({"bot_token": TOKEN, "signing_secret": "  "}, "channels.slack.signing_secret"),
    ],
)
def test_missing_secrets_stop_start_up_naming_the_key(
    sqlite_url: str, slack: dict[str, str], key: str
) -> None:
    with pytest.raises(ConfigError) as info:
        create_app(Settings(**_data(sqlite_url, **slack)))
    assert info.value.key == key
    assert "required" in str(info.value)
