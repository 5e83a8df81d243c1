"""The Bot Connector REST API over httpx: the app token, and cards posted and replaced.

The app token comes from the Entra token endpoint by client credentials, is cached until
shortly before it expires and fetched again once when the connector refuses it. Every call
goes to the configured `service_url` only: an activity's own `serviceUrl` is never where
gate sends its token, so a forged or redirected activity cannot make gate hand the token
to another host (httpx does not follow redirects either). Every failure becomes a
`DeliveryError` the outbox understands: 429 and 5xx retry (honouring Retry-After), errors
that asking again cannot fix are permanent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx

from channels.app_token import AppToken
from channels.teams.settings import TeamsSettings
from gate.base.tls import verifying_context
from gate.delivery.channel import DeliveryError

log = logging.getLogger("gate.channels.teams")

CARD_TYPE = "application/vnd.microsoft.card.adaptive"
#: the SDKs refresh an app token five minutes before it expires (tokens live about an hour)
TOKEN_MARGIN_SECONDS = 300.0
#: posts run in the outbox pump, which retries; no call needs to wait long
API_TIMEOUT = 10.0


class TokenRefused(Exception):
    """The connector answered 401 to our app token."""


def card_activity(card: dict[str, Any], activity_id: str | None = None) -> dict[str, Any]:
    """A message activity carrying one Adaptive Card."""
    activity: dict[str, Any] = {
        "type": "message",
        "attachments": [{"contentType": CARD_TYPE, "content": card}],
    }
    if activity_id is not None:
        activity["id"] = activity_id
    return activity


class ConnectorApi:
    """Calls the Bot Connector as the bot, with one cached app token."""

    def __init__(
        self,
        settings: TeamsSettings,
        *,
        clock: Callable[[], float],
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        #: seconds since the epoch, for the token's lifetime
        self.clock = clock
        self._transport = transport
        self._http: httpx.AsyncClient | None = None
        self._token = AppToken(self._fetch_token, clock=clock, margin=TOKEN_MARGIN_SECONDS)
        #: Entra object id -> the member's Teams id (`29:...`), per conversation
        self._members: dict[tuple[str, str], str] = {}

    def _url(self, conversation: str, *rest: str) -> str:
        base = self.settings.service_url.rstrip("/")
        # Conversation ids hold ':', '@' and ';': each path part is encoded whole.
        parts = [quote(conversation, safe=""), *(quote(p, safe="") for p in rest)]
        return f"{base}/v3/conversations/" + "/".join(parts)

    async def send_card(self, conversation: str, card: dict[str, Any]) -> str:
        """Post a card to a conversation; returns the new activity's id."""
        answer = await self.call("POST", self._url(conversation, "activities"), card_activity(card))
        activity_id = answer.get("id")
        if not isinstance(activity_id, str) or not activity_id:
            raise DeliveryError("the connector answered a post without an activity id")
        return activity_id

    async def replace_card(self, conversation: str, activity_id: str, card: dict[str, Any]) -> None:
        """Replace the card of an activity the bot posted (PUT on the activity)."""
        url = self._url(conversation, "activities", activity_id)
        await self.call("PUT", url, card_activity(card, activity_id))

    async def reply(
        self, conversation: str, activity_id: str | None, activity: dict[str, Any]
    ) -> None:
        """Post a message activity in a conversation, as a reply to `activity_id` (the
        connector's reply-to-activity) when there is one, else as a new message."""
        if activity_id is not None:
            body = {**activity, "replyToId": activity_id}
            try:
                await self.call("POST", self._url(conversation, "activities", activity_id), body)
                return
            except DeliveryError as exc:
                if not exc.permanent:
                    raise
                # The id came with the press: if it names no message the connector knows,
                # the words still reach the conversation, as a message of their own.
                log.info("teams reply to %s refused, posting instead: %s", activity_id, exc)
        await self.call("POST", self._url(conversation, "activities"), activity)

    async def member_id(self, conversation: str, object_id: str) -> str | None:
        """The Teams id (`29:...`) of a conversation member known by Entra object id, or None
        when they are not a member (or the lookup fails: the card still goes out)."""
        key = (conversation, object_id)
        if key in self._members:
            return self._members[key]
        # No token is a failed delivery (the post needs one too), not a member left out.
        await self.app_token()
        try:
            member = await self.call("GET", self._url(conversation, "members", object_id), None)
        except DeliveryError as exc:
            log.info("teams member %s not resolved: %s", object_id, exc)
            return None
        found = member.get("id")
        if not isinstance(found, str) or not found:
            return None
        self._members[key] = found
        return found

    def cached_member_id(self, conversation: str, object_id: str) -> str | None:
        """The member id `member_id` found before, without asking the connector."""
        return self._members.get((conversation, object_id))

    async def aclose(self) -> None:
        """Close the HTTP client."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                timeout=httpx.Timeout(API_TIMEOUT),
                transport=self._transport,
                verify=verifying_context(),
            )
        return self._http

    async def app_token(self, stale: str | None = None) -> str:
        """The cached app token (`stale`: one the connector refused, never handed out again)."""
        return await self._token.get(stale)

    async def _fetch_token(self) -> tuple[str, float]:
        form = {
            "grant_type": "client_credentials",
            "client_id": self.settings.app_id,
            "client_secret": self.settings.app_password.get_secret_value(),
            "scope": self.settings.token_scope,
        }
        try:
            response = await self._client().post(self.settings.token_url, data=form)
        except httpx.HTTPError as exc:
            raise DeliveryError(f"token endpoint unreachable: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise _failure(response, "token request")
        data = _json(response)
        token, lifetime = data.get("access_token"), data.get("expires_in")
        if isinstance(lifetime, str) and lifetime.isdigit():
            lifetime = int(lifetime)  # v1 endpoints send it as a string
        if not isinstance(token, str) or not isinstance(lifetime, int | float):
            raise DeliveryError("the token endpoint answered without a token")
        return token, float(lifetime)

    async def call(self, method: str, url: str, body: dict[str, Any] | None) -> dict[str, Any]:
        """One connector call with the app token; the answer's JSON, or DeliveryError."""
        token = await self.app_token()
        try:
            return await self._send(method, url, body, token)
        except TokenRefused:
            # Revoked or expired early: one refresh (shared with concurrent callers), one retry.
            token = await self.app_token(stale=token)
            try:
                return await self._send(method, url, body, token)
            except TokenRefused as exc:
                raise DeliveryError(f"app token refused twice: {exc}") from exc

    async def _send(
        self, method: str, url: str, body: dict[str, Any] | None, token: str
    ) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {token}"}
        try:
            response = await self._client().request(method, url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise DeliveryError(f"Teams unreachable: {type(exc).__name__}: {exc}") from exc
        if response.status_code == 401:
            raise TokenRefused(f"{method} {_path(url)}: HTTP 401")
        if response.status_code >= 300:
            raise _failure(response, f"{method} {_path(url)}")
        return _json(response)


def _path(url: str) -> str:
    return httpx.URL(url).path


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _failure(response: httpx.Response, call: str) -> DeliveryError:
    """The DeliveryError a failed answer means for the outbox."""
    status = response.status_code
    error = _json(response).get("error")
    if isinstance(error, dict):  # the connector: {"error": {"code", "message"}}
        why = f"{error.get('code', '')} {error.get('message', '')}"
    else:  # the token endpoint: {"error": "invalid_client", "error_description"}
        why = f"{error or ''} {_json(response).get('error_description', '')}"
    where = f"{call}: HTTP {status} {why.strip()[:300]}".strip()
    if status == 429:
        return DeliveryError(f"rate limited: {where}", retry_after=_retry_after(response))
    if status >= 500:
        return DeliveryError(where, retry_after=_retry_after(response, None))
    # 400 (a card Teams refuses), 403 (the bot is not in the conversation, or blocked), 404
    # (no such conversation or activity), 413, or a bad client secret: asking again with the
    # same request cannot help.
    return DeliveryError(where, permanent=True)


def _retry_after(response: httpx.Response, default: float | None = 1.0) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        return max(float(value), 0.0)
    except ValueError:
        return default
