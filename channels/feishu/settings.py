"""`[channels.feishu]`: the Feishu app's credentials and where its cards go.

The channel's own settings model (`FeishuChannel.settings_model`): `gate.delivery.channel` validates
the table with it when the channel loads, so gate's core knows nothing of these keys.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, SecretStr


class FeishuSettings(BaseModel):
    """`[channels.feishu]`."""

    # A misspelt key (`encrypt-key`) must stop start-up, not silently leave callbacks unsigned.
    model_config = ConfigDict(extra="forbid")

    app_id: str | None = None
    app_secret: SecretStr | None = None
    verification_token: SecretStr | None = None
    encrypt_key: SecretStr | None = None
    default_target: str | None = None
    base_url: str = "https://open.feishu.cn"
