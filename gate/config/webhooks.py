"""Outgoing webhooks: the `[[webhooks]]` tables (a part of `gate.config.settings`'s
settings, kept apart for its size; import them from `gate.config.settings`).

Each names a receiver URL, the events it wants and the secret its messages are signed with
(Standard Webhooks: `whsec_` and base64 of 24 to 64 random bytes).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

#: what a webhook can ask for: a request made, decided by a person or a rule on timeout,
#: expired, its outcome reported by the agent, and grants made, used, revoked or expired
WebhookEvent = Literal["created", "decided", "expired", "outcome", "grant"]
EVENTS: tuple[WebhookEvent, ...] = ("created", "decided", "expired", "outcome", "grant")
#: the prefix Standard Webhooks gives a symmetric secret
SECRET_PREFIX = "whsec_"
#: the spec's bounds on a secret's decoded length, in bytes
SECRET_BYTES = (24, 64)


def loopback(host: str | None) -> bool:
    """True for a host name or address that never leaves this machine."""
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class WebhookSettings(BaseModel):
    """`[[webhooks]]`: a receiver told of requests' events, each message signed."""

    model_config = ConfigDict(extra="forbid")

    #: names the webhook in the console and the logs; unique
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")
    #: where messages are POSTed: https://, or http:// to loopback only (tests)
    url: str
    #: which events it is sent (every one when left out)
    events: list[WebhookEvent] = Field(default_factory=lambda: list(EVENTS), min_length=1)
    #: the signing secret, `whsec_...` (prefer `secret_env`: a deploy's secrets stay out of
    #: the file)
    secret: SecretStr | None = None
    #: the environment variable holding the signing secret
    secret_env: str | None = None
    #: seconds to wait for the receiver's answer
    timeout_seconds: float = Field(default=10.0, gt=0, le=30)
    #: attempts before a message is dead (shown in the console, re-sendable from there)
    max_attempts: int = Field(default=8, ge=1, le=50)
    #: the wait before the second attempt; each later one waits twice the one before, up to
    #: an hour (8 attempts span about 10 minutes from the default 5 seconds)
    retry_base_seconds: float = Field(default=5.0, gt=0, le=3600)

    @field_validator("url")
    @classmethod
    def _receiver_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError("url must be the receiver's https:// URL")
        if parts.username or parts.password:
            raise ValueError("url must not carry a user name or password (it is shown and logged)")
        if parts.scheme == "http" and not loopback(parts.hostname):
            raise ValueError(
                "url must use https:// (http:// only to loopback, for testing): a webhook "
                "carries who approved what, and its signature does not hide it"
            )
        return value

    @model_validator(mode="after")
    def _one_secret(self) -> WebhookSettings:
        if (self.secret is None) == (self.secret_env is None):
            raise ValueError("give exactly one of `secret` or `secret_env`")
        if self.secret_env is not None:
            value = os.environ.get(self.secret_env, "").strip()
            if not value:
                raise ValueError(
                    f"secret_env: the environment variable {self.secret_env} is not set (or "
                    "is empty); set it to the webhook's whsec_ secret"
                )
            self.secret = SecretStr(value)
        assert self.secret is not None
        problem = _secret_problem(self.secret.get_secret_value())
        if problem is not None:
            raise ValueError(problem)
        self.events = list(dict.fromkeys(self.events))
        return self

    @property
    def signing_secret(self) -> str:
        """The `whsec_` secret (set from the file or the environment by now)."""
        assert self.secret is not None  # _one_secret made sure
        return self.secret.get_secret_value()


def _secret_problem(secret: str) -> str | None:
    """Why `secret` is no Standard Webhooks secret (None: it is one)."""
    how = (
        'make one with: python -c "import base64,os;'
        "print('whsec_'+base64.b64encode(os.urandom(32)).decode())\""
    )
    if not secret.startswith(SECRET_PREFIX):
        return f"the secret must start with {SECRET_PREFIX} (Standard Webhooks); {how}"
    try:
        raw = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        return f"the secret after {SECRET_PREFIX} must be base64; {how}"
    low, high = SECRET_BYTES
    if not low <= len(raw) <= high:
        return f"the secret must decode to {low} to {high} bytes, not {len(raw)}; {how}"
    return None
