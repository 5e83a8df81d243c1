"""`[channels.telegram]`: the bot's token, the webhook's secret, the key of the buttons, and
where cards go.

The channel's own settings model (`TelegramChannel.settings_model`): `gate.delivery.channel`
validates the table with it when the channel loads, so gate's core knows nothing of these keys.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, SecretStr, field_validator

#: what setWebhook accepts as secret_token: 1-256 characters A-Z, a-z, 0-9, _ and -
WEBHOOK_SECRET = re.compile(r"[A-Za-z0-9_-]{16,256}")
#: a bot token is "<bot id>:<secret>"; the id is how the bot recognises its own messages
BOT_TOKEN = re.compile(r"([0-9]{1,20}):[A-Za-z0-9_-]{20,100}")


class TelegramSettings(BaseModel):
    """`[channels.telegram]`."""

    # A misspelt key (`webhook-secret`) must stop start-up, not silently leave the webhook open.
    model_config = ConfigDict(extra="forbid")

    #: from @BotFather: "123456789:AA..."
    bot_token: SecretStr
    #: the secret_token given to setWebhook; Telegram sends it in every webhook request
    webhook_secret: SecretStr
    #: the key of the buttons' callback data and the cards' codes (any 32+ random characters);
    #: changing it makes the buttons and codes on cards already posted stop working
    callback_secret: SecretStr
    #: the chat cards go to when a rule names none: a group's id ("-100...") or a user's
    default_target: str | None = None
    #: the bot's @username, without the @: `/approve@this_bot` is for us, `@other_bot` is not
    bot_username: str | None = None
    api_url: str = "https://api.telegram.org"

    @field_validator("bot_token")
    @classmethod
    def _bot_token(cls, value: SecretStr) -> SecretStr:
        if not BOT_TOKEN.fullmatch(value.get_secret_value()):
            raise ValueError("not a bot token from @BotFather (<digits>:<letters>)")
        return value

    @field_validator("webhook_secret")
    @classmethod
    def _webhook_secret(cls, value: SecretStr) -> SecretStr:
        if not WEBHOOK_SECRET.fullmatch(value.get_secret_value()):
            raise ValueError("16-256 characters of A-Z, a-z, 0-9, _ and - (what setWebhook takes)")
        return value

    @field_validator("callback_secret")
    @classmethod
    def _callback_secret(cls, value: SecretStr) -> SecretStr:
        if len(value.get_secret_value()) < 32:
            raise ValueError("at least 32 characters (it keys the buttons' encryption)")
        return value

    @property
    def bot_id(self) -> int:
        """The bot's own user id: the digits before the token's colon."""
        found = BOT_TOKEN.fullmatch(self.bot_token.get_secret_value())
        assert found is not None  # checked when the settings were read
        return int(found.group(1))
