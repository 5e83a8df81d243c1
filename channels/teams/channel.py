"""`TeamsChannel`: the glue between the Bot Connector and gate's channel port.

Cards go out through `ConnectorApi` (posted to the configured conversation, replaced in
place by PUT on every outcome), through the outbox, which owns retries. `POST
/channels/teams/messages` is the bot's messaging endpoint: the connector's JWT is verified
before the body is read (`Verifier`), then the activity must agree with the token (its
`serviceUrl` claim), come from Teams and from the configured tenant. An `adaptiveCard/action`
invoke is parsed (`parse_invoke`), translated into a `Click` and handed to gate; the answer
is the presser's own view of the card, inside Teams' 5-second invoke budget.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from channels import decisions
from channels.inbound import NestedTooDeep, Once, load_json
from channels.teams.answers import card_answer, late_reply, may_still_act, message
from channels.teams.api import ConnectorApi
from channels.teams.card import ARGS_CHARS, MAX_USER_IDS, render_card
from channels.teams.clicks import (
    ENTRA_OBJECT_ID,
    CardAction,
    approve_click,
    edits_click,
    is_card_action,
    parse_invoke,
    reject_click,
)
from channels.teams.settings import TeamsSettings
from channels.teams.verify import OpenIdKeys, Verifier, check_activity
from gate.base.errors import BadRequest, ConfigError
from gate.base.statuses import utcnow
from gate.decisions.acting import Result
from gate.decisions.outcomes import Extended
from gate.decisions.readmodel import RequestView
from gate.delivery.channel import ChannelContext, Click, DeliveryError
from gate.policy.rules import FORCED_RULE

log = logging.getLogger("gate.channels.teams")

#: Teams gives an invoke 5 seconds before it retries; leave room for the network
ACK_BUDGET_SECONDS = 4.0
#: a connector token lives about an hour (plus the 5-minute skew): a replayed Extend older
#: than this fails the token check anyway
REPLAY_WINDOW_SECONDS = 3900.0
EXTEND_MEMORY = 10_000
RECORDING = "Recording your decision; the card updates in a moment."
#: the whole answer to a press from a conversation the request's card was not posted to, the
#: same whether the request exists, is pending or was decided (and by whom): it tells nothing
NOT_HERE = "gate does not take actions on this card in this conversation."
#: a press other than Approve whose request could not be read in time: nothing was done
BUSY = "gate is busy and did nothing yet: press again in a moment."


class NotHere(Exception):
    """A slow press's request turned out not to have its card in the press's conversation."""


class TeamsChannel:
    """Posts Adaptive Cards through the Bot Connector, replaces them, and takes presses."""

    name = "teams"
    display_name = "Microsoft Teams"
    settings_model = TeamsSettings

    def __init__(
        self,
        settings: TeamsSettings,
        gate: ChannelContext,
        *,
        clock: Callable[[], float] = time.time,
        transport: httpx.AsyncBaseTransport | None = None,
        ack_budget: float = ACK_BUDGET_SECONDS,
    ) -> None:
        self.settings = settings
        # every click says how much of a call the card showed: gate refuses approving the rest
        gate = decisions.Showing(gate, ARGS_CHARS, "Teams")
        self.gate = gate
        self.clock = clock
        self.ack_budget = ack_budget
        self.api = ConnectorApi(settings, clock=clock, transport=transport)
        self.keys = OpenIdKeys(settings, clock=clock, transport=transport)
        self.verifier = Verifier(settings, self.keys)
        # Extend is the one press that is not idempotent: a delivery of it repeated (a Teams
        # retry after a slow answer, or a captured body replayed with its token) is answered
        # with the first answer and moves nothing.
        self._extends: Once[dict[str, Any]] = Once(
            size=EXTEND_MEMORY, window=REPLAY_WINDOW_SECONDS, clock=clock
        )
        self._background: set[asyncio.Future[Any]] = set()

    @classmethod
    def from_settings(cls, settings: TeamsSettings, gate: ChannelContext) -> TeamsChannel:
        """Build from `[channels.teams]`, once every approver's Teams id is checked."""
        for approver in gate.settings.approvers:
            object_id = approver.identity("teams")
            # A press carries the presser's object id in lowercase and gate compares ids
            # exactly, so an id in capitals, a UPN or a display name would never match a
            # press: the person could never act from Teams. Say so at start-up instead.
            if object_id is not None and not ENTRA_OBJECT_ID.fullmatch(object_id):
                raise ConfigError(
                    f"approver {approver.name!r}: teams must be an Entra object id in "
                    'lowercase, e.g. teams = "9d3e08f9-a7ae-43aa-a4d3-de3f319a8a9c"',
                    key="approvers.teams",
                )
        return cls(settings, gate)

    # -- Channel protocol -------------------------------------------------------------------

    async def post(self, req: RequestView, target: str) -> str:
        """Post the base card to a conversation; the reference is the activity id."""
        user_ids = await self.user_ids(req, target, resolve=True)
        card = await anyio.to_thread.run_sync(lambda: render_card(req, user_ids=user_ids))
        return await self.api.send_card(target, card)

    async def update(self, req: RequestView, target: str, ref: str) -> None:
        """Replace the card with the request's current state (PUT on the activity)."""
        user_ids = await self.user_ids(req, target, resolve=True)
        card = await anyio.to_thread.run_sync(lambda: render_card(req, user_ids=user_ids))
        await self.api.replace_card(target, ref, card)

    def router(self) -> APIRouter:
        """`POST /channels/teams/messages`, the bot's messaging endpoint."""
        router = APIRouter(tags=["teams"])
        router.add_api_route(
            "/channels/teams/messages", self.messages, methods=["POST"], include_in_schema=False
        )
        return router

    async def aclose(self) -> None:
        """Close the HTTP client and let in-flight decisions finish."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self.api.aclose()

    # -- who sees the buttons ---------------------------------------------------------------

    async def user_ids(self, req: RequestView, conversation: str, *, resolve: bool) -> list[str]:
        """The Teams ids of the request's approvers in `conversation`, for `refresh.userIds`.

        Approvers are named by Entra object id; Teams' refresh wants the member id (`29:...`),
        which the connector looks up by object id (cached). `resolve=False` uses only what
        is cached (an invoke has no time for lookups). This only decides whose client fetches
        its own view by itself: who gets buttons is gate's answer to that fetch.
        """
        if req.status != "pending":
            return []
        object_ids = self._approver_object_ids(req)
        members: list[str | None]
        if resolve and object_ids:
            await self.api.app_token()  # no token is a failed delivery, before any lookup
            # Looked up together: a first card for many approvers is one round trip, not many;
            # every lookup finishes before a failure is raised (no task left running).
            looked = await asyncio.gather(
                *(self.api.member_id(conversation, oid) for oid in object_ids),
                return_exceptions=True,
            )
            failed = [r for r in looked if isinstance(r, BaseException)]
            if failed:
                raise failed[0]
            members = [r for r in looked if not isinstance(r, BaseException)]
        else:
            members = [self.api.cached_member_id(conversation, oid) for oid in object_ids]
        found = list(dict.fromkeys(m for m in members if m))
        return found[:MAX_USER_IDS]

    def _approver_object_ids(self, req: RequestView) -> list[str]:
        """The Entra object ids of the request's approvers (all approvers when the rule names
        none), the requester left out: they may not approve their own call."""
        settings = self.gate.settings
        found: list[str] = []
        for name in req.approvers or [a.name for a in settings.approvers]:
            approver = settings.approver(name)
            object_id = approver.identity(self.name) if approver is not None else None
            if approver is None or not object_id:
                continue
            if req.user_id and req.user_id in approver.identities():
                continue
            if object_id.lower() not in found:
                found.append(object_id.lower())
        return found

    # -- the messaging endpoint -------------------------------------------------------------

    async def messages(self, request: Request) -> Response:
        """Verify the token, then read the activity; answer an Action.Execute press."""
        claims = await self.verifier.claims(request.headers.get("authorization"))
        body = await request.body()  # only now: the token was issued by the connector for us
        try:
            activity = load_json(body)
        except ValueError as exc:
            why = "nested too deeply" if isinstance(exc, NestedTooDeep) else "not JSON"
            raise BadRequest(f"the activity is {why}", code="bad_activity") from None
        if not isinstance(activity, dict):
            raise BadRequest("the activity is not a JSON object", code="bad_activity")
        check_activity(claims, activity, self.settings.tenant_id)
        if not is_card_action(activity):
            return Response(status_code=200)  # messages, installs...: acknowledged, ignored
        action = parse_invoke(activity)
        conversation = activity.get("conversation")
        where = conversation.get("id") if isinstance(conversation, dict) else None
        # No conversation id is no conversation a card was posted to ("" matches no target).
        answer = await self.handle(action, where if isinstance(where, str) else "")
        return JSONResponse(answer)

    async def handle(self, action: CardAction, conversation: str) -> dict[str, Any]:
        """The invoke response for one press.

        The request id in an invoke's data comes from the client: a press naming a request
        whose card was not posted to this conversation (or no request at all) acts on
        nothing and gets `NOT_HERE`, whoever pressed, so a tenant user in an unrelated chat
        learns neither that the request exists nor who decided it.
        """
        read = asyncio.ensure_future(self.gate.view(action.request_id))
        try:  # the read counts against Teams' answer budget: a slow database must not lose it
            view = await asyncio.wait_for(asyncio.shield(read), self.ack_budget)
        except TimeoutError:
            return self._slow(action, conversation, read)
        if view is None or conversation not in self.targets(view):
            log.info("teams press on a card not in its conversation, by %s", action.object_id)
            return message(NOT_HERE)
        if action.verb == "refresh":
            return await self._refresh(action, conversation)
        if action.verb == "extend":
            key = action.delivery_key
            if key is None:
                return await self._extend(action, conversation)
            answer, _ = await self._extends.run(key, lambda: self._extend(action, conversation))
            return answer
        if action.verb == "acknowledge":  # a second one is told who was first
            ack = Click(self.name, action.object_id, action.request_id, "acknowledge")
            return await self._decide(action, ack, conversation)
        if action.verb == "approve":
            click = approve_click(self.name, action)
        else:
            translate = reject_click if action.verb == "reject" else edits_click
            click = translate(self.name, action, view)
        if isinstance(click, str):
            return await self._notice(action, conversation, click)
        return await self._decide(action, click, conversation)

    def _slow(
        self, action: CardAction, conversation: str, read: asyncio.Future[RequestView | None]
    ) -> dict[str, Any]:
        """A press whose request could not be read within the budget: an approval goes on in
        the background once the read shows the card is in this conversation ("Recording...",
        told late like any slow decision); anything else asks to press again."""
        self._track(read)
        click = approve_click(self.name, action) if action.verb == "approve" else None
        if not isinstance(click, Click):
            return message(BUSY)
        task = asyncio.ensure_future(self._act_here(read, click, conversation))
        self._track(task)
        self._track(asyncio.ensure_future(self._tell_late(action, conversation, task)))
        return message(RECORDING)

    async def _act_here(
        self, read: asyncio.Future[RequestView | None], click: Click, conversation: str
    ) -> Result:
        """`click` through gate, only when the request's card is in `conversation`."""
        view = await read
        if view is None or conversation not in self.targets(view):
            raise NotHere(click.request_id)
        return await self.gate.act(click)

    async def _view_for(self, action: CardAction) -> tuple[str | None, RequestView | None]:
        """Why this presser may not act now (None: they may), and the request's view."""
        return await decisions.refusal(self.gate, self.name, action.request_id, action.object_id)

    async def _refresh(self, action: CardAction, conversation: str) -> dict[str, Any]:
        """A client fetching the presser's own view: buttons only if gate says they may act."""
        refusal, view = await self._view_for(action)
        return await self._answer(view, conversation, actionable=refusal is None)

    async def _notice(self, action: CardAction, conversation: str, text: str) -> dict[str, Any]:
        """A press that could not be read back (no reason, a bad value): say so, keep the form."""
        refusal, view = await self._view_for(action)
        return await self._answer(
            view, conversation, actionable=refusal is None, notice=refusal or text
        )

    async def _decide(self, action: CardAction, click: Click, conversation: str) -> dict[str, Any]:
        """Hand the click to gate; answer within the budget even when deciding takes longer.

        The decision still lands then, the outbox updates the card when it does, and a
        decision that did not count is told to the presser (`_tell_late`).
        """
        task = asyncio.ensure_future(self.gate.act(click))
        self._track(task)
        try:
            result = await asyncio.wait_for(asyncio.shield(task), self.ack_budget)
        except TimeoutError:
            self._track(asyncio.ensure_future(self._tell_late(action, conversation, task)))
            return message(RECORDING)
        if result.refusal is not None:
            # Object ids are hard to look up: log it so an admin can add the person.
            log.info("teams press by %s refused: %s", click.user_id, result.refusal.value)
        note = result.message()
        if isinstance(result.outcome, Extended):
            note = decisions.extend_message(result, utcnow())
        return await self._answer(
            result.view, conversation, actionable=may_still_act(result), notice=note
        )

    async def _tell_late(
        self, action: CardAction, conversation: str, decided: asyncio.Future[Result]
    ) -> None:
        """The decision behind a "Recording..." answer: when it was refused or changed
        nothing (someone decided first), the presser is told, or they would believe it
        counted. The invoke was answered already, and a bot has no message only one member
        sees: a reply to the card in its conversation @mentions them."""
        try:
            await asyncio.shield(decided)
        except NotHere:
            return  # not this conversation's card: it is told nothing
        except Exception:
            pass  # late_words says deciding failed
        text = await decisions.late_words(decided, self.name)
        if text is None or not conversation:
            return  # recorded (the card the outbox replaces says so), or nowhere to answer
        approver = self.gate.settings.approver_by_identity(self.name, action.object_id)
        reply = late_reply(
            text,
            approver.name if approver is not None else "Teams user",
            action.member_id or action.object_id,
        )
        try:
            await self.api.reply(conversation, action.reply_to, reply)
        except DeliveryError as exc:
            log.warning("teams late answer to %s not delivered: %s", action.object_id, exc)

    def _track(self, task: asyncio.Future[Any]) -> None:
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(_retrieve)

    async def _answer(
        self,
        view: RequestView | None,
        conversation: str,
        *,
        actionable: bool,
        notice: str | None = None,
    ) -> dict[str, Any]:
        """The presser's own view of the card (`handle` answers only in a conversation the card
        was posted to), or only words."""
        user_ids = await self.user_ids(view, conversation, resolve=False) if view else []
        return await card_answer(view, user_ids, actionable=actionable, notice=notice)

    def targets(self, view: RequestView) -> set[str]:
        """The Teams conversations a request's card goes to: its rule's `teams:` entries (or
        the default target) and those it escalates to."""
        settings = self.gate.settings
        rule = next((r for r in settings.rules if r.name == view.rule), None)
        entries = rule.channels if rule is not None else None
        if rule is None and view.rule == FORCED_RULE:  # requires_confirmation, no rule
            entries = settings.server.default_channels
        if entries is None:
            found = {self.settings.default_target} if self.settings.default_target else set()
        else:
            found = {t for c, _, t in (e.partition(":") for e in entries) if c == self.name}
        found |= {
            t for c, _, t in (e.partition(":") for e in view.offers.escalate_to) if c == self.name
        }
        return found

    async def _extend(self, action: CardAction, conversation: str) -> dict[str, Any]:
        """Move the deadline by one Extend step, if gate lets this person."""
        click = Click(
            self.name,
            action.object_id,
            action.request_id,
            "extend",
            extend_by=decisions.EXTEND_BY,
            extend_from=action.extend_from,
        )
        return await self._decide(action, click, conversation)


def _retrieve(task: asyncio.Future[Any]) -> None:
    # A decision that fails after the answer went out must not warn "never retrieved".
    if not task.cancelled():
        task.exception()
