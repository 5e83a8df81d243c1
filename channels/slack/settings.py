"""`[channels.slack]`: the Slack app's credentials and where its cards go.

The channel's own settings model (`SlackChannel.settings_model`): `gate.delivery.channel` validates
the table with it when the channel loads, so gate's core knows nothing of these keys.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, SecretStr


class SlackSettings(BaseModel):
    """`[channels.slack]`."""

    # A misspelt key (`signing-secret`) must stop start-up, not leave callbacks unverifiable.
    model_config = ConfigDict(extra="forbid")

    bot_token: SecretStr | None = None
    signing_secret: SecretStr | None = None
    default_target: str | None = None
    api_url: str = "https://slack.com/api/"
