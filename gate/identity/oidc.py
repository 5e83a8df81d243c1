"""Single sign-on through an OpenID Connect provider: discovery, the authorization code flow
with PKCE and a nonce, and the ID token's checks.

Authlib's httpx client makes the authorization URL (PKCE S256) and exchanges the code at
the token endpoint; joserfc (Authlib's JOSE library) verifies the ID token. The checks,
each of which refuses the sign-in when it fails (any doubt: nobody is signed in):

* the discovery document names exactly the configured issuer;
* the token's signature verifies with a key from the provider's JWKS, chosen by `kid`, with
  an asymmetric algorithm the provider advertises (`SIGNING_ALGORITHMS`: never `none`, never
  an HMAC). A `kid` gate has not seen makes it fetch the JWKS again (the provider rotated
  its keys), at most once per `jwks_refresh_seconds`;
* `iss` is the issuer, `aud` holds the client id (and `azp` names it when there are more
  audiences), `exp` is in the future, `iat` not, `sub` is there, and `nonce` is the one this
  browser's sign-in sent;
* when gate asked for a fresh authentication (`max_age`, a rule's step-up), `auth_time` is
  there and no older than asked (RFC 9470), and `acr` is one asked for.

Nothing is fetched at start-up: a provider that is down stops sign-in, not gate. Nor are the
two libraries imported before a sign-in needs them (about a twentieth of what a `gate serve`
spends importing, and most servers have no single sign-on).
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import anyio
import httpx

from gate.base.tls import verifying_context
from gate.config.oidc import SIGNING_ALGORITHMS, OidcSettings
from gate.config.settings import ApproverSettings, Settings
from gate.identity.authmethod import AuthMethod

if TYPE_CHECKING:
    from authlib.integrations.httpx_client import AsyncOAuth2Client
    from joserfc.jwk import KeySet

log = logging.getLogger("gate.identity.oidc")

DISCOVERY_PATH = "/.well-known/openid-configuration"
#: the longest ID token gate reads (real ones are 1-2 KB; a huge one is refused unparsed)
MAX_TOKEN_BYTES = 16 * 1024


class SignInRefused(Exception):
    """The provider's answer did not prove who signed in; `message` is for the page (it
    names what failed, never a token), the log gets the same."""

    def __init__(self, message: str, *, status: int = 401) -> None:
        super().__init__(message)
        self.message = message
        self.http_status = status


@dataclass(frozen=True)
class Provider:
    """What the discovery document says, as gate uses it."""

    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    algorithms: tuple[str, ...]
    token_auth: str
    end_session_endpoint: str | None = None


@dataclass(frozen=True)
class Verified:
    """An ID token whose every check passed."""

    claims: dict[str, Any]
    auth: AuthMethod


@dataclass(frozen=True)
class Asked:
    """What one browser's sign-in sent the provider, to check its answer against."""

    nonce: str
    code_verifier: str
    #: a fresh authentication was asked for (`max_age`, seconds); None: any
    max_age: int | None = None
    acr: tuple[str, ...] = ()


class OidcClient:
    """One provider, its discovery document and keys cached (`[oidc]`)."""

    def __init__(
        self,
        settings: OidcSettings,
        *,
        redirect_uri: str,
        clock: Callable[[], datetime],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.redirect_uri = redirect_uri
        self.clock = clock
        self.monotonic = monotonic
        self._provider: Provider | None = None
        self._keys: KeySet | None = None
        self._keys_at = -float("inf")
        self._lock = anyio.Lock()

    # -- discovery and keys --------------------------------------------------------------

    async def provider(self) -> Provider:
        """The discovery document (read once; again after a failure)."""
        if self._provider is None:
            async with self._lock:
                if self._provider is None:
                    self._provider = await self._discover()
        return self._provider

    async def _discover(self) -> Provider:
        issuer = self.settings.issuer
        doc = await self._get_json(issuer + DISCOVERY_PATH, "discovery document")
        if doc.get("issuer") != issuer:
            raise SignInRefused(
                f"the provider's discovery document names issuer {str(doc.get('issuer'))[:200]!r}"
                f", not the configured {issuer!r}",
                status=502,
            )
        needed = ("authorization_endpoint", "token_endpoint", "jwks_uri")
        missing = [k for k in needed if not isinstance(doc.get(k), str)]
        if missing:
            raise SignInRefused(f"the discovery document lacks {missing}", status=502)
        offered = doc.get("id_token_signing_alg_values_supported") or ["RS256"]
        algorithms = tuple(a for a in SIGNING_ALGORITHMS if a in offered)
        if not algorithms:
            raise SignInRefused(
                f"the provider signs ID tokens only with {offered[:5]}, none of which gate "
                f"accepts ({', '.join(SIGNING_ALGORITHMS)})",
                status=502,
            )
        methods = doc.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        auth = next((m for m in ("client_secret_basic", "client_secret_post") if m in methods), "")
        if not auth:
            raise SignInRefused(f"the token endpoint takes none of {methods[:5]}", status=502)
        end = doc.get("end_session_endpoint")
        return Provider(
            doc["authorization_endpoint"],
            doc["token_endpoint"],
            doc["jwks_uri"],
            algorithms,
            auth,
            end if isinstance(end, str) else None,
        )

    async def _get_json(self, url: str, what: str) -> dict[str, Any]:
        try:
            async with httpx.AsyncClient(
                timeout=self.settings.http_timeout_seconds, verify=verifying_context()
            ) as http:
                response = await http.get(url)
            response.raise_for_status()
            data = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("single sign-on: the %s at %s could not be read: %s", what, url, exc)
            raise SignInRefused(
                f"the identity provider's {what} could not be read", status=502
            ) from None
        if not isinstance(data, dict):
            raise SignInRefused(f"the identity provider's {what} is not a JSON object", status=502)
        return data

    async def _key_set(self, *, refresh: bool) -> KeySet:
        """The provider's keys; fetched again when `refresh` and not fetched too recently."""
        stale = self.monotonic() - self._keys_at >= self.settings.jwks_refresh_seconds
        if self._keys is None or (refresh and stale):
            from joserfc.errors import JoseError
            from joserfc.jwk import KeySet

            async with self._lock:
                provider = self._provider
                assert provider is not None  # verify() discovered it
                data = await self._get_json(provider.jwks_uri, "key set (JWKS)")
                try:
                    self._keys = KeySet.import_key_set(data)  # type: ignore[arg-type]
                except (JoseError, ValueError, TypeError, KeyError) as exc:
                    raise SignInRefused(f"the provider's JWKS is not usable: {exc}") from None
                self._keys_at = self.monotonic()
        return self._keys

    # -- the flow --------------------------------------------------------------------------

    async def authorization_url(self, state: str, asked: Asked) -> str:
        """Where to send the browser: the provider's authorization endpoint with PKCE (S256),
        the nonce, and for a step-up `max_age` and `prompt=login` (and `acr_values`)."""
        provider = await self.provider()
        extra: dict[str, Any] = {"nonce": asked.nonce}
        if asked.max_age is not None:
            extra |= {"max_age": str(asked.max_age), "prompt": "login"}
        if asked.acr:
            extra["acr_values"] = " ".join(asked.acr)
        async with self._oauth(provider) as oauth:
            url, _ = oauth.create_authorization_url(
                provider.authorization_endpoint,
                state=state,
                code_verifier=asked.code_verifier,
                **extra,
            )
        return str(url)

    async def sign_in(self, code: str, asked: Asked) -> Verified:
        """Exchange `code` at the token endpoint and check the ID token it returns."""
        provider = await self.provider()
        try:
            async with self._oauth(provider) as oauth:
                token = await oauth.fetch_token(
                    provider.token_endpoint,
                    grant_type="authorization_code",
                    code=code,
                    code_verifier=asked.code_verifier,
                )
        except Exception as exc:  # Authlib's OAuthError, httpx's errors: no sign-in either way
            log.warning("single sign-on: the token endpoint refused the code: %s", exc)
            raise SignInRefused("the identity provider did not accept the sign-in code") from None
        id_token = token.get("id_token") if isinstance(token, dict) else None
        if not isinstance(id_token, str):
            raise SignInRefused("the identity provider sent no ID token")
        return await self.verify(id_token, asked)

    def _oauth(self, provider: Provider) -> AsyncOAuth2Client:
        from authlib.integrations.httpx_client import AsyncOAuth2Client

        return AsyncOAuth2Client(
            client_id=self.settings.client_id,
            client_secret=self.settings.secret,
            redirect_uri=self.redirect_uri,
            scope=" ".join(self.settings.scopes),
            code_challenge_method="S256",
            token_endpoint_auth_method=provider.token_auth,
            timeout=self.settings.http_timeout_seconds,
            verify=verifying_context(),
        )

    # -- the ID token --------------------------------------------------------------------------

    async def verify(self, id_token: str, asked: Asked) -> Verified:
        """The ID token's claims and the sign-in it proves, or `SignInRefused` naming the
        first check that failed."""
        from joserfc import jwt
        from joserfc.errors import JoseError

        provider = await self.provider()
        header = _header(id_token)
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in provider.algorithms:
            raise SignInRefused(
                f"the ID token is signed with {str(alg)[:20]!r}, not one of "
                f"{list(provider.algorithms)}"
            )
        key_set = await self._key_set(refresh=False)
        if kid is not None and not _has_kid(key_set, kid):
            key_set = await self._key_set(refresh=True)  # the provider may have rotated keys
            if not _has_kid(key_set, kid):
                raise SignInRefused(f"the ID token's key {str(kid)[:80]!r} is not in the JWKS")
        try:
            key = key_set.get_by_kid(kid) if kid is not None else _only_key(key_set)
            claims = jwt.decode(id_token, key, algorithms=[str(alg)]).claims
        except (JoseError, ValueError) as exc:
            raise SignInRefused(f"the ID token's signature does not verify ({exc})") from None
        self._check_claims(claims, asked)
        return Verified(claims, _auth_of(claims))

    def _check_claims(self, claims: dict[str, Any], asked: Asked) -> None:
        from joserfc import jwt
        from joserfc.errors import JoseError

        settings, now = self.settings, self.clock()
        leeway = settings.leeway_seconds
        registry = jwt.JWTClaimsRegistry(
            now=int(now.timestamp()),
            leeway=leeway,
            iss={"essential": True, "value": settings.issuer},
            aud={"essential": True, "value": settings.client_id},
            sub={"essential": True},
            exp={"essential": True},
            iat={"essential": True},
            nonce={"essential": True, "value": asked.nonce},
        )
        try:
            registry.validate(claims)
        except JoseError as exc:
            raise SignInRefused(f"the ID token's claims do not check out: {exc}") from None
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != settings.client_id:
            raise SignInRefused("the ID token has several audiences and azp is not gate")
        if not isinstance(claims["iat"], int | float) or claims["iat"] > now.timestamp() + leeway:
            raise SignInRefused("the ID token was issued in the future (iat)")
        if not isinstance(claims["sub"], str):
            raise SignInRefused("the ID token's sub is not text")
        self._check_fresh(claims, asked, now)

    def _check_fresh(self, claims: dict[str, Any], asked: Asked, now: datetime) -> None:
        """RFC 9470: a sign-in asked with `max_age` must say when the person authenticated,
        no longer ago than that; one asked with `acr_values` must assert one of them."""
        auth_time = claims.get("auth_time")
        if auth_time is not None and not isinstance(auth_time, int | float):
            raise SignInRefused("the ID token's auth_time is not a number")
        if asked.max_age is not None:
            if auth_time is None:
                raise SignInRefused(
                    "a fresh sign-in was asked for and the ID token has no auth_time"
                )
            age = now.timestamp() - auth_time
            if age > asked.max_age + self.settings.leeway_seconds:
                raise SignInRefused(
                    f"a sign-in at most {asked.max_age} s old was asked for; the identity "
                    f"provider's is {int(age)} s old (it did not ask you to sign in again)"
                )
        if asked.acr and claims.get("acr") not in asked.acr:
            raise SignInRefused(
                f"the identity provider's authentication (acr {str(claims.get('acr'))[:80]!r}) "
                f"is not one of {list(asked.acr)}"
            )

    def logout_url(self, post_logout: str) -> str | None:
        """RP-initiated logout at the provider, when its discovery document offers it."""
        provider = self._provider
        if provider is None or provider.end_session_endpoint is None:
            return None
        query = httpx.QueryParams(
            client_id=self.settings.client_id, post_logout_redirect_uri=post_logout
        )
        return f"{provider.end_session_endpoint}?{query}"


def find_approver(settings: Settings, claims: dict[str, Any]) -> ApproverSettings | None:
    """The `[[approvers]]` entry the configured claim names (email or subject), or None."""
    oidc = settings.oidc
    assert oidc is not None
    if oidc.approver_claim == "sub":
        return settings.approver_by_identity("oidc", str(claims["sub"]))
    email = claims.get("email")
    if not isinstance(email, str) or not email.strip():
        return None
    if oidc.require_verified_email and claims.get("email_verified") is not True:
        return None
    return settings.approver_by_email(email)


def mapped_groups(settings: OidcSettings, claims: dict[str, Any]) -> frozenset[str]:
    """The approver groups the provider's groups confer (`group_map`); other groups, and a
    claim that is not a list of text, confer none."""
    if settings.groups_claim is None:
        return frozenset()
    theirs = claims.get(settings.groups_claim)
    if not isinstance(theirs, list):
        return frozenset()
    return frozenset(
        g for name in theirs if isinstance(name, str) for g in settings.group_map.get(name, [])
    )


def who_claimed(claims: dict[str, Any], settings: OidcSettings) -> str:
    """What the provider said about the person, for a refusal page (cut, never a token)."""
    value = claims.get("email") if settings.approver_claim == "email" else claims.get("sub")
    return str(value)[:200] if value is not None else "(no " + settings.approver_claim + ")"


def _auth_of(claims: dict[str, Any]) -> AuthMethod:
    auth_time = claims.get("auth_time")
    acr = claims.get("acr")
    return AuthMethod(
        "oidc",
        issuer=str(claims["iss"]),
        subject=str(claims["sub"]),
        auth_time=datetime.fromtimestamp(auth_time, UTC) if auth_time is not None else None,
        acr=acr if isinstance(acr, str) else None,
    )


def _header(token: str) -> dict[str, Any]:
    if len(token) > MAX_TOKEN_BYTES or token.count(".") != 2:
        raise SignInRefused("the ID token is not a signed JWT")
    segment = token.split(".", 1)[0]
    try:
        header = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except ValueError:
        raise SignInRefused("the ID token's header is not JSON") from None
    if not isinstance(header, dict):
        raise SignInRefused("the ID token's header is not a JSON object")
    return header


def _has_kid(key_set: KeySet, kid: object) -> bool:
    return any(key.kid == kid for key in key_set.keys)


def _only_key(key_set: KeySet) -> Any:
    """A token without `kid` is checked only against a JWKS of one key (no guessing)."""
    if len(key_set.keys) != 1:
        raise SignInRefused("the ID token names no key (kid) and the JWKS has several")
    return key_set.keys[0]


#: how long a browser has between leaving for the provider and coming back
PENDING_FOR = timedelta(minutes=10)
