"""`[channels.discord]`: the Discord application's credentials and where its cards go.

The channel's own settings model (`DiscordChannel.settings_model`): `gate.delivery.channel`
validates the table with it when the channel loads, so gate's core knows nothing of these keys.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, SecretStr, field_validator

#: an Ed25519 public key is 32 bytes, shown in the Developer Portal as 64 hex digits
PUBLIC_KEY_HEX_LENGTH = 64


class DiscordSettings(BaseModel):
    """`[channels.discord]`."""

    # A misspelt key (`public-key`) must stop start-up, not leave callbacks unverifiable.
    model_config = ConfigDict(extra="forbid")

    bot_token: SecretStr | None = None
    public_key: str | None = None
    default_target: str | None = None
    api_url: str = "https://discord.com/api/v10"

    @field_validator("public_key")
    @classmethod
    def _hex_key(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip().lower()
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raise ValueError("the public key must be hexadecimal (64 digits)") from None
        if len(raw) * 2 != PUBLIC_KEY_HEX_LENGTH:
            raise ValueError("the public key must be 64 hexadecimal digits (32 bytes)")
        return value

    @field_validator("default_target")
    @classmethod
    def _channel_id(cls, value: str | None) -> str | None:
        if value is not None and not is_snowflake(value):
            raise ValueError("a Discord channel id is a number (Developer Mode → Copy Channel ID)")
        return value


def is_snowflake(value: object) -> bool:
    """A Discord id: up to 20 ASCII digits (a 64-bit number), as the API writes it (a string)."""
    # isdigit() alone accepts "²"; 20 digits hold any 64-bit number.
    return isinstance(value, str) and 0 < len(value) <= 20 and value.isascii() and value.isdigit()
