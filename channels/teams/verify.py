"""Verifying the Bot Connector's JWT on an inbound activity, before the body is read.

The Bot Framework's connector-to-bot rules (tests/teams/fixtures/SOURCES.md): a `Bearer`
token in the Authorization header; issuer `https://api.botframework.com`; audience the
bot's app id; inside its validity period with a 5-minute clock skew; signed with a key the
OpenID metadata document's `jwks_uri` publishes, with an algorithm the document lists, and
a key endorsed for the `msteams` channel; and (once the body is read) a `serviceUrl` claim
equal to the activity's `serviceUrl`. PyJWT does the signature and claim checks; this
module fetches and caches the keys with httpx. Any failure is a 401, never a 500.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import jwt

from channels.teams.settings import TeamsSettings
from gate.base.errors import Unauthenticated, Unavailable
from gate.base.tls import verifying_context

log = logging.getLogger("gate.channels.teams")

#: "Industry-standard clock-skew is 5 minutes" (the Bot Connector authentication spec)
LEEWAY_SECONDS = 300
#: the SDKs keep the keys a day (OpenIdMetadata refreshes them every 24 h)
KEYS_TTL_SECONDS = 24 * 3600.0
#: an unknown `kid` fetches the keys again, but not more often than this: a flood of tokens
#: naming made-up keys must not become a flood of fetches
KEYS_MIN_REFRESH_SECONDS = 60.0
#: a Bot Connector token is about 1.2 KB; anything far longer is not one
MAX_TOKEN_CHARS = 8192
CHANNEL_ID = "msteams"
#: what we accept even if the metadata document lists more (no `none`, no HMAC)
ALGORITHMS = ("RS256",)


@dataclass(frozen=True)
class SigningKey:
    """One key of the JWKS document, with the channels it is endorsed for."""

    key: jwt.PyJWK
    endorsements: frozenset[str]


class OpenIdKeys:
    """The signing keys the OpenID metadata document points at, fetched and cached."""

    def __init__(
        self,
        settings: TeamsSettings,
        *,
        clock: Callable[[], float],
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self._transport = transport
        self._keys: dict[str, SigningKey] = {}
        self._algorithms: frozenset[str] = frozenset()
        self._fetched_at: float | None = None
        self._tried_at: float | None = None
        self._lock = asyncio.Lock()
        #: how many times the documents were fetched (tests count them)
        self.fetches = 0

    async def key(self, kid: str) -> tuple[SigningKey, frozenset[str]]:
        """The key called `kid` and the algorithms the metadata allows; 401 when unknown.

        The documents are fetched when none are held, when they are a day old, or for a kid
        they do not list; but at most once a minute, fetched or failed, so neither made-up
        kids nor an outage of the metadata host turn every invoke into a slow fetch.
        """
        async with self._lock:
            now = self.clock()
            due = (
                self._fetched_at is None
                or now - self._fetched_at > KEYS_TTL_SECONDS
                or kid not in self._keys
            )
            allowed = self._tried_at is None or now - self._tried_at >= KEYS_MIN_REFRESH_SECONDS
            if due and allowed:
                self._tried_at = now
                await self._fetch()
        if not self._keys:
            raise Unavailable(
                "the Bot Framework signing keys cannot be fetched", code="keys_unavailable"
            )
        found = self._keys.get(kid)
        if found is None:
            raise Unauthenticated("the token is signed with an unknown key", code="bad_token")
        return found, self._algorithms

    async def _fetch(self) -> None:
        """Metadata, then its `jwks_uri`; a failure keeps the keys held (none: fail closed)."""
        try:
            async with httpx.AsyncClient(
                timeout=5.0, transport=self._transport, verify=verifying_context()
            ) as client:
                meta = _object(await client.get(self.settings.openid_metadata_url))
                jwks_uri = meta.get("jwks_uri")
                if not isinstance(jwks_uri, str):
                    raise ValueError("the metadata document has no jwks_uri")
                document = _object(await client.get(jwks_uri))
        except (httpx.HTTPError, ValueError) as exc:
            # The keys held (if any) stay in use: they were published by the metadata host.
            log.warning("teams signing keys not fetched: %s", exc)
            return
        self.fetches += 1
        algorithms = meta.get("id_token_signing_alg_values_supported")
        allowed = (
            {a for a in algorithms if isinstance(a, str)} if isinstance(algorithms, list) else set()
        )
        self._algorithms = frozenset(allowed & set(ALGORITHMS))
        self._keys = dict(_keys(document))
        self._fetched_at = self.clock()


def _object(response: httpx.Response) -> dict[str, Any]:
    response.raise_for_status()
    data = response.json()
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def _keys(document: Mapping[str, Any]) -> list[tuple[str, SigningKey]]:
    found = []
    for entry in document.get("keys") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("kid"), str):
            continue
        try:
            key = jwt.PyJWK(entry, algorithm="RS256")
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            continue  # a key we cannot use is a key nobody can sign for us with
        endorsed = entry.get("endorsements")
        names = (
            frozenset(e for e in endorsed if isinstance(e, str))
            if isinstance(endorsed, list)
            else frozenset()
        )
        found.append((entry["kid"], SigningKey(key, names)))
    return found


class Verifier:
    """Checks the Authorization header of an inbound activity against `[channels.teams]`."""

    def __init__(self, settings: TeamsSettings, keys: OpenIdKeys) -> None:
        self.settings = settings
        self.keys = keys

    async def claims(self, authorization: str | None) -> dict[str, Any]:
        """The verified token's claims; 401 for anything that is not a valid connector token."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme != "Bearer" or not token or len(token) > MAX_TOKEN_CHARS:
            raise Unauthenticated("no Bot Framework bearer token", code="bad_token")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthenticated("the bearer token is not a JWT", code="bad_token") from None
        kid, alg = header.get("kid"), header.get("alg")
        if not isinstance(kid, str) or alg not in ALGORITHMS:
            raise Unauthenticated("the token names no usable key", code="bad_token")
        signing, algorithms = await self.keys.key(kid)
        if alg not in algorithms:
            raise Unauthenticated("the token's algorithm is not the metadata's", code="bad_token")
        if CHANNEL_ID not in signing.endorsements:
            raise Unauthenticated("the signing key is not endorsed for Teams", code="bad_token")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                signing.key.key,
                algorithms=[alg],
                audience=self.settings.app_id,
                issuer=self.settings.issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("the token has expired", code="stale_token") from None
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"the token is not valid: {exc}", code="bad_token") from None
        return claims


def check_activity(claims: Mapping[str, Any], activity: Mapping[str, Any], tenant: str) -> None:
    """What the token and the body must agree on; 401 otherwise.

    The token's `serviceUrl` claim names the activity's `serviceUrl` (the spec's seventh
    check), the activity comes from Teams, and from the configured tenant: a valid token for
    this bot sent from another organisation is not one of our people clicking.
    """
    claimed = claims.get("serviceUrl", claims.get("serviceurl"))
    sent = activity.get("serviceUrl")
    if not isinstance(claimed, str) or not isinstance(sent, str) or claimed.lower() != sent.lower():
        raise Unauthenticated("the token was not issued for this serviceUrl", code="bad_token")
    if activity.get("channelId") != CHANNEL_ID:
        raise Unauthenticated("the activity does not come from Teams", code="bad_token")
    channel_data = activity.get("channelData")
    tenant_of = channel_data.get("tenant") if isinstance(channel_data, dict) else None
    sent_tenant = tenant_of.get("id") if isinstance(tenant_of, dict) else None
    if not isinstance(sent_tenant, str) or sent_tenant.lower() != tenant.lower():
        raise Unauthenticated("the activity comes from another tenant", code="wrong_tenant")
