"""The tables of what approvers own beside requests: console sign-ins and their rate-limit
buckets, passkeys and their challenges, chat identities bound outside gate.toml and their link
codes. `gate.store.tables` re-exports them, so the schema is one import."""

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import JSON, Column, Field, SQLModel

from gate.base.statuses import new_id, utcnow
from gate.store.columns import UTCDateTime


class WebSignIn(SQLModel, table=True):
    """A web-console sign-in: the session cookie names it, sign-out revokes it for good.

    The id is the SHA-256 of the random session id the signed cookie carries, so the table
    alone (a backup, a read replica) holds nothing a browser could present.
    """

    __tablename__ = "web_sign_in"

    id: str = Field(primary_key=True, max_length=64)
    approver: str = Field(max_length=200, index=True)
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False)
    )
    expires_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False, index=True))
    revoked_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    #: how the person signed in (`gate.identity.authmethod.AuthMethod.to_json`)
    auth: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    #: single sign-on: SHA-256 of the nonce this sign-in consumed; unique, so an ID token
    #: replayed with a used nonce signs nobody in
    nonce: str | None = Field(default=None, max_length=64, unique=True, index=True)


class SignInBucket(SQLModel, table=True):
    """A sign-in rate limit's token bucket (per client address, per user name), shared by
    every replica on the database so that N replicas do not give a guesser N times the rate.

    `tokens` as of `at`; one more accrues every refill interval up to the burst
    (`gate.web.signin`). A bucket idle long enough to be full again is deleted."""

    __tablename__ = "sign_in_bucket"

    key: str = Field(primary_key=True, max_length=300)
    tokens: float
    at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False, index=True))


class Passkey(SQLModel, table=True):
    """An approver's WebAuthn credential (a passkey or security key), registered from the
    console (`gate.web.passkeys`). Kept after removal, as the record of who added and removed
    it and when: a vote names the credential it was signed with."""

    __tablename__ = "passkey"
    __table_args__ = (sa.Index("ix_passkey_approver", "approver", "removed_at"),)

    id: str = Field(default_factory=new_id, primary_key=True, max_length=26)
    #: the authenticator's credential id, base64url without padding (at most 1023 bytes)
    credential_id: str = Field(max_length=1400, unique=True)
    approver: str = Field(max_length=200)
    #: the approver's name for it ("work laptop", "YubiKey")
    label: str = Field(max_length=100)
    #: the COSE public key the authenticator gave at registration
    public_key: bytes = Field(sa_column=Column(sa.LargeBinary, nullable=False))
    #: the authenticator's signature counter last seen (0: it keeps none)
    sign_count: int = Field(default=0, sa_column=Column(sa.BigInteger, nullable=False))
    transports: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))
    #: how the approver who added it was signed in (`AuthMethod.to_json`)
    created_auth: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    last_used_at: datetime | None = Field(
        default=None, sa_column=Column(UTCDateTime, nullable=True)
    )
    removed_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    removed_by: str | None = Field(default=None, max_length=200)


class PasskeyChallenge(SQLModel, table=True):
    """A WebAuthn challenge gate issued and has not yet seen answered: single-use (taken by a
    DELETE that must find it) and short-lived (`expires_at`). An approval's also names the
    request and the hash of the arguments its signature is to cover."""

    __tablename__ = "passkey_challenge"

    #: the server nonce (random, base64url)
    nonce: str = Field(primary_key=True, max_length=64)
    approver: str = Field(max_length=200)
    #: "register" or "approve"
    purpose: str = Field(max_length=16)
    request_id: str | None = Field(default=None, max_length=26)
    args_hash: str | None = Field(default=None, max_length=64)
    expires_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False, index=True))


class ChatIdentity(SQLModel, table=True):
    """An approver's id on a chat platform, bound from outside gate.toml: by a claim of the
    identity provider at their single sign-on (`idp_claim`) or by a one-time link code they
    sent from the platform (`link`). Kept after it ends (`unbound_at`), as the record of who
    bound and unbound what, when."""

    __tablename__ = "chat_identity"
    __table_args__ = (
        # one person per platform id at a time: a click maps to one approver
        sa.Index(
            "uq_chat_identity_active",
            "platform",
            "user_id",
            unique=True,
            sqlite_where=sa.text("unbound_at IS NULL"),
            postgresql_where=sa.text("unbound_at IS NULL"),
        ),
        sa.Index("ix_chat_identity_approver", "approver", "id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    approver: str = Field(max_length=200)
    #: the channel's name (`slack`, `teams`...)
    platform: str = Field(max_length=50)
    user_id: str = Field(max_length=200)
    #: "idp_claim" or "link" (`gate.identity.authmethod.BoundBy`)
    bound_by: str = Field(max_length=16)
    #: idp_claim: the claim's name; link: "console"
    source: str | None = Field(default=None, max_length=200)
    bound_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))
    unbound_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    #: who ended it: the approver's name, or "idp" when a newer claim replaced it
    unbound_by: str | None = Field(default=None, max_length=200)


class IdentityLinkCode(SQLModel, table=True):
    """A one-time code the console gave a signed-in approver to send from a chat platform
    (`gate.decisions.identities`). Only its SHA-256 is kept; used once, before `expires_at`."""

    __tablename__ = "identity_link_code"

    code_hash: str = Field(primary_key=True, max_length=64)
    approver: str = Field(max_length=200)
    platform: str = Field(max_length=50)
    created_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))
    expires_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False, index=True))
    used_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
