"""`DiscordChannel`: the adapter gate loads for `[channels.discord]`.

Cards are posted and edited through the bot's REST API (`channels.discord.api`), through the
outbox, which owns retries. `POST /channels/discord/interactions` is the application's
Interactions Endpoint URL: verify the Ed25519 signature on the raw bytes, parse, hand the click
to gate, answer within Discord's 3 seconds. The card is rendered by `channels.discord.card`;
clicks are translated by `channels.discord.clicks`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from channels import decisions
from channels.discord.api import DiscordApi
from channels.discord.card import ARGS_CHARS, card_message
from channels.discord.clicks import ANSWER_BUDGET_SECONDS, Clicks
from channels.discord.interaction import parse_interaction
from channels.discord.settings import DiscordSettings, is_snowflake
from channels.discord.verify import public_key, verify_signature
from channels.inbound import load_json
from gate.base.errors import BadRequest, ConfigError
from gate.decisions.readmodel import RequestView
from gate.delivery.channel import ChannelContext, DeliveryError

INTERACTIONS_PATH = "/channels/discord/interactions"


class DiscordChannel:
    """Posts cards as the bot, edits them on every change, and takes clicks."""

    name = "discord"
    display_name = "Discord"
    settings_model = DiscordSettings

    def __init__(
        self,
        settings: DiscordSettings,
        gate: ChannelContext,
        *,
        clock: Callable[[], float] = time.time,
        transport: httpx.AsyncBaseTransport | None = None,
        answer_budget: float = ANSWER_BUDGET_SECONDS,
    ) -> None:
        if settings.bot_token is None or not settings.bot_token.get_secret_value().strip():
            raise ConfigError("a bot_token is required", key="channels.discord.bot_token")
        if settings.public_key is None:
            raise ConfigError(
                "the application's public_key is required", key="channels.discord.public_key"
            )
        self.settings = settings
        # every click says how much of a call the card showed: gate refuses approving the rest
        gate = decisions.Showing(gate, ARGS_CHARS, "Discord")
        self.gate = gate
        #: seconds since the epoch, for the signature window; replaced in tests
        self.clock = clock
        self._key = public_key(settings.public_key)
        self.api = DiscordApi(settings, transport=transport)
        self.clicks = Clicks(
            self.name, gate, clock=clock, follow_up=self.api.follow_up, budget=answer_budget
        )

    @classmethod
    def from_settings(cls, settings: DiscordSettings, gate: ChannelContext) -> DiscordChannel:
        """Build from `[channels.discord]`, once every approver's Discord id is checked."""
        for approver in gate.settings.approvers:
            user_id = (approver.model_extra or {}).get("discord")
            # A username or a display name would never match a click (which carries the
            # user id), so the person could never act from Discord: say so at start-up.
            if user_id is not None and not is_snowflake(user_id):
                raise ConfigError(
                    f"approver {approver.name!r}: discord must be a user id "
                    '(Developer Mode → Copy User ID), e.g. discord = "80351110224678912"',
                    key="approvers.discord",
                )
        return cls(settings, gate)

    async def post(self, req: RequestView, target: str) -> str:
        """Post the card to a channel; the reference is `<channel id>:<message id>`."""
        if not is_snowflake(target):
            raise DeliveryError(f"not a Discord channel id: {target[:40]!r}", permanent=True)
        body = await anyio.to_thread.run_sync(card_message, req)
        return f"{target}:{await self.api.create_message(target, body)}"

    async def update(self, req: RequestView, target: str, ref: str) -> None:
        """Replace the card with the request's current state (buttons gone once final)."""
        channel_id, _, message_id = ref.partition(":")
        if not (is_snowflake(channel_id) and is_snowflake(message_id)):
            raise DeliveryError(f"not a Discord message reference: {ref[:60]!r}", permanent=True)
        body = await anyio.to_thread.run_sync(card_message, req)
        await self.api.edit_message(channel_id, message_id, body)

    def router(self) -> APIRouter:
        """`POST /channels/discord/interactions`, the Interactions Endpoint URL."""
        router = APIRouter()
        router.add_api_route(
            INTERACTIONS_PATH, self.interactions, methods=["POST"], include_in_schema=False
        )
        return router

    async def aclose(self) -> None:
        """Let clicks in flight finish, then close the HTTP client."""
        await self.clicks.aclose()
        await self.api.aclose()

    def verify(self, body: bytes, headers: Mapping[str, str]) -> None:
        """Check the Ed25519 signature and the 5-minute window on the raw body; 401 otherwise."""
        verify_signature(self._key, body, headers, now=self.clock())

    async def interactions(self, request: Request) -> JSONResponse:
        """Verify, parse, act, answer (PING too): Discord wants the answer within 3 seconds."""
        body = await request.body()
        self.verify(body, request.headers)  # before anything reads the body
        answer = await self.handle(body)
        return JSONResponse(answer)

    async def handle(self, body: bytes) -> dict[str, Any]:
        """The answer to a verified body."""
        try:
            payload = load_json(body)
            if not isinstance(payload, dict):
                raise ValueError("the body is not a JSON object")
            interaction = parse_interaction(payload)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(
                f"not a Discord interaction gate can read: {exc}", code="bad_discord_payload"
            ) from None
        return await self.clicks.handle(interaction)
