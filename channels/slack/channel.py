"""`SlackChannel`: the adapter gate loads for `[channels.slack]`.

It posts cards with chat.postMessage and refreshes them with chat.update (through the
outbox, which owns retries), and serves Slack's Interactivity Request URL: verify the
signature on the raw bytes, parse, hand the click to gate, answer within 3 s. The card is
rendered by `channels.slack.card`; clicks are translated by `channels.slack.clicks`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import anyio
from fastapi import APIRouter, BackgroundTasks, Request, Response
from fastapi.responses import JSONResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from channels import decisions
from channels.slack.callback import form_payload, parse_interaction, verify_signature
from channels.slack.card import card_message
from channels.slack.clicks import Clicks
from channels.slack.commands import USAGE, parse_command
from channels.slack.mrkdwn import ARGS_CHARS
from channels.slack.settings import SlackSettings
from gate.base.errors import BadRequest, ConfigError
from gate.decisions.readmodel import RequestView
from gate.delivery.channel import ChannelContext, DeliveryError

log = logging.getLogger("gate.channels.slack")

#: posts and updates run in the outbox pump, which retries; no need to wait long
API_TIMEOUT = 10.0
#: Slack errors that say "try again later" with HTTP 200
TRANSIENT_ERRORS = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)


class SlackChannel:
    """Posts cards with chat.postMessage, refreshes them with chat.update, takes clicks."""

    name = "slack"
    display_name = "Slack"
    settings_model = SlackSettings
    #: how an approver sends the console's link code here (`gate.web.identities`)
    link_hint = "In Slack, type /gate link {code} (in any conversation; only you see the answer)."

    def __init__(
        self,
        settings: SlackSettings,
        gate: ChannelContext,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if settings.bot_token is None or not settings.bot_token.get_secret_value().strip():
            raise ConfigError("a bot_token is required", key="channels.slack.bot_token")
        secret = settings.signing_secret
        if secret is None or not secret.get_secret_value().strip():
            raise ConfigError("a signing_secret is required", key="channels.slack.signing_secret")
        self.settings = settings
        # every click says how much of a call the card showed: gate refuses approving the rest
        gate = decisions.Showing(gate, ARGS_CHARS, "Slack")
        self.gate = gate
        self._secret = secret.get_secret_value().encode()
        self._clock = clock
        self._clicks = Clicks(self.name, gate, self.call, clock=clock)
        self._session: aiohttp.ClientSession | None = None
        self._client: AsyncWebClient | None = None

    @classmethod
    def from_settings(cls, settings: SlackSettings, gate: ChannelContext) -> SlackChannel:
        """Build from `[channels.slack]`."""
        return cls(settings, gate)

    def client(self) -> AsyncWebClient:
        """The Web API client, on one shared HTTP session (made on first use, in the loop)."""
        if self._client is None or self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=API_TIMEOUT))
            assert self.settings.bot_token is not None
            self._client = AsyncWebClient(
                token=self.settings.bot_token.get_secret_value(),
                base_url=self.settings.api_url,
                session=self._session,
                # No SDK retries: a 429 or 5xx must reach the outbox, which owns backoff.
                retry_handlers=[],
            )
        return self._client

    async def call(self, method: str, /, **kwargs: Any) -> AsyncSlackResponse:
        """One Web API call; every failure is a DeliveryError the outbox knows how to retry."""
        try:
            response: AsyncSlackResponse = await self.client().api_call(method, json=kwargs)
            return response
        except SlackApiError as exc:
            raise delivery_error(method, exc) from None
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise DeliveryError(f"Slack {method}: {type(exc).__name__}: {exc}") from None

    async def post(self, req: RequestView, target: str) -> str:
        """Post the card; the reference is `<channel id>:<ts>`, what chat.update needs."""
        text, blocks = await anyio.to_thread.run_sync(card_message, req)
        response = await self.call(
            "chat.postMessage",
            channel=target,
            text=text,
            blocks=blocks,
            unfurl_links=False,
            unfurl_media=False,
        )
        return f"{response.get('channel') or target}:{response.get('ts')}"

    async def update(self, req: RequestView, target: str, ref: str) -> None:
        """Replace the card with the request's current state (buttons gone once final)."""
        channel, _, ts = ref.partition(":")
        if not ts:
            raise DeliveryError(f"not a Slack message reference: {ref!r}", permanent=True)
        text, blocks = await anyio.to_thread.run_sync(card_message, req)
        await self.call("chat.update", channel=channel, ts=ts, text=text, blocks=blocks)

    def router(self) -> APIRouter:
        """`POST /channels/slack/interactions`, Slack's Interactivity Request URL."""
        router = APIRouter()
        router.add_api_route(
            "/channels/slack/interactions",
            self.interactions,
            methods=["POST"],
            include_in_schema=False,
        )
        router.add_api_route(
            "/channels/slack/commands", self.commands, methods=["POST"], include_in_schema=False
        )
        return router

    async def aclose(self) -> None:
        """Close the HTTP session."""
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = self._client = None

    def verify(self, body: bytes, headers: Mapping[str, str]) -> None:
        """Check Slack's signature and the 5-minute window on the raw body; 401 otherwise."""
        verify_signature(self._secret, body, headers, now=self._clock())

    async def interactions(self, request: Request, background: BackgroundTasks) -> Response:
        """Verify, parse, act, answer: Slack wants the 200 within 3 seconds."""
        body = await request.body()
        self.verify(body, request.headers)  # before anything reads the body
        try:
            interaction = parse_interaction(form_payload(body))
        except ValueError as exc:
            raise BadRequest(f"not a Slack interaction: {exc}", code="bad_slack_payload") from None
        retry = request.headers.get("x-slack-retry-num") is not None
        return await self._clicks.handle(interaction, background, retry=retry)

    async def commands(self, request: Request) -> Response:
        """`/gate link <code>`, the slash command's Request URL: verify, then bind the
        typer's Slack id with the console's code; the answer is private to them."""
        body = await request.body()
        self.verify(body, request.headers)  # before anything reads the body
        try:
            command = parse_command(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(f"not a Slack command: {exc}", code="bad_slack_payload") from None
        text = USAGE
        if command.code is not None:
            text = (await self.gate.link(self.name, command.user_id, command.code)).message
        return JSONResponse({"response_type": "ephemeral", "text": text})


def delivery_error(method: str, exc: SlackApiError) -> DeliveryError:
    """Map a Slack API failure onto the outbox's retry rules."""
    response = exc.response
    status = int(getattr(response, "status_code", 0) or 0)
    data = getattr(response, "data", None)
    error = str(data.get("error")) if isinstance(data, dict) and data.get("error") else None
    what = f"Slack {method} failed: {error or 'no error code'}"
    if status != 200:
        what += f" (HTTP {status})"
    if status == 429 or error == "ratelimited":
        headers = getattr(response, "headers", None) or {}
        retry_after = headers.get("Retry-After") or headers.get("retry-after")
        try:
            seconds = float(retry_after) if retry_after is not None else 1.0
        except ValueError:
            seconds = 1.0
        return DeliveryError(what, retry_after=max(seconds, 0.0))
    if status >= 500 or error in TRANSIENT_ERRORS:
        return DeliveryError(what)
    # Anything else Slack calls an error (ok: false with HTTP 200: channel_not_found,
    # invalid_auth, not_in_channel, token_revoked, missing_scope, invalid_blocks ...) is about
    # this call or this app, not the moment: retrying the same call would fail the same way.
    return DeliveryError(what, permanent=True)
