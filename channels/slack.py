"""Slack: Block Kit approval cards (slack-sdk AsyncWebClient) and verified button callbacks.

Two pure translators do the work: `render_card(view)` turns a request into blocks, and
`parse_action(payload)` turns an interaction payload into an `Action`. The route around
them is glue: verify the signature on the raw bytes, parse, decide, answer within 3 s.

The rendering (and the escaping of untrusted text) lives in `channels.slack_card`; its
names are re-exported here.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qs

import aiohttp
import anyio
from fastapi import APIRouter, BackgroundTasks, Request, Response
from fastapi.responses import JSONResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from channels import decisions
from channels.inbound import Once, load_json, same_secret
from channels.slack_card import (
    APPROVE_ACTION,
    COMMENT_BLOCK,
    COMMENT_INPUT,
    EDIT_ACTION,
    EDIT_CALLBACK,
    EDIT_INPUT,
    EXTEND_ACTION,
    GRANT_ACTION,
    MASK,
    MAX_REASON,
    REASON_BLOCK,
    REASON_INPUT,
    REASONS_BLOCK,
    REASONS_INPUT,
    REJECT_ACTION,
    REJECT_CALLBACK,
    args_block_text,
    clean,
    cut,
    edit_block_id,
    edit_modal,
    editable,
    escape,
    fallback_text,
    inline,
    mask_text,
    mask_value,
    plain,
    reason_modal,
    render_card,
)
from gate.acting import Refusal, Result
from gate.channel import ChannelContext, Click, DeliveryError
from gate.config import SlackSettings
from gate.errors import BadRequest, ConfigError, Unauthenticated
from gate.machine import AlreadyFinal, AlreadyVoted, Voted
from gate.models import RequestStatus, utcnow
from gate.readmodel import RequestView

log = logging.getLogger("gate.channels.slack")

#: views.open must use the trigger_id within Slack's 3 s; leave room to answer the click
INTERACTIVE_TIMEOUT = 2.5
#: posts and updates run in the outbox pump, which retries; no need to wait long
API_TIMEOUT = 10.0

#: Slack errors that say "try again later" with HTTP 200
TRANSIENT_ERRORS = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)

_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: Slack signs "v0:<timestamp>:<body>" and accepts a request for five minutes either way
SIGNATURE_WINDOW_SECONDS = 300
#: Extend clicks remembered to tell a repeat delivery from a new click (far more than a team
#: makes in the five-minute window)
EXTEND_MEMORY = 10_000


# -- reading interactions -------------------------------------------------------------------

Kind = Literal["approve", "ask_reason", "reject", "ask_edits", "edit", "extend", "ignore"]
_BUTTONS: dict[str, Kind] = {
    APPROVE_ACTION: "approve",
    REJECT_ACTION: "ask_reason",
    EDIT_ACTION: "ask_edits",
    EXTEND_ACTION: "extend",
}


@dataclass(frozen=True)
class Action:
    """What an interaction asks for, in gate's terms."""

    kind: Kind
    user_id: str = ""
    request_id: str = ""
    channel_id: str | None = None
    message_ts: str | None = None
    trigger_id: str | None = None
    reason: str | None = None
    #: (scope, duration) picked in the "Approve for a while" select
    grant: tuple[str, str] | None = None
    #: option values (`r<index>`) of the preset reject reasons ticked in the modal
    reasons: tuple[str, ...] = ()
    #: (block_id, text) of each edit box in the "Edit & approve" modal
    edits: tuple[tuple[str, str], ...] = ()
    #: when Slack says the click happened (`actions[].action_ts`); with trigger_id it tells
    #: a new click from the same click delivered again
    action_ts: str | None = None

    @property
    def click_id(self) -> str:
        """The same for every delivery of one click, different for the next click."""
        return "|".join(
            (self.kind, self.user_id, self.request_id, self.trigger_id or "", self.action_ts or "")
        )


def parse_action(payload: Mapping[str, Any]) -> Action:
    """Translate a Slack interaction payload; raises ValueError when it is malformed."""
    kind = payload.get("type")
    if kind not in ("block_actions", "view_submission"):
        return Action("ignore")
    user = payload.get("user")
    user_id = user.get("id") if isinstance(user, dict) else None
    if not isinstance(user_id, str) or not _ID.match(user_id):
        raise ValueError("the payload has no valid user.id")
    if kind == "view_submission":
        return _parse_submission(payload, user_id)
    actions = payload.get("actions")
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        raise ValueError("a block_actions payload needs actions[]")
    first = actions[0]
    action_id = first.get("action_id")
    grant = None
    request_id: Any
    if action_id == GRANT_ACTION:
        selected = first.get("selected_option")
        value = selected.get("value") if isinstance(selected, dict) else None
        request_id, _, choice = str(value or "").partition("|")
        grant = decisions.parse_grant(choice)
        clicked: Kind = "approve"
    elif action_id in _BUTTONS:
        request_id, clicked = first.get("value"), _BUTTONS[action_id]
    else:
        return Action("ignore", user_id)  # e.g. a link button: acknowledged, nothing to do
    container, channel = _obj(payload, "container"), _obj(payload, "channel")
    trigger = payload.get("trigger_id")
    return Action(
        clicked,
        user_id,
        _request_id(request_id),
        _str(container.get("channel_id")) or _str(channel.get("id")),
        _str(container.get("message_ts")),
        trigger if isinstance(trigger, str) and trigger else None,
        grant=grant,
        action_ts=_str(first.get("action_ts")),
    )


def _parse_submission(payload: Mapping[str, Any], user_id: str) -> Action:
    view = payload.get("view")
    callback = view.get("callback_id") if isinstance(view, dict) else None
    if not isinstance(view, dict) or callback not in (REJECT_CALLBACK, EDIT_CALLBACK):
        return Action("ignore", user_id)
    try:
        meta = load_json(view.get("private_metadata") or "")
        values = view["state"]["values"]
        if not isinstance(meta, dict) or not isinstance(values, dict):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise ValueError("the modal submission lacks its request or values") from None
    where = (
        _request_id(meta.get("request_id")),
        _str(meta.get("channel_id")),
        _str(meta.get("ts")),
    )
    if callback == EDIT_CALLBACK:
        edits = tuple(
            (block_id, _input_text(values, block_id, EDIT_INPUT))
            for block_id in values
            if isinstance(block_id, str) and block_id.startswith("edit_")
        )
        comment = _input_text(values, COMMENT_BLOCK, COMMENT_INPUT).strip()
        return Action("edit", user_id, *where, reason=comment or None, edits=edits)
    picked = _obj(_obj(values, REASONS_BLOCK), REASONS_INPUT).get("selected_options") or []
    reasons = tuple(str(o.get("value")) for o in picked if isinstance(o, dict) and o.get("value"))
    if REASON_BLOCK not in values and not reasons:
        raise ValueError("the modal submission lacks its reason")
    reason = _input_text(values, REASON_BLOCK, REASON_INPUT).strip()
    return Action("reject", user_id, *where, reason=reason, reasons=reasons)


def _input_text(values: Mapping[str, Any], block_id: str, action_id: str) -> str:
    value = _obj(_obj(values, block_id), action_id).get("value")
    return value if isinstance(value, str) else ""


def _request_id(value: Any) -> str:
    if not isinstance(value, str) or not _ID.match(value):
        raise ValueError("the button carries no valid request id")
    return value


def _obj(payload: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = payload.get(key)
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def form_payload(body: bytes) -> dict[str, Any]:
    """The JSON object in a form-encoded `payload=` body (or a raw JSON body)."""
    text = body.decode("utf-8")
    if text.lstrip().startswith("{"):
        raw = text
    else:
        fields = parse_qs(text, keep_blank_values=True, strict_parsing=False)
        if "payload" not in fields:
            raise ValueError("the body has no payload field")
        raw = fields["payload"][0]
    data = load_json(raw)
    if not isinstance(data, dict):
        raise ValueError("the payload is not a JSON object")
    return data


# -- the channel ----------------------------------------------------------------------------


class SlackChannel:
    """Posts cards with chat.postMessage, refreshes them with chat.update, takes clicks."""

    name = "slack"
    display_name = "Slack"
    settings_model = SlackSettings

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
        self.gate = gate
        self._secret = secret.get_secret_value().encode()
        self._clock = clock
        # Extend is the one click that is not idempotent (each one adds time), so a retried
        # or replayed delivery of it must be recognised; every other click decides, and a
        # second decision is refused by the state machine anyway.
        self._extends: Once[Result] = Once(
            size=EXTEND_MEMORY, window=SIGNATURE_WINDOW_SECONDS, clock=clock
        )
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

    async def _call(self, method: str, **kwargs: Any) -> AsyncSlackResponse:
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
        response = await self._call(
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
        await self._call("chat.update", channel=channel, ts=ts, text=text, blocks=blocks)

    def router(self) -> APIRouter:
        """`POST /channels/slack/interactions`, Slack's Interactivity Request URL."""
        router = APIRouter()
        router.add_api_route(
            "/channels/slack/interactions",
            self.interactions,
            methods=["POST"],
            include_in_schema=False,
        )
        return router

    async def aclose(self) -> None:
        """Close the HTTP session."""
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = self._client = None

    # -- the callback -----------------------------------------------------------------------

    def verify(self, body: bytes, headers: Mapping[str, str]) -> None:
        """Check Slack's signature and the 5-minute window on the raw body; 401 otherwise.

        The HMAC is over the bytes as received and compared as bytes, so any header text
        (non-ASCII, absurdly long) is a mismatch, never an exception.
        """
        timestamp = headers.get("x-slack-request-timestamp") or ""
        signature = headers.get("x-slack-signature") or ""
        # isdigit() alone accepts "²"; more than 12 digits is no Unix time gate will see.
        fresh = timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12
        if fresh:
            fresh = abs(self._clock() - int(timestamp)) <= SIGNATURE_WINDOW_SECONDS
        if fresh and signature:
            base = b"v0:" + timestamp.encode() + b":" + body
            expected = "v0=" + hmac.new(self._secret, base, hashlib.sha256).hexdigest()
            if same_secret(signature, expected):
                return
        raise Unauthenticated(
            "the Slack signature is missing, wrong or too old", code="invalid_signature"
        )

    async def interactions(self, request: Request, background: BackgroundTasks) -> Response:
        """Verify, parse, decide, answer: Slack wants the 200 within 3 seconds."""
        body = await request.body()
        self.verify(body, request.headers)
        try:
            action = parse_action(form_payload(body))
        except ValueError as exc:
            raise BadRequest(f"not a Slack interaction: {exc}", code="bad_slack_payload") from None
        retry = request.headers.get("x-slack-retry-num") is not None
        if action.kind == "approve":
            await self._approve(action, background, retry=retry)
        elif action.kind in ("ask_reason", "ask_edits"):
            await self._open_modal(action, background)
        elif action.kind == "extend":
            await self._extend(action, background)
        elif action.kind == "reject":
            return await self._reject(action)
        elif action.kind == "edit":
            return await self._edit(action)
        return Response(status_code=200)

    async def _approve(self, action: Action, background: BackgroundTasks, *, retry: bool) -> None:
        result = await self._decide(action, "approve", grant=action.grant)
        if result.refusal is Refusal.not_offered:  # a grant the rule no longer offers
            self._tell(background, action, result.message())
            return
        repeat = isinstance(result.outcome, AlreadyFinal | AlreadyVoted)
        if result.changed and not isinstance(result.outcome, Voted):
            return  # the outbox refreshes the card, which is the answer everybody sees
        if retry and repeat:
            return  # Slack re-sent a click we already handled; the clicker was answered then
        self._tell(background, action, result.message())

    async def _open_modal(self, action: Action, background: BackgroundTasks) -> None:
        """Reject... and Edit & approve... open a modal (with the click's trigger_id)."""
        refusal, view = await decisions.refusal(
            self.gate, self.name, action.request_id, action.user_id
        )
        if refusal or view is None:
            self._tell(background, action, refusal or "This request no longer exists.")
            return
        what = "reason" if action.kind == "ask_reason" else "edit"
        modal = await anyio.to_thread.run_sync(_modal, action, view)
        if modal is None:
            text = f"Nothing here can be edited in Slack; edit it in gate: {view.url}"
            self._tell(background, action, text)
            return
        if action.trigger_id is None:
            self._tell(background, action, f"Slack sent no trigger to open the {what} dialog.")
            return
        try:
            async with asyncio.timeout(INTERACTIVE_TIMEOUT):
                await self._call("views.open", trigger_id=action.trigger_id, view=modal)
        except (DeliveryError, TimeoutError) as exc:
            log.warning("views.open for %s failed: %s", action.request_id, exc)
            self._tell(background, action, f"Could not open the {what} dialog; use {view.url}")

    async def _extend(self, action: Action, background: BackgroundTasks) -> None:
        """One click, one extension: a repeat delivery of the click shares the first's result.

        Slack may deliver a click again (a retry after a slow answer), and a captured signed
        body can be replayed for five minutes; both carry the click's trigger_id and
        action_ts, so they are recognised and answered without moving the deadline again.
        """

        async def extend() -> Result:
            click = Click(
                self.name, action.user_id, action.request_id, "extend",
                extend_by=decisions.EXTEND_BY,
            )  # fmt: skip
            return await self.gate.act(click)

        result, repeat = await self._extends.run(action.click_id, extend)
        if repeat:
            return  # the clicker was answered when the click was first handled
        # Moved: the outbox refreshes the card for everybody; the clicker also hears it here.
        self._tell(background, action, decisions.extend_message(result, utcnow()))

    async def _reject(self, action: Action) -> Response:
        if not action.reason and not action.reasons:
            return _modal_error("Say why, so the agent knows what to do instead.")
        view = await self.gate.view(action.request_id)
        block = REASONS_BLOCK if action.reasons else REASON_BLOCK
        try:
            reasons = decisions.reasons_from(view, list(action.reasons)) if view else []
        except ValueError as exc:
            return _modal_error(str(exc), block)
        result = await self._decide(action, "reject", reasons=reasons)
        if result.refusal is Refusal.not_offered:
            return _modal_error(result.detail or result.message(), block)
        if result.changed or self._own_decision(result.outcome, action.user_id, "rejected"):
            return Response(status_code=200)  # closes the modal; the outbox refreshes the card
        return _modal_error(result.message())

    async def _edit(self, action: Action) -> Response:
        """The "Edit & approve" modal was submitted: approve with the edited arguments."""
        view = await self.gate.view(action.request_id)
        fields = editable(view) if view is not None else []
        by_block = {edit_block_id(i): f for i, f in enumerate(fields)}
        first = edit_block_id(0) if fields else COMMENT_BLOCK
        if view is None or view.is_final or not fields:
            why, _ = await decisions.refusal(
                self.gate, self.name, action.request_id, action.user_id
            )
            return _modal_error(why or "Nothing here can be edited any more.", first)
        texts = {by_block[b].key: text for b, text in action.edits if b in by_block}
        edited, errors = decisions.apply_edits(view, fields, texts)
        if errors:
            block_of = {f.key: b for b, f in by_block.items()}
            return _modal_errors({block_of[k]: why for k, why in errors.items()})
        result = await self._decide(action, "approve", edits=edited)
        if result.refusal is Refusal.not_offered:  # e.g. the rule forbids edits
            return _modal_error(result.detail or result.message(), first)
        if result.changed or self._own_decision(result.outcome, action.user_id, "approved"):
            return Response(status_code=200)
        return _modal_error(result.message(), first)

    async def _decide(
        self,
        action: Action,
        verdict: Literal["approve", "reject"],
        *,
        reasons: list[str] | None = None,
        edits: dict[str, Any] | None = None,
        grant: tuple[str, str] | None = None,
    ) -> Result:
        """Decide as the clicker; the modal's text (if any) is the comment."""
        click = Click(
            self.name,
            action.user_id,
            action.request_id,
            verdict,
            comment=(action.reason or "")[:MAX_REASON] or None,
            reasons=tuple(reasons or ()),
            edits=edits,
            grant=grant,
        )
        return await self.gate.act(click)

    def _own_decision(self, outcome: object, user_id: str, status: str) -> bool:
        """A second submission (or a retry) of a decision this person already made."""
        approver = self.gate.settings.approver_by_identity(self.name, user_id)
        return (
            isinstance(outcome, AlreadyFinal)
            and approver is not None
            and outcome.status == RequestStatus(status)
            and outcome.decided_by == approver.name
        )

    def _tell(self, background: BackgroundTasks, action: Action, text: str) -> None:
        """Answer the clicker privately, after the 200 has gone out."""
        if action.channel_id:
            background.add_task(self._ephemeral, action.channel_id, action.user_id, text)

    async def _ephemeral(self, channel: str, user: str, text: str) -> None:
        try:
            await self._call("chat.postEphemeral", channel=channel, user=user, text=escape(text))
        except DeliveryError as exc:
            log.warning("ephemeral to %s in %s failed: %s", user, channel, exc)


def card_message(req: RequestView) -> tuple[str, list[dict[str, Any]]]:
    """The card's fallback text and blocks. Channels call it in a worker thread: rendering
    scans untrusted text, and a huge argument must not hold up the event loop."""
    return fallback_text(req), render_card(req)


def _modal(action: Action, view: RequestView) -> dict[str, Any] | None:
    """The reject or edit modal for a click (None: nothing to edit); run in a worker thread."""
    if action.kind == "ask_reason":
        reasons = decisions.reject_reasons(view)
        return reason_modal(view.id, action.channel_id, action.message_ts, reasons)
    fields = editable(view)
    if not fields:
        return None
    return edit_modal(view, fields, action.channel_id, action.message_ts)


def _modal_error(message: str, block: str = REASON_BLOCK) -> Response:
    # Shown under the named input; the modal stays open so the approver sees why.
    return _modal_errors({block: message})


def _modal_errors(errors: Mapping[str, str]) -> Response:
    body = {
        "response_action": "errors",
        "errors": {block: cut(escape(text), 150) for block, text in errors.items()},
    }
    return JSONResponse(body)


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


__all__ = [
    "Action",
    "SlackChannel",
    "args_block_text",
    "clean",
    "cut",
    "delivery_error",
    "escape",
    "fallback_text",
    "form_payload",
    "inline",
    "mask_text",
    "mask_value",
    "MASK",
    "parse_action",
    "plain",
    "reason_modal",
    "render_card",
]
