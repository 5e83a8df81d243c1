"""Discord's REST API over httpx, as the bot: messages created and edited.

Every failure becomes a `DeliveryError` the outbox understands: a 429 carries Discord's
`retry_after` (the JSON body, else the `Retry-After` header); a 5xx or an unreachable API is
retried; errors asking again cannot fix (a bad token, a channel the bot cannot see or write
to, a message that is gone, a card Discord refuses) are permanent. Nothing retries here.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from channels.discord.settings import DiscordSettings
from gate.base.tls import verifying_context
from gate.delivery.channel import DeliveryError
from gate.text import untrusted

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


#: an interaction's token sends, edits and deletes its messages for 15 minutes: a credential,
#: so a follow-up's path is named without it in errors, and httpx's log lines are rewritten
HIDDEN_TOKEN = "<interaction token>"
_FOLLOW_UP_PATH = untrusted.compile(r"(/webhooks/[0-9]+/)[A-Za-z0-9_.-]+")


class RedactInteractionTokens(logging.Filter):
    """Hides interaction tokens in httpx's log lines (it logs each request's URL at INFO, and
    a follow-up's URL holds the token)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite a record that names a follow-up URL; never drop one."""
        message = record.getMessage()
        if "/webhooks/" in message:
            hidden = _FOLLOW_UP_PATH.sub(lambda found: found.group(1) + HIDDEN_TOKEN, message)
            record.msg, record.args = hidden, ()
        return True


def redact_in_logs() -> None:
    """Install (once) the filter that keeps interaction tokens out of httpx's log lines."""
    logger = logging.getLogger("httpx")
    if not any(isinstance(f, RedactInteractionTokens) for f in logger.filters):
        logger.addFilter(RedactInteractionTokens())


class DiscordApi:
    """Creates and edits messages as the bot (`Authorization: Bot <token>`)."""

    def __init__(
        self, settings: DiscordSettings, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        assert settings.bot_token is not None
        self._token = settings.bot_token.get_secret_value()
        redact_in_logs()
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
        path, shown = f"/webhooks/{application_id}/", f"/webhooks/{application_id}/{HIDDEN_TOKEN}"
        await self.call("POST", path + token, body, shown=shown)

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
                verify=verifying_context(),
                headers={"Authorization": f"Bot {self._token}", "User-Agent": USER_AGENT},
            )
        return self._http

    async def call(
        self, method: str, path: str, body: dict[str, Any], *, shown: str | None = None
    ) -> dict[str, Any]:
        """One API call; the answer's JSON object, or the DeliveryError its failure means
        (naming the call by `shown` when its path holds a credential)."""
        try:
            response = await self._client().request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise DeliveryError(f"Discord unreachable: {type(exc).__name__}: {exc}") from None
        data = _json(response)
        if response.status_code < 300:
            return data
        raise delivery_error(f"{method} {shown or path}", response, data)


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
