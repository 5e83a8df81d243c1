"""The Bot API over httpx: `https://api.telegram.org/bot<token>/<method>`, JSON in and out.

Every failure becomes a `DeliveryError` the outbox understands: a flood-control 429 carries
the `parameters.retry_after` Telegram asks for; a bad token, a chat the bot is not in, a
group that became a supergroup or a message Telegram refuses will not get better by asking
again (permanent); a 5xx or a broken connection is retried. The channel never retries
inside: the outbox does, with backoff.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from channels.telegram.settings import TelegramSettings
from gate.base.tls import verifying_context
from gate.delivery.channel import DeliveryError

#: editMessageText with what the message already shows: nothing to do, not a failure
NOT_MODIFIED = "message is not modified"
#: the Bot API answers within seconds; a stuck connection must not hold a delivery for long
TIMEOUT_SECONDS = 10.0


class RedactToken(logging.Filter):
    """Hides the bot token in log lines: httpx logs every request's URL at INFO, and the Bot
    API puts the token in the URL's path."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite a record that names the token; never drop one."""
        message = record.getMessage()
        if self.token in message:
            record.msg, record.args = message.replace(self.token, "<bot token>"), ()
        return True


def redact_in_logs(token: str) -> None:
    """Install (once per token) the filter that keeps the token out of httpx's log lines."""
    logger = logging.getLogger("httpx")
    if not any(isinstance(f, RedactToken) and f.token == token for f in logger.filters):
        logger.addFilter(RedactToken(token))


class TelegramApi:
    """Calls Bot API methods as the bot."""

    def __init__(
        self, settings: TelegramSettings, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.settings = settings
        redact_in_logs(settings.bot_token.get_secret_value())
        self._transport = transport
        self._http: httpx.AsyncClient | None = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            token = self.settings.bot_token.get_secret_value()
            self._http = httpx.AsyncClient(
                base_url=f"{self.settings.api_url.rstrip('/')}/bot{token}/",
                timeout=httpx.Timeout(TIMEOUT_SECONDS),
                transport=self._transport,
                verify=verifying_context(),
            )
        return self._http

    async def aclose(self) -> None:
        """Close the HTTP client."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def call(self, method: str, body: dict[str, Any]) -> Any:
        """One method call; its `result`, or the DeliveryError its failure means."""
        try:
            response = await self._client().post(method, json=body)
        except httpx.HTTPError as exc:
            # The token is in the URL: name the error's type, never str(exc) with the URL.
            raise DeliveryError(f"Telegram unreachable ({method}): {type(exc).__name__}") from None
        return result_or_raise(response, method)

    async def send_message(self, body: dict[str, Any]) -> int:
        """sendMessage; the new message's message_id."""
        result = await self.call("sendMessage", body)
        message_id = result.get("message_id") if isinstance(result, dict) else None
        if not isinstance(message_id, int):
            raise DeliveryError("sendMessage answered without a message_id")
        return message_id

    async def edit_message(self, body: dict[str, Any]) -> None:
        """editMessageText; an edit to what the message already shows is no failure."""
        try:
            await self.call("editMessageText", body)
        except DeliveryError as exc:
            if NOT_MODIFIED not in str(exc):
                raise


def result_or_raise(response: httpx.Response, method: str) -> Any:
    """The answer's `result`, or the DeliveryError its `error_code` and `parameters` mean."""
    try:
        envelope = response.json()
    except ValueError:
        envelope = None
    if not isinstance(envelope, dict):
        # Not the Bot API speaking (a proxy's error page): retry unless it says "you are wrong".
        permanent = 400 <= response.status_code < 500 and response.status_code != 429
        raise DeliveryError(f"{method}: HTTP {response.status_code}", permanent=permanent)
    if envelope.get("ok") is True and response.status_code < 400:
        return envelope.get("result")
    code = envelope.get("error_code", response.status_code)
    description = str(envelope.get("description", ""))[:300]
    where = f"{method}: {code} {description}".strip()
    parameters = envelope.get("parameters")
    parameters = parameters if isinstance(parameters, dict) else {}
    retry_after = parameters.get("retry_after")
    if code == 429 or response.status_code == 429:
        wait = float(retry_after) if isinstance(retry_after, int | float) else 1.0
        raise DeliveryError(f"rate limited: {where}", retry_after=max(wait, 0.0))
    if "migrate_to_chat_id" in parameters:
        moved = parameters["migrate_to_chat_id"]
        raise DeliveryError(f"{where}: the group is now chat {moved}", permanent=True)
    if not isinstance(code, int) or code >= 500 or response.status_code >= 500:
        raise DeliveryError(where)
    # 400 (bad chat, bad card), 401/404 (bad token), 403 (bot blocked or removed): asking
    # again sends the same thing to the same place.
    raise DeliveryError(where, permanent=True)
