"""`[channels.wecom]`: the self-built WeCom app's credentials and where its cards go.

The channel's own settings model (`WeComChannel.settings_model`): `gate.delivery.channel` validates
the table with it when the channel loads, so gate's core knows nothing of these keys.
"""

from __future__ import annotations

import base64
import binascii

from pydantic import BaseModel, ConfigDict, SecretStr, field_validator


class WeComSettings(BaseModel):
    """`[channels.wecom]`."""

    # A misspelt key (`encoding-aes-key`) must stop start-up, not leave callbacks unverifiable.
    model_config = ConfigDict(extra="forbid")

    #: the company's CorpID (My Company > Company Information); also the callbacks' receive id
    corp_id: str | None = None
    #: the self-built app's AgentId
    agent_id: int | None = None
    #: the app's Secret (for `gettoken`)
    secret: SecretStr | None = None
    #: "Receive messages via API": the Token that signs callbacks
    token: SecretStr | None = None
    #: "Receive messages via API": the 43-character EncodingAESKey that encrypts them
    encoding_aes_key: SecretStr | None = None
    #: who gets cards by default: "alice|bob" (userids), "party:2", "tag:3" or "@all"
    default_target: str | None = None
    api_url: str = "https://qyapi.weixin.qq.com"

    @field_validator("encoding_aes_key")
    @classmethod
    def _aes_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        if len(aes_key(value.get_secret_value())) != 32:
            raise ValueError("must be the 43-character EncodingAESKey from the app's API page")
        return value


def aes_key(encoding_aes_key: str) -> bytes:
    """The 32-byte AES key: base64-decode(EncodingAESKey + "="); b"" when it is not one."""
    if len(encoding_aes_key) != 43:
        return b""
    try:
        return base64.b64decode(encoding_aes_key + "=", validate=True)
    except (binascii.Error, ValueError):
        return b""
