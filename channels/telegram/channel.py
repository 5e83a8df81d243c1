"""`TelegramChannel`: the glue between the Bot API and gate's channel port.

Cards go out with sendMessage and are edited in place with editMessageText (the outbox calls
`post` and `update`). `POST /channels/telegram/webhook` checks the secret header before it
reads a byte of the body, acts once per `update_id`, and turns a button press, a typed
command or a reply to a prompt into a `Click` for gate. The clicker is answered privately
with answerCallbackQuery (a press) or in a reply to their message (typed text); the card
everybody sees is refreshed by the outbox. Who may act and what a rule offers are gate's
answers; this module only carries them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

import anyio
import httpx
from fastapi import APIRouter, Request

from channels import decisions
from channels.inbound import Once, load_json, same_secret
from channels.telegram import replies
from channels.telegram.api import TelegramApi
from channels.telegram.card import ARGS_CHARS, editable, render
from channels.telegram.settings import TelegramSettings
from channels.telegram.tokens import Button, NotOurs, Sealer
from channels.telegram.updates import Press, Typed, link_code, read_update, update_id
from gate.base.errors import BadRequest, Unauthenticated
from gate.base.statuses import utcnow
from gate.decisions.acting import Result
from gate.decisions.outcomes import Extended
from gate.decisions.readmodel import RequestView
from gate.delivery.channel import ChannelContext, Click, DeliveryError

log = logging.getLogger("gate.channels.telegram")

SECRET_HEADER = "x-telegram-bot-api-secret-token"
#: Telegram shows a pressed button as loading until it is answered, and refuses answers to
#: old queries; gate answers within this, and the decision lands in the background if slow
ACK_BUDGET_SECONDS = 2.5
#: sends a person the words of a decision that landed after their answer went out
Tell = Callable[[str], Awaitable[None]]
#: update ids remembered for redeliveries (Telegram resends an update until it gets a 200)
DEDUPE_SIZE = 4096


class TelegramChannel:
    """Posts cards as a bot, edits them in place, and takes presses, commands and replies."""

    name = "telegram"
    display_name = "Telegram"
    settings_model = TelegramSettings
    #: how an approver sends the console's link code here (`gate.web.identities`)
    link_hint = "In a private chat with gate's bot on Telegram, send /link {code}."

    def __init__(
        self,
        settings: TelegramSettings,
        gate: ChannelContext,
        *,
        clock: Callable[[], float] = time.time,
        transport: httpx.AsyncBaseTransport | None = None,
        ack_budget: float = ACK_BUDGET_SECONDS,
    ) -> None:
        self.settings = settings
        # every click says how much of a call the card showed: gate refuses approving the rest
        gate = decisions.Showing(gate, ARGS_CHARS, "Telegram")
        self.gate = gate
        self.ack_budget = ack_budget
        self.api = TelegramApi(settings, transport=transport)
        self.sealer = Sealer(settings.callback_secret.get_secret_value())
        self._updates: Once[None] = Once(size=DEDUPE_SIZE, clock=clock)
        self._background: set[asyncio.Future[Any]] = set()
        self._answer = replies.Answers(self.api, self.sealer)

    @classmethod
    def from_settings(cls, settings: TelegramSettings, gate: ChannelContext) -> TelegramChannel:
        """Build from `[channels.telegram]`."""
        return cls(settings, gate)

    # -- Channel protocol ---------------------------------------------------------------------

    async def post(self, req: RequestView, target: str) -> str:
        """Send the card to a chat; the reference is the message_id."""
        card = await anyio.to_thread.run_sync(render, req, self.sealer)
        body = {"chat_id": target, **replies.card_body(card)}
        return str(await self.api.send_message(body))

    async def update(self, req: RequestView, target: str, ref: str) -> None:
        """Edit the card in place to show the request's current state."""
        if not ref.isascii() or not ref.isdigit():
            raise DeliveryError(f"not a Telegram message id: {ref[:40]!r}", permanent=True)
        card = await anyio.to_thread.run_sync(render, req, self.sealer)
        body = {"chat_id": target, "message_id": int(ref), **replies.card_body(card)}
        await self.api.edit_message(body)

    def router(self) -> APIRouter:
        """`POST /channels/telegram/webhook`: the updates Telegram pushes."""
        router = APIRouter(tags=["telegram"])

        @router.post("/channels/telegram/webhook", include_in_schema=False)
        async def webhook(request: Request) -> dict[str, Any]:
            self.check_secret(request.headers)
            return await self.handle(await request.body())

        return router

    async def aclose(self) -> None:
        """Let in-flight decisions finish, then close the HTTP client."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self.api.aclose()

    # -- the webhook --------------------------------------------------------------------------

    def check_secret(self, headers: Mapping[str, str]) -> None:
        """The secret_token given to setWebhook must come back in the header (401 before the
        body is read otherwise)."""
        sent = headers.get(SECRET_HEADER)
        expected = self.settings.webhook_secret.get_secret_value()
        if sent is None or not same_secret(sent, expected):
            raise Unauthenticated("missing or wrong secret token header", code="bad_secret")

    async def handle(self, body: bytes) -> dict[str, Any]:
        """Act on one verified Update, once per update_id; answer 200 with an empty body."""
        try:
            payload = load_json(body)
        except ValueError:
            raise BadRequest(
                "the body is not JSON (or is nested too deeply)", code="bad_update"
            ) from None
        key = f"update:{update_id(payload)}"
        inbound = read_update(payload, self.settings.bot_id)
        if inbound is not None:
            await self._updates.run(key, lambda: self._act(inbound))
        return {}

    async def _act(self, inbound: Press | Typed) -> None:
        try:
            if isinstance(inbound, Press):
                await self._press(inbound)
            else:
                await self._typed(inbound)
        except DeliveryError as exc:
            # Acted on, but the answer did not reach Telegram: a redelivery must not act
            # again, and the card is refreshed by the outbox anyway.
            log.warning("telegram answer not delivered: %s", exc)

    # -- presses ------------------------------------------------------------------------------

    async def _press(self, press: Press) -> None:
        try:
            button = self.sealer.open(press.data)
        except NotOurs:
            await self._answer.press(press, replies.NOT_OURS, alert=True)
            return
        if button.kind in ("reject", "edit"):
            await self._prompt(press, button)
            return
        if button.kind == "extend":
            await self._extend(press, button)
            return
        if button.kind == "acknowledge":  # a second press is told who was first
            ack = Click(self.name, press.user_id, button.request_id, "acknowledge")
            result = await self.gate.act(ack)
            await self._answer.press(press, result.message(), alert=result.refusal is not None)
            return
        click = await self._click_for(press, button)
        if isinstance(click, str):
            await self._answer.press(press, click, alert=True)
            return
        text, refused = await self._decide(click, lambda late: self._tell_presser(press, late))
        await self._answer.press(press, text, alert=refused)

    async def _click_for(self, press: Press, button: Button) -> Click | str:
        """The Click an approve, grant or preset-reason button means (or why it cannot be)."""
        if button.kind == "approve":
            return Click(self.name, press.user_id, button.request_id, "approve")
        if button.kind == "grant":
            assert button.grant is not None
            scope, seconds = button.grant
            grant = (scope, f"{seconds}s")
            return Click(self.name, press.user_id, button.request_id, "approve", grant=grant)
        view = await self.gate.view(button.request_id)
        bare = Click(self.name, press.user_id, button.request_id, "reject")
        if view is None or view.is_final:
            return bare  # gate says "no longer exists" / "already approved by X"
        try:
            picked = decisions.reasons_from(view, [f"r{button.reason}"])
        except ValueError as exc:
            return f"Not recorded: {exc}."
        return Click(self.name, press.user_id, button.request_id, "reject", reasons=tuple(picked))

    async def _decide(self, click: Click, tell_late: Tell) -> tuple[str, bool]:
        """Hand the click to gate; (what to tell the person, whether it was refused).

        Answers within the budget even when deciding takes longer: the decision still lands,
        the outbox refreshes the card when it does, and `tell_late` gets the words of a
        decision that then did not count (the answer already said "Recording...").
        """
        task = asyncio.ensure_future(self.gate.act(click))
        self._track(task)
        try:
            result = await asyncio.wait_for(asyncio.shield(task), self.ack_budget)
        except TimeoutError:
            self._track(asyncio.ensure_future(self._tell_late(click, task, tell_late)))
            return replies.RECORDING, False
        return _told(click, result)

    async def _tell_late(self, click: Click, decided: asyncio.Future[Result], tell: Tell) -> None:
        """The decision behind a "Recording..." answer: when it was refused or changed nothing
        (someone else decided first), the person is told, or they would believe it counted."""
        text = await decisions.late_words(decided, self.name)
        if text is None:
            return  # recorded: the card the outbox refreshes says so
        try:
            await tell(text)
        except DeliveryError as exc:
            log.warning("telegram late answer not delivered: %s", exc)

    async def _tell_presser(self, press: Press, text: str) -> None:
        """A late answer to a press: its query was answered already, so a message in the
        card's chat, replying to the card, names the presser (an inline mention)."""
        if press.chat_id is None:
            raise DeliveryError("no chat to answer the press in", permanent=True)
        approver = self.gate.settings.approver_by_identity(self.name, press.user_id)
        await self._answer.late(press, press.chat_id, approver.name if approver else None, text)

    def _track(self, task: asyncio.Future[Any]) -> None:
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(_retrieve)

    async def _extend(self, press: Press, button: Button) -> None:
        click = Click(
            self.name,
            press.user_id,
            button.request_id,
            "extend",
            extend_by=decisions.EXTEND_BY,
            extend_from=button.shown,
        )
        moved = await self.gate.act(click)
        if isinstance(moved.outcome, Extended):
            await self._answer.press(press, decisions.extend_message(moved, utcnow()))
        else:
            await self._answer.press(press, moved.message(), alert=True)

    async def _prompt(self, press: Press, button: Button) -> None:
        """Reject… or Edit & approve…: if this person may act, ask for a reply."""
        refusal, view = await decisions.refusal(
            self.gate, self.name, button.request_id, press.user_id, approving=button.kind == "edit"
        )
        if refusal or view is None:
            await self._answer.press(press, refusal or replies.GONE, alert=True)
            return
        if button.kind == "edit" and not editable(view):
            await self._answer.press(press, replies.NOTHING_EDITABLE, alert=True)
            return
        kind: Literal["reject", "edit"] = "reject" if button.kind == "reject" else "edit"
        # No prompt, no reply to tie to the request: rejecting can be typed, but a typed
        # /approve would approve the call unedited, so edits go to gate's page.
        instead = replies.TYPE_INSTEAD if kind == "reject" else replies.EDIT_IN_GATE
        if press.chat_id is None:
            await self._answer.press(press, instead, alert=True)
            return
        try:
            await self._answer.prompt(press.chat_id, press.message_id, kind, view)
        except DeliveryError as exc:
            log.warning("telegram prompt not posted: %s", exc)
            await self._answer.press(press, instead, alert=True)
            return
        await self._answer.press(press, replies.REPLY_BELOW)

    # -- typed messages -----------------------------------------------------------------------

    async def _typed(self, typed: Typed) -> None:
        code = link_code(typed.text, self.settings.bot_username)
        if code is not None:
            await self._answer.reply(typed, await self._link(typed, code))
            return
        click = await replies.click_from_message(
            self.name, typed, self.gate, self.sealer, self.settings.bot_username
        )
        if click is None:
            return
        if isinstance(click, str):
            await self._answer.reply(typed, click)
            return
        text, _ = await self._decide(click, lambda late: self._answer.reply(typed, late))
        await self._answer.reply(typed, text)

    async def _link(self, typed: Typed, code: str) -> str:
        """`/link <code>`: bind the sender's Telegram id (Telegram names who sent it; a
        forwarded message never gets here) with the console's one-time code."""
        if not code:
            return replies.LINK_USAGE
        # a private chat's id is the person's id; anywhere else others read the code, which
        # is then used up (whoever read it could send it first from their own account)
        exposed = str(typed.chat_id) != typed.user_id
        return (await self.gate.link(self.name, typed.user_id, code, exposed=exposed)).message


def _told(click: Click, result: Result) -> tuple[str, bool]:
    """What the person is told of a decision, and whether it did not count."""
    if result.refusal is not None:
        log.info("telegram user %s refused: %s", click.user_id, result.refusal.value)
    return result.message(), not decisions.counted(result)


def _retrieve(task: asyncio.Future[Any]) -> None:
    # A decision that fails after the answer went out must not warn "never retrieved".
    if not task.cancelled():
        task.exception()
