"""Discord's REST API over httpx, as the bot: messages created and edited.

Every failure becomes a `DeliveryError` the outbox understands: a 429 carries Discord's
`retry_after` (the JSON body, else the `Retry-After` header); a 5xx or an unreachable API is
retried; errors asking again cannot fix (a bad token, a channel the bot cannot see or write
to, a message that is gone, a card Discord refuses) are permanent. Nothing retries here.
"""

from __future__ import annotations

from typing import Any

import httpx

from channels.discord.settings import DiscordSettings
from gate.channel import DeliveryError

#: posts and edits run in the outbox pump, which retries; no need to wait long
API_TIMEOUT_SECONDS = 10.0
#: Discord asks bots to name themselves this way (docs/reference#user-agent)
USER_AGENT = "DiscordBot (https://github.com/gate-approvals/gate, 1)"
#: JSON error codes worth naming in the log: 10003 unknown channel, 10008 unknown message,
#: 50001 missing access, 50013 missing permissions, 50035 invalid form body
KNOWN_CODES = {
    10003: "unknown channel",
    10008: "unknown message",
    50001: "missing access (is the bot in the server and can it see the channel?)",
    50013: "missing permissions (Send Messages, Embed Links)",
    50035: "invalid form body (the card was refused)",
}


class DiscordApi:
    """Creates and edits messages as the bot (`Authorization: Bot <token>`)."""

    def __init__(
        self, settings: DiscordSettings, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        assert settings.bot_token is not None
        self._token = settings.bot_token.get_secret_value()
        self._base = settings.api_url.rstrip("/")
        self._transport = transport
        self._http: httpx.AsyncClient | None = None

    async def create_message(self, channel_id: str, body: dict[str, Any]) -> str:
        """Post a message to a channel; returns its id."""
        data = await self.call("POST", f"/channels/{channel_id}/messages", body)
        message_id = data.get("id")
        if not isinstance(message_id, str) or not message_id:
            raise DeliveryError("Discord answered the message create without an id")
        return message_id

    async def edit_message(self, channel_id: str, message_id: str, body: dict[str, Any]) -> None:
        """Replace a message's content, embeds and components."""
        await self.call("PATCH", f"/channels/{channel_id}/messages/{message_id}", body)

    async def follow_up(self, application_id: str, token: str, body: dict[str, Any]) -> None:
        """Send a follow-up message to an interaction (within its token's 15 minutes)."""
        await self.call("POST", f"/webhooks/{application_id}/{token}", body)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                base_url=self._base,
                timeout=httpx.Timeout(API_TIMEOUT_SECONDS),
                transport=self._transport,
                headers={"Authorization": f"Bot {self._token}", "User-Agent": USER_AGENT},
            )
        return self._http

    async def call(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """One API call; the answer's JSON object, or the DeliveryError its failure means."""
        try:
            response = await self._client().request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise DeliveryError(f"Discord unreachable: {type(exc).__name__}: {exc}") from None
        data = _json(response)
        if response.status_code < 300:
            return data
        raise delivery_error(f"{method} {path}", response, data)


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def delivery_error(call: str, response: httpx.Response, data: dict[str, Any]) -> DeliveryError:
    """Map a failed call onto the outbox's retry rules."""
    status = response.status_code
    code = data.get("code")
    why = KNOWN_CODES.get(code) if isinstance(code, int) else None
    message = str(data.get("message") or "")[:200]
    what = f"Discord {call}: HTTP {status}" + (f", code {code}" if code is not None else "")
    what += f": {why or message or 'no message'}"
    if status == 429:
        return DeliveryError(what, retry_after=retry_after(response, data))
    if status >= 500:
        return DeliveryError(what)
    # 400 (a card Discord refuses), 401 (bad token), 403 (no access), 404 (channel or message
    # gone): asking again would fail the same way.
    return DeliveryError(what, permanent=True)


def retry_after(response: httpx.Response, data: dict[str, Any]) -> float:
    """Seconds to wait: the body's `retry_after` (precise), else `Retry-After`, else 1."""
    for value in (data.get("retry_after"), response.headers.get("retry-after")):
        try:
            seconds = float(value) if value is not None else None
        except (TypeError, ValueError):
            continue
        # NaN and infinity are no wait anyone can honour
        if seconds is not None and 0 <= seconds < 86_400:
            return seconds
    return 1.0
