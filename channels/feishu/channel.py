"""`FeishuChannel`: the glue between the open platform and gate's channel port.

Cards go out through `FeishuApi` (post, update by PATCH). `POST /channels/feishu/events`
verifies the raw bytes (`Verifier`), parses the click (`parse_action`), translates it into a
`Click` (`to_click`) and hands it to gate, then answers inside Feishu's 3-second budget with a
toast and the updated card. Who may act and what a rule offers are gate's answers; this
module only carries them.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import httpx
from fastapi import APIRouter, Request

from channels import decisions
from channels.feishu.answers import answer, card_content, late_content, toast, toast_for
from channels.feishu.api import FeishuApi
from channels.feishu.card import ARGS_CHARS, editable
from channels.feishu.clicks import NOTHING_EDITABLE, CardAction, parse_action, to_click
from channels.feishu.settings import FeishuSettings
from channels.feishu.verify import Verifier
from channels.inbound import Once
from gate.base.errors import ConfigError, Unauthenticated
from gate.base.statuses import utcnow
from gate.decisions.acting import Result
from gate.decisions.outcomes import Extended
from gate.decisions.readmodel import RequestView
from gate.delivery.channel import ChannelContext, Click, DeliveryError

log = logging.getLogger("gate.channels.feishu")

#: Feishu shows the clicker an error after 3 s; leave room for the network
ACK_BUDGET_SECONDS = 2.5
#: event ids remembered for duplicate deliveries (a few minutes of clicks)
DEDUPE_SIZE = 1024
RECORDING = "Recording your decision; the card updates in a moment."
#: a decision that failed after "Recording...": gate cannot say it counted


class FeishuChannel:
    """Posts cards with the tenant token, updates them by PATCH, and takes clicks."""

    name = "feishu"
    display_name = "Feishu"
    settings_model = FeishuSettings

    def __init__(
        self,
        settings: FeishuSettings,
        gate: ChannelContext,
        *,
        clock: Callable[[], float] = time.time,
        transport: httpx.AsyncBaseTransport | None = None,
        ack_budget: float = ACK_BUDGET_SECONDS,
    ) -> None:
        if not settings.app_id or settings.app_secret is None:
            raise ConfigError("app_id and app_secret are required", key="channels.feishu")
        self.settings = settings
        # every click says how much of a call the card showed: gate refuses approving the rest
        gate = decisions.Showing(gate, ARGS_CHARS, "Feishu")
        self.gate = gate
        #: seconds since the epoch; replaced in tests to move time without sleeping
        self.clock = clock
        #: how long a click waits for its decision before answering "recording..."
        self.ack_budget = ack_budget
        self.api = FeishuApi(settings, clock=clock, transport=transport)
        self.verifier = Verifier(settings, clock)
        # Feishu redelivers a callback it got no answer to, with the same event id: each
        # event is acted on once, and a repeat gets the first answer.
        self._events: Once[dict[str, Any]] = Once(size=DEDUPE_SIZE, clock=clock)
        self._background: set[asyncio.Future[Any]] = set()
        if settings.encrypt_key is None:
            log.warning(
                "channels.feishu has no encrypt_key: callbacks are checked by verification "
                "token only (it travels in clear). Set an Encrypt Key in production."
            )

    @classmethod
    def from_settings(cls, settings: FeishuSettings, gate: ChannelContext) -> FeishuChannel:
        """Build from `[channels.feishu]`."""
        return cls(settings, gate)

    # -- Channel protocol -------------------------------------------------------------------

    async def post(self, req: RequestView, target: str) -> str:
        """Send the card to a chat (or person); returns the message_id."""
        digest = hashlib.sha256(target.encode()).hexdigest()[:8]
        content = await anyio.to_thread.run_sync(card_content, req)
        # Feishu sends one message per uuid per hour: a retried post never duplicates.
        return await self.api.create_message(target, content, f"gate-{req.id}-{digest}"[:50])

    async def update(self, req: RequestView, target: str, ref: str) -> None:
        """Replace the card with the request's current state (PATCH the message)."""
        await self.api.patch_message(ref, await anyio.to_thread.run_sync(card_content, req))

    def router(self) -> APIRouter:
        """`POST /channels/feishu/events`: challenge, card clicks."""
        router = APIRouter(tags=["feishu"])

        @router.post("/channels/feishu/events", include_in_schema=False)
        async def events(request: Request) -> dict[str, Any]:
            body = await request.body()
            return await self.handle(request.headers, body)

        return router

    async def aclose(self) -> None:
        """Close the HTTP client and let in-flight decisions finish."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self.api.aclose()

    # -- callbacks --------------------------------------------------------------------------

    async def handle(self, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        """Verify, decrypt and answer one callback; raises the one error body when refused."""
        callback = self.verifier.open(headers, body)
        payload, signed = callback.payload, callback.signed
        if payload.get("type") == "url_verification":
            self.verifier.check_token(payload.get("token"))
            return {"challenge": str(payload.get("challenge", ""))}
        if self.settings.encrypt_key is not None and not signed:
            raise Unauthenticated("missing X-Lark-Signature headers", code="bad_signature")
        if signed != "legacy":
            header = payload.get("header")
            self.verifier.check_token(header.get("token") if isinstance(header, dict) else None)
            event_type = header.get("event_type") if isinstance(header, dict) else None
            if event_type != "card.action.trigger":
                return {}  # an event we did not subscribe to: acknowledge, do nothing
        action = parse_action(payload)
        # A delivery is acted on once: by its event id, or (the legacy callback has none) by
        # its signature, which covers a timestamp and nonce of its own. A replayed body, or
        # a retry, of an Extend click must not move the deadline again.
        key = action.event_id or (
            f"signature:{headers.get('x-lark-signature')}" if signed else None
        )
        if key is None:
            return await self._act(action)
        reply, _ = await self._events.run(key, lambda: self._act(action))
        return reply

    async def _act(self, action: CardAction) -> dict[str, Any]:
        """Decide (or open the edit form, or extend), and answer with a toast and the card."""
        if action.verdict in ("edit", "view"):
            return await self._show(action)
        if action.verdict == "extend":
            return await self._extend(action)
        if action.verdict == "acknowledge":
            ack = Click(self.name, action.open_id, action.request_id, "acknowledge")
            done = await self.gate.act(ack)
            note = toast("success", done.message()) if done.changed else toast_for(done)
            return await answer(note, done.view, legacy=action.legacy)
        # The form names reasons and edit boxes by their place on the card: read them back
        # against the request as it is (an Approve press names neither).
        view = None if action.verdict == "approve" else await self.gate.view(action.request_id)
        click = to_click(self.name, action, view)
        if isinstance(click, str):
            return {"toast": toast("error", click)}
        return await self._decide(action, click)

    async def _decide(self, action: CardAction, click: Click) -> dict[str, Any]:
        """Hand the click to gate; answer within the budget even when deciding takes longer.

        The decision still lands then, the outbox refreshes the card when it does, and a
        decision that did not count is told to the clicker privately (`_tell_late`).
        """
        task = asyncio.ensure_future(self.gate.act(click))
        self._track(task)
        try:
            result = await asyncio.wait_for(asyncio.shield(task), self.ack_budget)
        except TimeoutError:
            self._track(asyncio.ensure_future(self._tell_late(action, task)))
            return {"toast": toast("info", RECORDING)}
        _log_refusal(action, result)
        return await answer(toast_for(result), result.view, legacy=action.legacy)

    async def _tell_late(self, action: CardAction, decided: asyncio.Future[Result]) -> None:
        """The decision behind a "Recording..." toast: when it was refused or changed nothing
        (someone decided first), the clicker is told in a private message from the app, or
        they would believe it counted. The toast cannot say it: the callback was answered."""
        text = await decisions.late_words(decided, self.name)
        if text is None:
            return
        try:
            await self.api.message_user(action.open_id, late_content(text))
        except DeliveryError as exc:
            log.warning("feishu late answer to %s not delivered: %s", action.open_id, exc)

    def _track(self, task: asyncio.Future[Any]) -> None:
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(_retrieve)

    async def _extend(self, action: CardAction) -> dict[str, Any]:
        """Move the deadline by one Extend step, if gate lets this person."""
        click = Click(
            self.name,
            action.open_id,
            action.request_id,
            "extend",
            extend_by=decisions.EXTEND_BY,
            extend_from=action.extend_from,
        )
        moved = await self.gate.act(click)
        if isinstance(moved.outcome, Extended):
            note = toast("success", decisions.extend_message(moved, utcnow()))
        else:
            note = toast_for(moved)
        return await answer(note, moved.view, legacy=action.legacy)

    async def _show(self, action: CardAction) -> dict[str, Any]:
        """Swap the card between its decision form and its edit form."""
        view = await self.gate.view(action.request_id)
        if action.verdict == "view" or view is None:
            return await answer(toast("info", "Back to the decision."), view, legacy=action.legacy)
        refusal, view = await decisions.refusal(
            self.gate, self.name, action.request_id, action.open_id, approving=True
        )
        if refusal or view is None:
            note = toast("error", refusal or "This request no longer exists.")
            return await answer(note, view, legacy=action.legacy)
        if not editable(view):
            return await answer(toast("error", NOTHING_EDITABLE), view, legacy=action.legacy)
        note = toast("info", "Change the values, then press Approve with edits.")
        return await answer(note, view, legacy=action.legacy, editing=True)


def _log_refusal(action: CardAction, result: Result) -> None:
    if result.refusal is not None:
        # open_ids are per app and hard to look up: log it so an admin can add the person.
        log.info("feishu click by %s refused: %s", action.open_id, result.refusal.value)


def _retrieve(task: asyncio.Future[Any]) -> None:
    # A decision that fails after the 3 s answer went out must not warn "never retrieved".
    if not task.cancelled():
        task.exception()
