"""`[channels.email]`: the SMTP server gate sends through, the sender, and the link secret.

The channel's own settings model (`EmailChannel.settings_model`): `gate.delivery.channel` validates
the table with it when the channel loads, so gate's core knows nothing of these keys. Secrets
(`password`, `link_secret`) are best given as `GATE_CHANNELS__EMAIL__PASSWORD` and
`GATE_CHANNELS__EMAIL__LINK_SECRET`.
"""

from __future__ import annotations

from email.errors import HeaderParseError
from email.headerregistry import Address
from email.policy import default as default_policy
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

#: an HMAC key shorter than this is guessable offline from one link
MIN_SECRET_CHARS = 32


class EmailSettings(BaseModel):
    """`[channels.email]`."""

    # A misspelt key (`link-secret`) must stop start-up, not leave links unsigned.
    model_config = ConfigDict(extra="forbid")

    host: str = "localhost"
    #: 587 is submission with STARTTLS, the usual port for an authenticated sender
    port: int = Field(default=587, ge=1, le=65535)
    #: "starttls" (upgrade after connecting; refused if the server cannot), "tls" (implicit
    #: TLS, usually port 465), or "none" (plain text: only for a relay on this host)
    security: Literal["starttls", "tls", "none"] = "starttls"
    username: str | None = None
    password: SecretStr | None = None
    #: the From address, e.g. "gate <gate@example.com>"
    sender: str | None = None
    #: signs the links in each mail (at least 32 characters; every replica needs the same)
    link_secret: SecretStr | None = None
    #: who gets a card when a rule names no `email:` target: "approvers" (each approver of
    #: the request, with their own links), "group:NAME", or one address; unset, only rules
    #: that list `channels = ["email:..."]` send mail
    default_target: str | None = None
    #: mail the outcome to everyone who got the card: true (every rule), false, or rule names
    outcome_emails: bool | list[str] = True
    #: seconds for connecting and for each SMTP reply; the outbox retries what times out
    timeout: float = Field(default=15.0, gt=0, le=120)
    #: check the server's TLS certificate (turn off only for a self-signed relay you trust)
    validate_certs: bool = True

    @field_validator("sender")
    @classmethod
    def _one_address(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if "\r" in value or "\n" in value:
            raise ValueError("the sender must be one line")
        try:
            header: Any = default_policy.header_factory("From", value)
            addresses: list[Any] = list(header.addresses)
        except (HeaderParseError, ValueError, IndexError) as exc:
            raise ValueError(f"not an email address: {exc}") from None
        if len(addresses) != 1 or not isinstance(addresses[0], Address):
            raise ValueError("give exactly one sender address")
        if not addresses[0].addr_spec or "@" not in addresses[0].addr_spec:
            raise ValueError(f"not an email address: {value!r}")
        return value

    def sends_outcome(self, rule: str | None) -> bool:
        """Whether a request under `rule` gets an outcome email once it is decided."""
        if isinstance(self.outcome_emails, bool):
            return self.outcome_emails
        return rule is not None and rule in self.outcome_emails
