"""Single sign-on settings: the `[oidc]` table and a rule's `step_up` (a part of
`gate.config.settings`'s settings, kept apart for its size; import them from
`gate.config.settings`)."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

#: ID token signature algorithms gate accepts (asymmetric only: never `none`, never an HMAC
#: keyed with the client secret, which anyone holding the secret could forge)
#: the chat platforms (channel names) whose ids the provider's claims may bind
CHAT_PLATFORMS = ("slack", "teams", "telegram", "discord", "wecom", "feishu")
SIGNING_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384")


class OidcSettings(BaseModel):
    """`[oidc]`: console sign-in through an OpenID Connect identity provider."""

    model_config = ConfigDict(extra="forbid")

    #: the provider's issuer URL; its discovery document is read from
    #: `<issuer>/.well-known/openid-configuration` and must name this exact issuer
    issuer: str
    client_id: str
    client_secret: SecretStr | None = None
    #: the environment variable holding the client secret (a deploy's secrets stay out of
    #: the file)
    client_secret_env: str | None = None
    #: the ID token claim that names the approver: `email` (matched to `[[approvers]] email`,
    #: any letter case) or `sub` (matched to `[[approvers]] oidc = "<subject>"`)
    approver_claim: Literal["email", "sub"] = "email"
    #: with `approver_claim = "email"`, the provider must say it checked the address
    #: (`email_verified = true`); set false only for a provider that never sends it
    require_verified_email: bool = True
    #: the claim listing the person's groups at the provider (`groups`, `roles`); unset: none
    groups_claim: str | None = None
    #: provider group -> gate approver groups it confers (`"okta-finance" = ["finance"]`)
    group_map: dict[str, list[str]] = Field(default_factory=dict)
    #: platform -> the ID token claim holding the person's id there (`slack = "slack_id"`):
    #: stored as the approver's chat identity when they sign in (`gate.decisions.identities`)
    identity_claims: dict[str, str] = Field(default_factory=dict)
    scopes: list[str] = Field(default_factory=lambda: ["openid", "email", "profile"])
    #: the sign-in button's words
    label: str = "Sign in with single sign-on"
    #: clock difference tolerated when checking `exp`, `iat` and `auth_time`
    leeway_seconds: int = Field(default=60, ge=0, le=300)
    #: an unknown key id makes gate fetch the provider's keys again at most this often
    jwks_refresh_seconds: float = Field(default=30.0, ge=0)
    #: seconds to wait for the provider (discovery, keys, token endpoint)
    http_timeout_seconds: float = Field(default=10.0, gt=0)

    @field_validator("issuer")
    @classmethod
    def _issuer_is_a_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("https", "http") or not parts.netloc:
            raise ValueError("issuer must be the provider's https:// URL")
        if parts.scheme == "http" and parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("issuer must use https:// (http:// only on loopback, for testing)")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _one_secret(self) -> OidcSettings:
        if (self.client_secret is None) == (self.client_secret_env is None):
            raise ValueError("give exactly one of `client_secret` or `client_secret_env`")
        if self.client_secret_env is not None:
            value = os.environ.get(self.client_secret_env, "").strip()
            if not value:
                raise ValueError(
                    f"client_secret_env: the environment variable {self.client_secret_env} is "
                    "not set (or is empty); set it to the client secret from your provider"
                )
            self.client_secret = SecretStr(value)
        if "openid" not in self.scopes:
            raise ValueError("scopes must include 'openid'")
        unknown = sorted(set(self.identity_claims) - set(CHAT_PLATFORMS))
        if unknown:
            raise ValueError(
                f"identity_claims: {', '.join(unknown)} is not a chat platform gate binds ids "
                f"on (one of {', '.join(CHAT_PLATFORMS)})"
            )
        if self.group_map and not self.groups_claim:
            raise ValueError("group_map needs groups_claim (the claim listing the groups)")
        return self

    @property
    def secret(self) -> str:
        """The client secret (set from the file or the environment by now)."""
        assert self.client_secret is not None  # _one_secret made sure
        return self.client_secret.get_secret_value()


class StepUpSettings(BaseModel):
    """A rule's `step_up`: an approval counts only when it is strong (RFC 9470's idea).

    Two demands, each on its own or both: a fresh single sign-on (`max_age`, with `acr`), and
    a WebAuthn assertion (`webauthn = true`: a passkey or security key signs a challenge bound
    to the request and its arguments, `gate.identity.passkeys`). Chat cards then link to the
    console instead of offering buttons. Without `webauthn`, `max_age` defaults to five
    minutes; with it, a fresh sign-on is asked for only when `max_age` is written."""

    model_config = ConfigDict(extra="forbid")

    #: the longest time since the approver last authenticated at the provider (`auth_time`);
    #: None (only with `webauthn`): no single sign-on demanded
    max_age: timedelta | None = None
    #: authentication context classes accepted (e.g. a phishing-resistant MFA); empty: any
    acr: list[str] = Field(default_factory=list)
    #: the approval must carry a WebAuthn assertion over this request and its arguments
    webauthn: bool = False

    @field_validator("max_age")
    @classmethod
    def _positive(cls, value: timedelta | None) -> timedelta | None:
        # "5m" is read by `RuleSettings` (gate.config.settings's parse_duration) before this
        if value is not None and value <= timedelta(0):
            raise ValueError("max_age must be positive")
        return value

    @field_validator("acr", mode="before")
    @classmethod
    def _acr_list(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _some_demand(self) -> StepUpSettings:
        if self.max_age is None and not self.webauthn:
            self.max_age = timedelta(minutes=5)  # `step_up = {}`: a fresh sign-on, as before
        if self.acr and self.max_age is None:
            raise ValueError("acr is a single sign-on demand: give max_age with it")
        return self

    @property
    def needs_sign_on(self) -> bool:
        """Whether an approval needs a fresh single sign-on (and so `[oidc]`)."""
        return self.max_age is not None
