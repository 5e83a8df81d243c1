"""How a person proved who they are when they acted: one typed value every surface records.

A vote carries it (the `vote.auth` column), the audit event of the vote or decision carries
it (`detail["auth"]`), the request page and the API's view show it, and a rule's step-up
(`gate.policy.stepup`) and any vote filter read it. It is built only by the code that did the
authenticating (the token book, the sign-in routes, the chat pipeline), never from what a
caller claims.

Kinds:

* `password`: a console sign-in with an `[[approvers]]` password;
* `proxy`: the trusted sign-in proxy's header (`[server].trusted_user_header`);
* `oidc`: a console sign-in through the identity provider (`[oidc]`), with the ID token's
  issuer, subject, `auth_time` and `acr`;
* `chat`: a click on a chat card, with the platform, the platform's user id and how that id
  was bound to the approver (`configured_id`: a key in `[[approvers]]`; `idp_claim`: a claim
  of the identity provider at the approver's single sign-on; `link`: a one-time code from
  the console sent from the platform; `email`: the approver's email address);
* `token`: an API bearer token (`[[tokens]]`), by name;
* `local`: token-less local mode on loopback (the person at this machine);
* `webauthn`: a console approval signed by a passkey or security key over this request and
  its arguments (`gate.identity.passkeys`), with the credential's id; `signed_in_by` is the
  console sign-in it was made in (and, for `oidc`, that sign-in's issuer, subject,
  `auth_time` and `acr` stay on it, for a rule that demands both).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal, get_args

AuthKind = Literal["password", "proxy", "oidc", "chat", "token", "local", "webauthn"]
BoundBy = Literal["configured_id", "idp_claim", "link", "email"]
KINDS: tuple[str, ...] = get_args(AuthKind)
_BOUND: tuple[str, ...] = get_args(BoundBy)
#: the console sign-ins a passkey's approval can be made in (`signed_in_by`)
_CONSOLE = ("password", "proxy", "oidc", "local")


@dataclass(frozen=True)
class AuthMethod:
    """How one actor was authenticated (see the module docstring for each kind)."""

    kind: AuthKind
    #: oidc: the ID token's `iss` and `sub`
    issuer: str | None = None
    subject: str | None = None
    #: oidc: when the person last authenticated at the identity provider (`auth_time`)
    auth_time: datetime | None = None
    #: oidc: the authentication context class the provider asserted (`acr`), if any
    acr: str | None = None
    #: chat: the platform (the channel's name) and the person's id on it
    platform: str | None = None
    user_id: str | None = None
    #: chat: how that id maps to the approver
    bound_by: BoundBy | None = None
    #: token: the `[[tokens]]` entry's name
    token: str | None = None
    #: webauthn: the credential's id (base64url, as the authenticator gave it)
    credential_id: str | None = None
    #: webauthn: the kind of the console sign-in the assertion was made in
    signed_in_by: AuthKind | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON stored on a vote and in the audit trail (unset fields left out)."""
        data: dict[str, Any] = {"kind": self.kind}
        names = ("issuer", "subject", "acr", "platform", "user_id", "bound_by", "token")
        for name in (*names, "credential_id", "signed_in_by"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        if self.auth_time is not None:
            data["auth_time"] = self.auth_time.isoformat()
        return data

    @classmethod
    def from_json(cls, data: Any) -> AuthMethod | None:
        """Read back what `to_json` stored; None for no record (votes cast before 0014) or one
        that is not a record this version knows (it is never guessed at)."""
        if not isinstance(data, dict) or data.get("kind") not in KINDS:
            return None
        text = {
            name: data[name] if isinstance(data.get(name), str) else None
            for name in (
                "issuer",
                "subject",
                "acr",
                "platform",
                "user_id",
                "token",
                "credential_id",
            )
        }
        bound, under = data.get("bound_by"), data.get("signed_in_by")
        return cls(
            kind=data["kind"],
            auth_time=_instant(data.get("auth_time")),
            bound_by=bound if bound in _BOUND else None,
            signed_in_by=under if under in _CONSOLE else None,
            **text,
        )

    def with_passkey(self, credential_id: str) -> AuthMethod:
        """This sign-in's method, plus a WebAuthn assertion by `credential_id` (what the request
        page records on an approval a passkey signed)."""
        return replace(self, kind="webauthn", credential_id=credential_id, signed_in_by=self.kind)

    @property
    def sign_in(self) -> AuthMethod | None:
        """The console sign-in under a WebAuthn approval (itself for every other kind); None
        when it was not recorded."""
        if self.kind != "webauthn":
            return self
        if self.signed_in_by is None or self.signed_in_by == "webauthn":
            return None
        return replace(self, kind=self.signed_in_by, credential_id=None, signed_in_by=None)

    def describe(self) -> str:
        """In words, for the request page: "OIDC (https://idp.example, subject 1234, ...)"."""
        match self.kind:
            case "password":
                return "password sign-in"
            case "proxy":
                return "sign-in proxy"
            case "local":
                return "local mode (no sign-in)"
            case "token":
                return f"API token {self.token}" if self.token else "API token"
            case "webauthn":
                under = self.sign_in
                signed = under.describe() if under is not None else "an unrecorded sign-in"
                return f"passkey or security key (credential {self.credential_id}), in a {signed}"
            case "chat":
                how = {
                    "configured_id": "configured id",
                    "idp_claim": "identity provider claim",
                    "link": "linked from the console",
                    "email": "email match",
                }
                bound = how.get(self.bound_by or "", "unknown binding")
                return f"{self.platform} user {self.user_id} ({bound})"
        parts = [f"issuer {self.issuer}", f"subject {self.subject}"]
        if self.auth_time is not None:
            parts.append(f"authenticated {self.auth_time:%Y-%m-%d %H:%M:%S} UTC")
        if self.acr:
            parts.append(f"acr {self.acr}")
        return "single sign-on (" + ", ".join(parts) + ")"


def _instant(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


PASSWORD = AuthMethod("password")
PROXY = AuthMethod("proxy")
LOCAL = AuthMethod("local")
