"""The people and credentials of gate.toml: `[[approvers]]` and `[[tokens]]` (a part of
`gate.config.settings`'s settings, kept apart for its size; import them from
`gate.config.settings`)."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator


class ApproverSettings(BaseModel):
    """One `[[approvers]]` entry: a person, whichever surface they use.

    Extra keys name that person's id on a channel (`slack = "U01..."`, `feishu = "ou_..."`),
    so a new channel needs no change here.
    """

    model_config = ConfigDict(extra="allow")

    name: str
    groups: list[str] = Field(default_factory=list)
    password_hash: SecretStr | None = None
    email: str | None = None

    def identity(self, channel: str) -> str | None:
        """This person's user id on `channel`, if configured.

        An extra key named like the channel (`slack = "U01..."`), or else a declared text
        field of that name (`email`, for the email channel); never `name`, which is the
        person's gate name, not an id on a channel.
        """
        value = (self.model_extra or {}).get(channel)
        if value is None and channel in type(self).model_fields and channel != "name":
            declared = getattr(self, channel)
            value = declared if isinstance(declared, str) else None
        return str(value) if value is not None else None

    def has_email(self, address: str) -> bool:
        """True when `address` is this person's email, in any letter case (as mail is)."""
        return self.email is not None and self.email.casefold() == address.strip().casefold()

    def identities(self) -> set[str]:
        """Every name this person goes by: gate name (also their web sign-in), email, and
        each channel id."""
        ids = {self.name}
        if self.email:
            ids.add(self.email)
        ids.update(str(v) for v in (self.model_extra or {}).values() if v is not None)
        return ids

    @model_validator(mode="after")
    def _channel_ids_are_text(self) -> ApproverSettings:
        """Every channel id is kept as text: `telegram = 123` (a TOML integer) becomes "123".

        `identity` (who clicked) and `identities` (who must not approve their own call) must
        read the same value, or an id that maps a click to this person would be missed by the
        self-approval check. A value that is not text or a whole number is no id at all.
        """
        extra = self.model_extra or {}
        for key, value in list(extra.items()):
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise ValueError(
                    f"{key}: a channel id must be text or a whole number, not {value!r}"
                )
            extra[key] = str(value)
        return self


class TokenSettings(BaseModel):
    """One `[[tokens]]` entry: an API bearer token with a role."""

    model_config = ConfigDict(extra="forbid")

    name: str
    role: Literal["agent", "approver", "admin"]
    token: SecretStr | None = None
    token_sha256: str | None = None
    #: the environment variable holding the token (a deploy's secrets stay out of the file)
    token_env: str | None = None
    approver: str | None = None

    @model_validator(mode="after")
    def _one_secret(self) -> TokenSettings:
        given = [self.token, self.token_sha256, self.token_env]
        if sum(value is not None for value in given) != 1:
            raise ValueError("give exactly one of `token`, `token_sha256` or `token_env`")
        if self.token_env is not None:
            value = os.environ.get(self.token_env, "").strip()
            if not value:
                raise ValueError(
                    f"token_env: the environment variable {self.token_env} is not set (or is "
                    "empty); set it to the token, e.g. from `gate tokens new`"
                )
            self.token = SecretStr(value)
        if self.role == "approver" and not self.approver:
            raise ValueError('an approver token needs `approver = "<name>"`')
        return self
