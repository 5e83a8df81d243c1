"""`[channels.teams]`: what start-up refuses, naming the key, and what the README documents."""

from __future__ import annotations

from typing import Any

import pytest

from channels.teams import TeamsChannel
from channels.teams.settings import TeamsSettings
from gate.base.errors import ConfigError
from gate.config.settings import Settings
from gate.delivery.channel import validate_settings
from tests.support import config as cfg
from tests.support import docs
from tests.support.fake_teams import APP_ID, APP_PASSWORD, TENANT_ID

GOOD = {"app_id": APP_ID, "app_password": APP_PASSWORD, "tenant_id": TENANT_ID}


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"app_password": "x", "tenant_id": TENANT_ID}, "channels.teams.app_id"),
        ({"app_id": APP_ID, "tenant_id": TENANT_ID}, "channels.teams.app_password"),
        ({"app_id": APP_ID, "app_password": "x"}, "channels.teams.tenant_id"),
        ({**GOOD, "tenant_id": "  "}, "channels.teams.tenant_id"),
        ({**GOOD, "app-password": "x"}, "channels.teams.app-password"),
        ({**GOOD, "service_url": "ftp://connector"}, "channels.teams.service_url"),
        (
            {**GOOD, "openid_metadata_url": "login.botframework.com"},
            "channels.teams.openid_metadata_url",
        ),
    ],
)
def test_a_bad_table_stops_start_up_naming_the_key(table: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as refused:
        validate_settings("teams", table)
    assert refused.value.key == key


def test_the_defaults_are_the_public_clouds() -> None:
    settings = validate_settings("teams", GOOD)
    assert isinstance(settings, TeamsSettings)
    assert settings.openid_metadata_url == (
        "https://login.botframework.com/v1/.well-known/openidconfiguration"
    )
    assert settings.issuer == "https://api.botframework.com"
    assert (
        settings.token_url == "https://login.microsoftonline.com/botframework.com/oauth2/v2.0/token"
    )
    assert settings.token_scope == "https://api.botframework.com/.default"
    assert TeamsChannel.display_name == "Microsoft Teams"
    assert "app-password-for-tests" not in repr(settings)  # a SecretStr


def test_every_setting_is_documented_in_the_docs() -> None:
    page = docs.section("teams")
    for key in TeamsSettings.model_fields:
        assert f"`{key}`" in page, key
    assert "# Approve from Microsoft Teams" in page


def test_the_client_secret_comes_from_the_environment(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATE_CHANNELS__TEAMS__APP_PASSWORD", "secret-from-env")
    data = cfg.settings_data(sqlite_url)
    data["channels"] = {"teams": {"app_id": APP_ID, "tenant_id": TENANT_ID}}
    settings = Settings(**data)
    teams = validate_settings("teams", settings.channels.configured()["teams"])
    assert isinstance(teams, TeamsSettings)
    assert teams.app_password.get_secret_value() == "secret-from-env"
    assert "secret-from-env" not in repr(settings)


@pytest.mark.parametrize(
    "object_id", ["9D3E08F9-A7AE-43AA-A4D3-DE3F319A8A9C", "alice@contoso.com", "Alice Smith"]
)
def test_an_approver_id_no_press_could_match_stops_start_up(
    sqlite_url: str, object_id: str
) -> None:
    """A press carries the lowercase object id and gate compares exactly: an id in capitals,
    a UPN or a display name would leave that approver unable to act from Teams, silently."""
    from gate.app import create_app

    data = cfg.settings_data(sqlite_url)
    data["approvers"][0]["teams"] = object_id
    data["channels"] = {"teams": GOOD}
    with pytest.raises(ConfigError) as caught:
        create_app(Settings(**data))
    assert caught.value.key == "approvers.teams" and "alice" in str(caught.value)
