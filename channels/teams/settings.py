"""`[channels.teams]`: the bot's app registration, its tenant, and where its cards go.

The channel's own settings model (`TeamsChannel.settings_model`): `gate.delivery.channel` validates
the table with it when the channel loads, so gate's core knows nothing of these keys. Every
URL gate talks to is a setting, so tests (and sovereign clouds) can point it elsewhere; the
defaults are the public Azure cloud's, as the Bot Framework SDKs name them
(`AuthenticationConstants`, see tests/teams/fixtures/SOURCES.md).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, SecretStr, field_validator

OPENID_METADATA_URL = "https://login.botframework.com/v1/.well-known/openidconfiguration"
#: the `iss` of every token the Bot Connector service sends to a bot
CHANNEL_ISSUER = "https://api.botframework.com"
#: multi-tenant bots get their app token from the botframework.com tenant
TOKEN_URL = "https://login.microsoftonline.com/botframework.com/oauth2/v2.0/token"
TOKEN_SCOPE = "https://api.botframework.com/.default"
#: Teams' global service URL; an activity names the regional one (`.../amer/`, `.../emea/`)
SERVICE_URL = "https://smba.trafficmanager.net/teams/"


class TeamsSettings(BaseModel):
    """`[channels.teams]`."""

    # A misspelt key (`app-password`) must stop start-up, not leave a check switched off.
    model_config = ConfigDict(extra="forbid")

    #: the bot's Microsoft App ID (the app registration's Application (client) ID)
    app_id: str
    #: a client secret of that app registration
    app_password: SecretStr
    #: the Entra tenant (Directory ID) whose people may click; other tenants get a 401
    tenant_id: str
    #: the conversation cards go to (a channel's or chat's id, `19:...`)
    default_target: str | None = None
    #: the only host gate sends its app token to (never an activity's own serviceUrl)
    service_url: str = SERVICE_URL
    openid_metadata_url: str = OPENID_METADATA_URL
    issuer: str = CHANNEL_ISSUER
    token_url: str = TOKEN_URL
    token_scope: str = TOKEN_SCOPE

    @field_validator("service_url", "openid_metadata_url", "token_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError("must be an http(s) URL")
        return value

    @field_validator("app_id", "tenant_id")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()
