"""A fake OpenID Connect provider on loopback: discovery, JWKS, authorize, token, end session.

It signs ID tokens with RS256 keys made by joserfc, as a real provider does, and checks what
it receives as one does: the client id and secret (HTTP Basic), the redirect URI, the code
(used once), and the PKCE verifier against the S256 challenge. `/authorize` signs `user` in
without a page (a provider where the person is already signed in), remembering their last
authentication: with `prompt=login` (or a `max_age` that time exceeds) they authenticate
again and `auth_time` is now.

Knobs for the tests: `tamper` (claims to put in the next ID tokens, e.g. another `iss`),
`discovery_issuer` (what discovery claims), `rotate()` (a new signing key published in the
JWKS, the old one gone), `sign_with_unpublished()` (a key never in the JWKS), `reuse_codes`
(accept a code twice, to replay a token), and `last_auth_at` (when `user` last signed in).
Everything received is recorded in `authorize_calls`, `token_calls`, `logout_calls`.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from tests.support.keys import rsa_key
from tests.support.servers import LoopbackFake

CLIENT_ID = "gate-console"
CLIENT_SECRET = "fake-oidc-client-secret-0123456789"


def new_key(kid: str, n: int = 0) -> RSAKey:
    """An RS256 signing key named `kid`: the process's `n`-th key of a provider
    (tests/support/keys.py), so keys of different `n` differ."""
    return RSAKey.import_key(
        rsa_key("oidc", n), parameters={"kid": kid, "alg": "RS256", "use": "sig"}
    )


@dataclass
class User:
    """Who is signed in at the provider."""

    sub: str = "sub-alice-0001"
    email: str | None = "alice@example.com"
    email_verified: bool = True
    groups: list[str] = field(default_factory=list)
    acr: str | None = None
    #: more claims for the ID token (chat ids: `{"slack_id": "U0..."}`)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Code:
    client_id: str
    redirect_uri: str
    nonce: str | None
    challenge: str | None
    auth_time: int
    used: bool = False


class FakeOidc(LoopbackFake):
    """The provider (see the module docstring)."""

    def __init__(self) -> None:
        self.user = User()
        #: keys this provider made: each new one is a key none before it was
        self._made = 0
        self.key = new_key("key-1")
        self.published: list[RSAKey] = [self.key]
        self.tamper: dict[str, Any] = {}
        self.discovery_issuer: str | None = None
        self.reuse_codes = False
        self.token_lifetime = 300
        self.last_auth_at = int(time.time())
        self.end_session = True
        #: False: a provider that ignores `prompt=login` and `max_age` (signs in from its
        #: old session, as some do), which gate must notice from `auth_time`
        self.honour_prompt = True
        self.codes: dict[str, _Code] = {}
        self.authorize_calls: list[dict[str, str]] = []
        self.token_calls: list[dict[str, str]] = []
        self.logout_calls: list[dict[str, str]] = []
        self.jwks_fetches = 0
        self.app = Starlette(
            routes=[
                Route("/.well-known/openid-configuration", self._discovery),
                Route("/jwks", self._jwks),
                Route("/authorize", self._authorize),
                Route("/token", self._token, methods=["POST"]),
                Route("/logout", self._logout),
            ]
        )

    @property
    def issuer(self) -> str:
        """The provider's issuer (its base URL)."""
        return self.base_url

    def settings(self, **extra: Any) -> dict[str, Any]:
        """An `[oidc]` table for gate pointing here."""
        return {
            "issuer": self.issuer,
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
            "jwks_refresh_seconds": 0,
            **extra,
        }

    def rotate(self) -> None:
        """Start signing with a new key; the JWKS publishes only it from now on."""
        self._made += 1
        self.key = new_key(f"key-{self._made + 1}", self._made)
        self.published = [self.key]

    def sign_with_unpublished(self) -> None:
        """Sign with a key the JWKS never publishes (a forger's)."""
        self._made += 1
        self.key = new_key("key-forged", self._made)

    # -- endpoints -----------------------------------------------------------------------

    async def _discovery(self, request: Request) -> Response:
        base = self.base_url
        return JSONResponse(
            {
                "issuer": self.discovery_issuer or base,
                "authorization_endpoint": f"{base}/authorize",
                "token_endpoint": f"{base}/token",
                "jwks_uri": f"{base}/jwks",
                "id_token_signing_alg_values_supported": ["RS256"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic"],
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "code_challenge_methods_supported": ["S256"],
                **({"end_session_endpoint": f"{base}/logout"} if self.end_session else {}),
            }
        )

    async def _jwks(self, request: Request) -> Response:
        self.jwks_fetches += 1
        return JSONResponse(KeySet(list(self.published)).as_dict(private=False))

    async def _authorize(self, request: Request) -> Response:
        q = dict(request.query_params)
        self.authorize_calls.append(q)
        if q.get("client_id") != CLIENT_ID or q.get("response_type") != "code":
            return JSONResponse({"error": "invalid_request"}, status_code=400)
        now = int(time.time())
        max_age = q.get("max_age")
        again = q.get("prompt") == "login" or (max_age and now - self.last_auth_at > int(max_age))
        if again and self.honour_prompt:
            self.last_auth_at = now  # the person authenticated again
        code = secrets.token_urlsafe(16)
        self.codes[code] = _Code(
            q["client_id"],
            q.get("redirect_uri", ""),
            q.get("nonce"),
            q.get("code_challenge") if q.get("code_challenge_method") == "S256" else None,
            self.last_auth_at,
        )
        back = {"code": code, **({"state": q["state"]} if "state" in q else {})}
        return RedirectResponse(f"{q.get('redirect_uri')}?{urlencode(back)}", status_code=302)

    async def _token(self, request: Request) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        self.token_calls.append(form)
        if _basic(request.headers.get("authorization")) != (CLIENT_ID, CLIENT_SECRET):
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        code = self.codes.get(form.get("code", ""))
        if code is None or (code.used and not self.reuse_codes):
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        code.used = True
        if form.get("redirect_uri") != code.redirect_uri or form.get("grant_type") != (
            "authorization_code"
        ):
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        if code.challenge is None or _s256(form.get("code_verifier", "")) != code.challenge:
            return JSONResponse({"error": "invalid_grant", "error_description": "PKCE"}, 400)
        id_token = self.id_token(code)
        return JSONResponse(
            {"access_token": secrets.token_urlsafe(16), "token_type": "Bearer",
             "expires_in": 300, "id_token": id_token}
        )  # fmt: skip

    async def _logout(self, request: Request) -> Response:
        q = dict(request.query_params)
        self.logout_calls.append(q)
        return RedirectResponse(q.get("post_logout_redirect_uri", "/"), status_code=302)

    def id_token(self, code: _Code) -> str:
        """An RS256 ID token for `user`, as this code's sign-in earned it (plus `tamper`)."""
        now, user = int(time.time()), self.user
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": user.sub,
            "aud": code.client_id,
            "iat": now,
            "exp": now + self.token_lifetime,
            "auth_time": code.auth_time,
            "nonce": code.nonce,
            "email": user.email,
            "email_verified": user.email_verified,
            "groups": user.groups,
        }
        if user.acr is not None:
            claims["acr"] = user.acr
        claims.update(user.extra)
        claims.update(self.tamper)
        claims = {k: v for k, v in claims.items() if v is not None}
        return jwt.encode({"alg": "RS256", "kid": self.key.kid}, claims, self.key)


def _basic(header: str | None) -> tuple[str, str] | None:
    if not header or not header.startswith("Basic "):
        return None
    user, _, password = base64.b64decode(header[6:]).decode().partition(":")
    from urllib.parse import unquote

    return unquote(user), unquote(password)


def _s256(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
