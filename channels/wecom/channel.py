"""`WeComChannel`: the glue between WeCom's server API and gate's channel port.

Cards go out through `WeComApi` (`message/send`, then `message/update_template_card` with a
ResponseCode, see `codes`). `/channels/wecom/callback` answers WeCom's URL verification (GET)
and takes callbacks (POST): `Verifier` checks the signature and window on the raw bytes and
decrypts, `clicks` reads a card click or a typed command, gate decides, and the clicker is
answered in a private text message. The callback itself is answered with an empty body
inside WeCom's 5-second budget (WeCom then neither retries nor shows anything).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import httpx
from fastapi import APIRouter, Request, Response

from channels import decisions
from channels.inbound import Once
from channels.wecom import answers, card, clicks
from channels.wecom.api import WeComApi
from channels.wecom.codes import Codes, make_ref, read_ref
from channels.wecom.settings import WeComSettings
from channels.wecom.verify import TIMESTAMP_WINDOW_SECONDS, Message, Verifier
from gate.base.errors import ConfigError
from gate.base.statuses import utcnow
from gate.decisions.acting import Result
from gate.decisions.outcomes import Acknowledged, Extended, Voted
from gate.decisions.readmodel import RequestView
from gate.delivery.channel import ChannelContext, Click, DeliveryError
from gate.text import untrusted

log = logging.getLogger("gate.channels.wecom")

#: WeCom waits 5 s for an answer, then retries. A callback waits at most this long for its
#: decision, then at most TELL_BUDGET_SECONDS for its private answer: 4 s, with room for the
#: network; what is not done by then finishes in the background.
ACK_BUDGET_SECONDS = 3.0
TELL_BUDGET_SECONDS = 1.0
#: deliveries remembered for repeats (WeCom retries three times; a replay must be in-window)
DEDUPE_SIZE = 4096
RECORDING = "Recording your decision; the card updates in a moment."
#: a decision that failed after "Recording...": gate cannot say it counted
#: a target (and message reference) naming a group chat the app created; chat ids are
#: letters and digits, so FINAL cannot be part of one
CHAT = "chat:"
FINAL = " final"


class WeComChannel:
    """Posts template cards as the app, updates them with ResponseCodes, and takes clicks."""

    name = "wecom"
    display_name = "WeCom"
    settings_model = WeComSettings

    def __init__(
        self,
        settings: WeComSettings,
        gate: ChannelContext,
        *,
        clock: Callable[[], float] = time.time,
        transport: httpx.AsyncBaseTransport | None = None,
        ack_budget: float = ACK_BUDGET_SECONDS,
    ) -> None:
        missing = [
            key
            for key in ("corp_id", "agent_id", "secret", "token", "encoding_aes_key")
            if getattr(settings, key) is None
        ]
        if missing:
            raise ConfigError(f"{', '.join(missing)} required", key="channels.wecom")
        self.settings = settings
        # every click says how much of a call the card showed: gate refuses approving the rest
        gate = decisions.Showing(gate, card.ARGS_CHARS, "WeCom")
        self.gate = gate
        #: seconds since the epoch; replaced in tests to move time without sleeping
        self.clock = clock
        self.ack_budget = ack_budget
        self.api = WeComApi(settings, clock=clock, transport=transport)
        self.verifier = Verifier(settings, clock)
        self.codes = Codes(clock)
        # WeCom redelivers a callback it got no answer to: each delivery acts once, and a
        # signed body replayed inside the window is the same delivery.
        self._events: Once[None] = Once(
            size=DEDUPE_SIZE, window=2 * TIMESTAMP_WINDOW_SECONDS, clock=clock
        )
        self._locks: dict[str, asyncio.Lock] = {}
        self._background: set[asyncio.Future[Any]] = set()

    @classmethod
    def from_settings(cls, settings: WeComSettings, gate: ChannelContext) -> WeComChannel:
        """Build from `[channels.wecom]`."""
        return cls(settings, gate)

    # -- Channel protocol -------------------------------------------------------------------

    async def post(self, req: RequestView, target: str) -> str:
        """Send the card to `target` (userids, party:<id>, tag:<id>); returns its reference.

        A group chat (`chat:<chatid>`, made by the app) gets a text card linking to gate:
        WeCom shows no buttons there, and the outcome follows as a second one.
        """
        if target.startswith(CHAT):
            notice = await anyio.to_thread.run_sync(card.chat_notice, req)
            await self.api.send_chat_card(target.removeprefix(CHAT), notice)
            # A notice posted already final (after an outage) has nothing to follow it.
            return f"{target}{FINAL}" if req.is_final else target
        task = card.task_id(req.id, target)
        rendered = await anyio.to_thread.run_sync(card.render_card, req, task)
        _, code = await self.api.send_card(target, rendered)
        return make_ref(task, code)

    async def update(self, req: RequestView, target: str, ref: str) -> None:
        """Replace the card with the request's current state, spending one ResponseCode.

        A group chat's text card cannot be replaced: its outcome is posted after it, once.
        """
        if ref.startswith(CHAT):
            if req.is_final and not ref.endswith(FINAL):
                notice = await anyio.to_thread.run_sync(card.chat_notice, req)
                await self.api.send_chat_card(ref.removeprefix(CHAT), notice)
            return
        task, post_code = read_ref(ref)
        rendered = await anyio.to_thread.run_sync(card.render_card, req, task)
        async with self._locks.setdefault(task, asyncio.Lock()):
            await self._replace(task, rendered, post_code if req.is_final else "")
        if req.is_final:
            self._locks.pop(task, None)

    async def _replace(self, task: str, rendered: dict[str, Any], post_code: str) -> None:
        """Spend the newest click code on `rendered`, else `post_code` (the final state's).

        A click code WeCom refuses for good (used, expired) is dropped and the next one
        tried; a transient failure keeps it for the outbox's next try.
        """
        while (code := self.codes.take(task)) is not None:
            try:
                await self.api.update_card(code, rendered)
                return
            except DeliveryError as exc:
                if not exc.permanent:
                    self.codes.give_back(task, code)
                    raise
                log.info("wecom card %s: a click's code was refused (%s)", task, exc)
        if not post_code or self.codes.spent(post_code):
            # Nothing to spend: a pending card keeps its last state (see codes.py).
            log.info("wecom card %s not refreshed: no ResponseCode left", task)
            return
        await self.api.update_card(post_code, rendered)
        self.codes.spend(post_code)

    def router(self) -> APIRouter:
        """`GET` (URL verification) and `POST` (callbacks) on `/channels/wecom/callback`."""
        router = APIRouter(tags=["wecom"])

        @router.get("/channels/wecom/callback", include_in_schema=False)
        async def verify_url(request: Request) -> Response:
            echo = self.verifier.echo(request.query_params)
            return Response(echo, media_type="text/plain")

        @router.post("/channels/wecom/callback", include_in_schema=False)
        async def callback(request: Request) -> Response:
            await self.handle(request.query_params, await request.body())
            return Response(b"", media_type="text/plain")

        return router

    async def aclose(self) -> None:
        """Let in-flight decisions and answers finish, then close the HTTP client."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self.api.aclose()

    # -- callbacks --------------------------------------------------------------------------

    async def handle(self, query: Mapping[str, str], body: bytes) -> None:
        """Verify, decrypt and act on one callback; raises the one error body when refused."""
        message = self.verifier.open(query, body)
        if message.agent_id != str(self.settings.agent_id):
            # Only an app sharing our Token and EncodingAESKey could send this: not ours. Every
            # message and card event WeCom sends an app names it; one naming none is not ours
            # either (company-wide events, which act on nothing here, are ignored with it).
            other = untrusted.clean(message.agent_id, 20)
            log.warning("wecom callback for agent %r ignored", other)
            return
        if message.msg_type == "event" and message.event == "template_card_event":
            pressed = clicks.card_click(message)
            if pressed is None:
                return  # a card or key gate did not make: nothing to do
            self.codes.add(message.task_id, message.response_code)
            # No event id: WeCom's retry repeats the whole XML, ResponseCode included, and
            # every new click brings a new ResponseCode.
            m = message
            key = f"card:{m.from_user}:{m.task_id}:{m.event_key}:{m.create_time}:{m.response_code}"
            await self._events.run(key, lambda: self._pressed(pressed))
        elif message.msg_type == "text":
            key = f"text:{message.msg_id or message.from_user + ':' + message.create_time}"
            await self._events.run(key, lambda: self._typed(message))
        # Anything else (entering the app, other events) is acknowledged and ignored.

    async def _pressed(self, pressed: clicks.CardClick) -> None:
        user = pressed.user
        if pressed.verb == "approve":
            click = clicks.approve_click(self.name, pressed)
        elif pressed.form:
            click = clicks.form_click(self.name, pressed, await self.gate.view(pressed.request_id))
        elif pressed.verb == "extend":
            click = Click(
                self.name, user, pressed.request_id, "extend",
                extend_by=decisions.EXTEND_BY, extend_from=pressed.extend_from,
            )  # fmt: skip
        elif pressed.verb == "acknowledge":
            click = Click(self.name, user, pressed.request_id, "acknowledge")
        else:
            await self._instruct(pressed)
            return
        if isinstance(click, str):
            await self._tell(user, click)
            return
        await self._decide(click, typed=False)

    async def _instruct(self, pressed: clicks.CardClick) -> None:
        """Reject… or Edit…: may this person act? Then what to type (and the reasons form)."""
        refusal, view = await decisions.refusal(
            self.gate, self.name, pressed.request_id, pressed.user, approving=pressed.verb == "edit"
        )
        if refusal or view is None:
            who = untrusted.clean(pressed.user, 64)
            log.info("wecom %s press by %r refused", pressed.verb, who)
            await self._tell(pressed.user, refusal or "This request no longer exists.")
            return
        if pressed.verb == "edit":
            text = answers.edit_template(view) if card.editable(view) else clicks.NOTHING_EDITABLE
            await self._tell(pressed.user, text)
            return
        if view.offers.reject_reasons:
            form = card.reasons_form(view, f"{card.FORM_TASK}-{view.id}-{uuid.uuid4().hex[:8]}")
            await self._privately(self.api.send_card(pressed.user, form))
        await self._tell(pressed.user, answers.reject_instructions(view))

    async def _typed(self, message: Message) -> None:
        typed = clicks.command(message)
        if typed is None:
            await self._tell(message.from_user, clicks.HELP)
            return
        if typed.verb == "reject":
            click = clicks.reject_click(self.name, typed)
        else:
            # Who may act first: the edit form's wording is for the request's approvers only.
            refusal, view = await decisions.refusal(
                self.gate, self.name, typed.request_id, typed.user
            )
            click = refusal or clicks.edit_click(self.name, typed, view)
        if isinstance(click, str):
            await self._tell(typed.user, click)
            return
        await self._decide(click, typed=True)

    async def _decide(self, click: Click, *, typed: bool) -> None:
        """Hand the click to gate; answer within the budget even when deciding takes longer."""
        task = asyncio.ensure_future(self.gate.act(click))
        self._track(task)
        try:
            result = await asyncio.wait_for(asyncio.shield(task), self.ack_budget)
        except TimeoutError:
            await self._tell(click.user_id, RECORDING)  # the outbox refreshes the card later
            self._track(asyncio.ensure_future(self._tell_late(click, task)))
            return
        if result.refusal is not None:
            # Say who was refused, so an admin can add the person with the right userid.
            who = untrusted.clean(click.user_id, 64)
            log.info("wecom click by %r refused: %s", who, result.refusal.value)
        text = _answer(result, typed=typed)
        if text:
            await self._tell(click.user_id, text)

    async def _tell_late(self, click: Click, decided: asyncio.Future[Result]) -> None:
        """The decision behind a "Recording..." message: when it was refused or changed
        nothing (someone decided first), the person is told, or they would believe it
        counted. A failure is logged by `_retrieve`."""
        text = await decisions.late_words(decided, self.name)
        if text is not None:  # None: recorded, and the refreshed card says so
            await self._tell(click.user_id, text)

    async def _tell(self, user: str, text: str) -> None:
        """A private text message to `user`."""
        await self._privately(self.api.send_text(user, answers.safe_text(text)))

    async def _privately(self, sending: Awaitable[Any]) -> None:
        """Send something to one person; waits a little for it, never fails the callback."""
        task = asyncio.ensure_future(sending)
        self._track(task)
        try:
            await asyncio.wait_for(asyncio.shield(task), TELL_BUDGET_SECONDS)
        except TimeoutError:
            pass  # still sending; the callback must answer WeCom in time
        except DeliveryError:
            pass  # logged by _retrieve, like a failure after the callback was answered

    def _track(self, task: asyncio.Future[Any]) -> None:
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(_retrieve)


def _answer(result: Result, *, typed: bool) -> str | None:
    """What the clicker is told; None when the refreshed card says it all."""
    if isinstance(result.outcome, Extended):
        return decisions.extend_message(result, utcnow())
    if isinstance(result.outcome, Acknowledged):  # the card says who; the clicker hears it too
        return result.message()
    if result.changed and not isinstance(result.outcome, Voted) and not typed:
        return None  # the outbox refreshes the card, which is the answer everybody sees
    return result.message()


def _retrieve(task: asyncio.Future[Any]) -> None:
    # A decision or answer that fails after the callback was answered must not warn
    # "exception never retrieved"; failures are logged where they are awaited.
    if not task.cancelled() and task.exception() is not None:
        log.warning("wecom background work failed: %s", task.exception())
