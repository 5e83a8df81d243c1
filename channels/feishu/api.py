"""The Feishu open platform over httpx: the tenant token cache, and messages sent or patched.

Every failure becomes a `DeliveryError` the outbox understands: rate limits carry the
platform's reset time, errors that asking again cannot fix are permanent, and a token the
platform calls invalid is dropped and fetched again once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from channels.app_token import AppToken
from channels.feishu.settings import FeishuSettings
from gate.base.tls import verifying_context
from gate.delivery.channel import DeliveryError

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
MESSAGES_PATH = "/open-apis/im/v1/messages"
#: codes meaning "this tenant token is no good": drop it, fetch a new one, retry once
TOKEN_INVALID = {99991663, 99991664, 99991665, 99991668, 99991671, 99991677}
#: frequency limits (app-wide, per chat, per message, and older message-create codes)
RATE_LIMITED = {99991400, 230020, 11232, 11233, 11247}
#: retrying cannot help: bot not in chat, bad receive_id/card, no permission, recalled...
PERMANENT = {
    10013, 10014, 10015, 99991401, 99991672, 99991676, 230001, 230002, 230006,
    230011, 230013, 230025, 230031, 230053, 230099, 230110, 232009,
}  # fmt: skip
#: the SDKs refresh 3-10 minutes early; five keeps a 2-hour token for 1h55m
TOKEN_MARGIN_SECONDS = 300.0


def receive_id_type(target: str) -> str:
    """Feishu's `receive_id_type` for a target id, by its prefix."""
    if target.startswith("ou_"):
        return "open_id"
    if target.startswith("on_"):
        return "union_id"
    if "@" in target:
        return "email"
    return "chat_id"


class TokenInvalid(Exception):
    """The platform refused our tenant token."""


class FeishuApi:
    """Calls the open platform as the app, with one cached tenant token."""

    def __init__(
        self,
        settings: FeishuSettings,
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

    async def create_message(self, target: str, content: str, uuid: str) -> str:
        """Send an interactive message to a chat (or person); returns its message_id."""
        return await self._create(target, receive_id_type(target), content, uuid)

    async def message_user(self, open_id: str, content: str) -> str:
        """Send an interactive message to one person by their open_id (from a callback);
        returns its message_id. The id is named an open_id whatever it looks like, so an id
        from a callback is never read as a chat's."""
        return await self._create(open_id, "open_id", content, None)

    async def _create(self, receive_id: str, id_type: str, content: str, uuid: str | None) -> str:
        body = {"receive_id": receive_id, "msg_type": "interactive", "content": content}
        if uuid is not None:
            body["uuid"] = uuid
        params = {"receive_id_type": id_type}
        data = await self.call("POST", MESSAGES_PATH, json_body=body, params=params)
        message_id = data.get("message_id")
        if not isinstance(message_id, str):
            raise DeliveryError("message create answered without a message_id")
        return message_id

    async def patch_message(self, message_id: str, content: str) -> None:
        """Replace an interactive message's card."""
        await self.call("PATCH", f"{MESSAGES_PATH}/{message_id}", json_body={"content": content})

    async def aclose(self) -> None:
        """Close the HTTP client."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                base_url=self.settings.base_url.rstrip("/"),
                timeout=httpx.Timeout(10.0),
                transport=self._transport,
                verify=verifying_context(),
            )
        return self._http

    async def tenant_token(self, stale: str | None = None) -> str:
        """The cached tenant token (`stale`: one the platform refused, never handed out again)."""
        return await self._token.get(stale)

    async def _fetch_token(self) -> tuple[str, float]:
        assert self.settings.app_secret is not None
        body = {
            "app_id": self.settings.app_id,
            "app_secret": self.settings.app_secret.get_secret_value(),
        }
        data = await self._send("POST", TOKEN_PATH, json_body=body, token=None)
        token, expire = data.get("tenant_access_token"), data.get("expire")
        if not isinstance(token, str) or not isinstance(expire, int | float):
            raise DeliveryError("token endpoint answered without a token")
        return token, float(expire)

    async def call(
        self,
        method: str,
        path: str,
        *,
        json_body: dict[str, Any],
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """One API call with the tenant token; `data` of the answer, or DeliveryError."""
        token = await self.tenant_token()
        try:
            return await self._send(method, path, json_body=json_body, params=params, token=token)
        except TokenInvalid:
            # Revoked or expired early: one refresh (shared with concurrent callers), one retry.
            token = await self.tenant_token(stale=token)
            try:
                return await self._send(
                    method, path, json_body=json_body, params=params, token=token
                )
            except TokenInvalid as exc:
                raise DeliveryError(f"tenant token refused twice: {exc}") from exc

    async def _send(
        self,
        method: str,
        path: str,
        *,
        json_body: dict[str, Any],
        token: str | None,
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            response = await self._client().request(
                method, path, json=json_body, params=params, headers=headers
            )
        except httpx.HTTPError as exc:
            raise DeliveryError(f"Feishu unreachable: {type(exc).__name__}: {exc}") from exc
        return _data_or_raise(response, f"{method} {path}", token)


def _data_or_raise(response: httpx.Response, call: str, token: str | None) -> dict[str, Any]:
    """The answer's `data`, or the DeliveryError (or TokenInvalid) its code means."""
    try:
        envelope = response.json()
        code = int(envelope.get("code", -1))
    except (ValueError, AttributeError, TypeError):
        envelope, code = {}, -1
    msg = str(envelope.get("msg", ""))[:300] if isinstance(envelope, dict) else ""
    where = f"{call}: HTTP {response.status_code}, code {code} {msg}".strip()
    if code == 0 and response.status_code < 400:
        data = envelope.get("data")
        # The token endpoint puts its fields at the top level, not under `data`.
        return data if isinstance(data, dict) else dict(envelope)
    if code in TOKEN_INVALID and token is not None:
        raise TokenInvalid(where)
    if code in RATE_LIMITED or response.status_code == 429:
        reset = response.headers.get("x-ogw-ratelimit-reset", "")
        retry_after = float(reset) if reset.replace(".", "", 1).isdigit() else 1.0
        raise DeliveryError(f"rate limited: {where}", retry_after=retry_after)
    if code in PERMANENT:
        raise DeliveryError(where, permanent=True)
    if response.status_code >= 500 or code == -1:
        raise DeliveryError(where)
    # An unknown business error on a 4xx will not fix itself by asking again.
    raise DeliveryError(where, permanent=response.status_code >= 400)
