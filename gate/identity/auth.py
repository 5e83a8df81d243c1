"""Who is calling: API bearer tokens (agents, approvers, admins)."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from gate.base.errors import Forbidden, Unauthenticated
from gate.base.logs import note_principal
from gate.config.settings import ApproverSettings, Settings
from gate.identity.authmethod import LOCAL, AuthMethod

Role = Literal["agent", "approver", "admin"]
ANONYMOUS_NAME = "local"


@dataclass(frozen=True)
class Principal:
    """An authenticated caller."""

    name: str
    role: Role
    approver: ApproverSettings | None = None
    anonymous: bool = False
    #: how this caller was authenticated (a token by name, or local mode)
    auth: AuthMethod | None = None

    @property
    def can_submit(self) -> bool:
        return self.role in ("agent", "admin")

    @property
    def can_decide(self) -> bool:
        return self.role in ("approver", "admin")

    @property
    def actor_name(self) -> str:
        """The name recorded on votes and audit rows."""
        return self.approver.name if self.approver else self.name

    def require(self, *roles: Role) -> None:
        """Raise 403 unless the caller has one of `roles`."""
        if self.role not in roles:
            raise Forbidden(
                f"a token with role {self.role!r} cannot do this (needs {' or '.join(roles)})",
                code="wrong_role",
            )


class TokenBook:
    """Looks up bearer tokens by their SHA-256, so no token is compared character by character."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._by_digest: dict[str, Principal] = {}
        for entry in settings.tokens:
            digest = entry.token_sha256 or sha256_hex(entry.token.get_secret_value())  # type: ignore[union-attr]
            approver = settings.approver(entry.approver) if entry.approver else None
            how = AuthMethod("token", token=entry.name)
            self._by_digest[digest.lower()] = Principal(entry.name, entry.role, approver, auth=how)
        self.anonymous_allowed = anonymous_allowed(settings)

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal for an `Authorization` header value; raises 401."""
        if not authorization:
            if self.anonymous_allowed:
                note_principal(ANONYMOUS_NAME)
                return Principal(ANONYMOUS_NAME, "admin", anonymous=True, auth=LOCAL)
            raise Unauthenticated(
                "missing bearer token: send 'Authorization: Bearer <token>' "
                "with a token from [[tokens]] in gate.toml",
                code="missing_token",
            )
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise Unauthenticated(
                "the Authorization header must be 'Bearer <token>'", code="bad_authorization_header"
            )
        digest = sha256_hex(value.strip())
        for known, principal in self._by_digest.items():
            if hmac.compare_digest(known, digest):
                note_principal(principal.name)
                return principal
        raise Unauthenticated("unknown or revoked token", code="invalid_token")


def anonymous_allowed(settings: Settings) -> bool:
    """Token-less local mode: no [[tokens]], bound to loopback, and not switched off."""
    server = settings.server
    return not settings.tokens and server.allow_anonymous_on_loopback and server.is_loopback


def local_web_user(settings: Settings) -> ApproverSettings | None:
    """The web console's user in local mode, when nobody could sign in any other way.

    With no tokens, a loopback bind, no proxy header and no approver password, the person at
    this machine is the only possible approver: they act as `local`, like the API's
    token-less caller, and every page says so.
    """
    if not anonymous_allowed(settings) or settings.server.trusted_user_header:
        return None
    if any(a.password_hash for a in settings.approvers):
        return None
    return settings.approver(ANONYMOUS_NAME) or ApproverSettings(name=ANONYMOUS_NAME)


def sha256_hex(token: str) -> str:
    """Hex SHA-256 of a token, as `token_sha256` in gate.toml expects."""
    return hashlib.sha256(token.encode()).hexdigest()


# -- web sign-in ----------------------------------------------------------------------------


def hash_password(password: str) -> str:
    """An argon2id hash for `[[approvers]] password_hash`."""
    from argon2 import PasswordHasher

    return str(PasswordHasher().hash(password))


def verify_password(password_hash: str, password: str) -> bool:
    """True when `password` matches the argon2 `password_hash`."""
    from argon2 import PasswordHasher
    from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

    try:
        return bool(PasswordHasher().verify(password_hash, password))
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


def dummy_hash(settings: Settings) -> str:
    """A hash of a random password with the argon2 parameters most approvers' hashes use.

    Verifying against it when a name is unknown (or has no password) costs what a wrong
    password for a real name costs, so timing does not tell which names exist. A fixed
    dummy at the library's defaults would not: hashes made with other parameters (cheaper,
    or costlier) would make unknown names stand out.
    """
    import secrets

    from argon2 import Parameters, PasswordHasher, extract_parameters
    from argon2.exceptions import InvalidHashError

    found: list[Parameters] = []
    for approver in settings.approvers:
        if approver.password_hash is not None:
            try:
                found.append(extract_parameters(approver.password_hash.get_secret_value()))
            except InvalidHashError:
                continue
    hasher = PasswordHasher.from_parameters(max(found, key=found.count)) if found else None
    return str((hasher or PasswordHasher()).hash(secrets.token_urlsafe(16)))


class PasswordCheck:
    """Checks web sign-in passwords; an unknown name costs the same as a wrong password."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @cached_property
    def dummy(self) -> str:
        """Made on first use, so a gate nobody signs in to never spends a hash on it."""
        return dummy_hash(self.settings)

    def __call__(self, username: str, password: str) -> ApproverSettings | None:
        """The approver signing in with `username` and `password`, or None."""
        approver = self.settings.approver(username.strip())
        stored = approver.password_hash if approver else None
        if approver is None or stored is None:
            verify_password(self.dummy, password)
            return None
        return approver if verify_password(stored.get_secret_value(), password) else None


def new_csrf_token() -> str:
    """A fresh CSRF token for a web session."""
    import secrets

    return secrets.token_urlsafe(32)


def csrf_matches(expected: str | None, given: str | None) -> bool:
    """Constant-time comparison of the session's CSRF token with the form's."""
    if not expected or not given:
        return False
    # A form field may hold anything, lone surrogates included: compare bytes that always
    # encode, so a hostile value is a mismatch, never an error.
    return hmac.compare_digest(
        expected.encode("utf-8", "surrogatepass"), given.encode("utf-8", "surrogatepass")
    )
