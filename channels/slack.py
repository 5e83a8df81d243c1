"""Slack: Block Kit approval cards (slack-sdk AsyncWebClient) and verified button callbacks.

Two pure translators do the work: `render_card(view)` turns a request into blocks, and
`parse_action(payload)` turns an interaction payload into an `Action`. The route around
them is glue: verify the signature on the raw bytes, parse, decide, answer within 3 s.

Card text built from tool arguments is untrusted. Every such string is cleaned (unicode
bidi and control characters stripped, secrets masked), escaped for mrkdwn (`&`, `<`, `>`),
cut to Slack's limits, and shown only inside inline code or a code block.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qs

import aiohttp
from fastapi import APIRouter, BackgroundTasks, Request, Response
from fastapi.responses import JSONResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import Clock, SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from channels.base import DeliveryError, GateContext
from gate.config import SlackSettings
from gate.errors import BadRequest, ConfigError, Unauthenticated
from gate.machine import AlreadyFinal, AlreadyVoted, Voted
from gate.models import RequestStatus
from gate.policy import may_decide
from gate.service import already_final_message
from gate.views import RequestView

log = logging.getLogger("gate.channels.slack")

APPROVE_ACTION = "gate_approve"
REJECT_ACTION = "gate_reject"
REJECT_CALLBACK = "gate_reject_reason"
REASON_BLOCK = "reason"
REASON_INPUT = "reason_input"

# Slack's Block Kit limits (docs.slack.dev, and slack-sdk's own block classes).
MAX_SECTION_TEXT = 3000
MAX_FIELD_TEXT = 2000
MAX_HEADER_TEXT = 150
MAX_FALLBACK_TEXT = 4000
#: what we allow one inline value (tool, agent, user...) before cutting: a card is read at
#: a glance, the web page has the rest
MAX_INLINE = 200
#: the modal's reason box; the reason is what the model is told, so a paragraph is plenty
MAX_REASON = 2000
#: views.open must use the trigger_id within Slack's 3 s; leave room to answer the click
INTERACTIVE_TIMEOUT = 2.5
#: posts and updates run in the outbox pump, which retries; no need to wait long
API_TIMEOUT = 10.0

#: Slack errors that say "try again later" with HTTP 200
TRANSIENT_ERRORS = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)

_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# Bidi overrides/isolates/marks, zero-width characters and C0/C1 controls other than \n and
# \t: they can make a card read differently from what it says (Trojan Source style).
_INVISIBLE = re.compile(
    "[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028\u2029"
    "\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)
_SECRET_KEY = re.compile(
    r"(password|passwd|passphrase|secret|private_?key|credential|cookie|"
    r"(^|[_.-])(pwd|token|api_?key|apikey|access_?key|auth|authorization|session_?id)$)",
    re.IGNORECASE,
)
MASK = "[masked]"
_SECRET_VALUES = [
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|$)", re.S),
    re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{6,}"),
    re.compile(r"\bxapp-[A-Za-z0-9-]{6,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
]
# `password=hunter2`, `"token": "abc"`, `Authorization: Bearer abc`: keep the key, mask the value
_SECRET_ASSIGN = re.compile(
    r"(?i)((?:password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|"
    r"client[_-]?secret)[\"']?\s*[:=]\s*[\"']?)([^\s\"'&,;]+)"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic|token)\s+([A-Za-z0-9._~+/=-]{8,})")
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]+:)([^@\s/]+)(@)")


# -- cleaning untrusted text ----------------------------------------------------------------


def mask_text(text: str) -> str:
    """Replace things that look like secrets (tokens, keys, passwords) with a mask."""
    for pattern in _SECRET_VALUES:
        text = pattern.sub(MASK, text)
    text = _SECRET_ASSIGN.sub(lambda m: m.group(1) + MASK, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    return _URL_PASSWORD.sub(lambda m: m.group(1) + MASK + m.group(3), text)


def mask_value(value: Any) -> Any:
    """Mask secrets in a JSON-like value: by key name, and by pattern inside strings."""
    if isinstance(value, dict):
        return {
            str(k): MASK if _SECRET_KEY.search(str(k)) and v not in (None, "") else mask_value(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [mask_value(v) for v in value]
    if isinstance(value, str):
        return mask_text(value)
    return value


def escape(text: str) -> str:
    """Escape Slack's three control characters (`&` first), which neutralises `<...>` syntax."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def clean(text: str) -> str:
    """Strip invisible and direction-changing characters, then mask secrets."""
    return mask_text(_INVISIBLE.sub("", text))


def cut(escaped: str, limit: int) -> str:
    """Cut already-escaped text to `limit` characters without splitting an `&...;` entity."""
    if len(escaped) <= limit:
        return escaped
    head = escaped[: limit - 1]
    amp = head.rfind("&")
    if amp != -1 and ";" not in head[amp:]:
        head = head[:amp]
    return head + "…"


def inline(value: Any, limit: int = MAX_INLINE) -> str:
    """An untrusted value as one line of inline code: no formatting, mentions or links."""
    if value is None or value == "":
        return "—"
    text = " ".join(clean(str(value)).split())
    # A backtick would end the inline code and let mrkdwn formatting back in.
    text = escape(text.replace("`", "ˋ"))
    return f"`{cut(text, limit - 2)}`"


def plain(value: Any, limit: int) -> str:
    """An untrusted value for a plain_text object: cleaned, escaped, cut."""
    return cut(escape(" ".join(clean(str(value)).split())), limit)


def args_block_text(args: dict[str, Any], url: str) -> str:
    """The arguments as a code block that fits one section, with a link when cut."""
    body = json.dumps(mask_value(args), indent=2, ensure_ascii=False, default=str)
    # Backticks become a look-alike so "```" inside an argument cannot close the block.
    body = escape(_INVISIBLE.sub("", body).replace("`", "ˋ"))
    head, tail = "*Arguments*\n```\n", "\n```"
    more = f"\n_Cut to fit Slack: <{url}|view all in gate>_"
    if len(head) + len(body) + len(tail) <= MAX_SECTION_TEXT:
        return head + body + tail
    return head + cut(body, MAX_SECTION_TEXT - len(head) - len(tail) - len(more)) + tail + more


# -- the card -------------------------------------------------------------------------------

_TITLES = {
    "pending": "Approval needed",
    "approved": "Approved",
    "rejected": "Rejected",
    "expired": "Expired",
    "cancelled": "Cancelled",
}


def _when(view_time: Any) -> str:
    return f"{view_time:%Y-%m-%d %H:%M} UTC" if view_time else "—"


def _mrkdwn(text: str) -> dict[str, Any]:
    # verbatim: no auto-linking of URLs or channel names in what we send.
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def _plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text, "emoji": False}


def fallback_text(view: RequestView) -> str:
    """The notification / screen-reader line Slack shows outside the blocks."""
    title = _TITLES.get(view.status, view.status)
    summary = f": {plain(view.summary, 300)}" if view.summary else ""
    return cut(f"{title}: {plain(view.tool_name, MAX_INLINE)}{summary}", MAX_FALLBACK_TEXT)


def render_card(view: RequestView) -> list[dict[str, Any]]:
    """The Block Kit blocks for a request: the question while pending, the outcome after."""
    iteration = f"{view.status}-{len(view.votes)}"  # block_ids must change with each update
    title = _TITLES.get(view.status, view.status)
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            "text": _plain(cut(f"{title}: {plain(view.tool_name, MAX_HEADER_TEXT)}", 150)),
        }
    ]
    if view.summary:
        blocks.append({"type": "section", "text": _plain(plain(view.summary, MAX_SECTION_TEXT))})
    fields = [
        f"*Tool*\n{inline(view.tool_name)}",
        f"*Rule*\n{inline(view.rule)}",
        f"*Agent*\n{inline(view.agent_id)}",
        f"*User*\n{inline(view.user_id)}",
        f"*Deadline*\n{_when(view.expires_at)}",
        f"*Approvals*\n{_approvals(view)}",
    ]
    blocks.append(
        {
            "type": "section",
            "block_id": f"facts-{iteration}",
            "fields": [_mrkdwn(cut(f, MAX_FIELD_TEXT)) for f in fields],
        }
    )
    blocks.append(
        {
            "type": "section",
            "block_id": f"args-{iteration}",
            "text": _mrkdwn(args_block_text(view.tool_args, view.url)),
        }
    )
    if view.status == "pending":
        blocks.append(_buttons(view, iteration))
    else:
        blocks.append(
            {
                "type": "section",
                "block_id": f"outcome-{iteration}",
                "text": _mrkdwn(_outcome(view)),
            }
        )
    blocks.append(
        {
            "type": "context",
            "elements": [_mrkdwn(f"Request {inline(view.id, 70)} · <{view.url}|Open in gate>")],
        }
    )
    return blocks


def _approvals(view: RequestView) -> str:
    names = ", ".join(escape(v.approver) for v in view.approvals)
    count = f"{len(view.approvals)} of {view.approvals_required}"
    return cut(f"{count} approval{'s' if view.approvals_required > 1 else ''}", 100) + (
        f" ({cut(names, 500)})" if names else ""
    )


def _outcome(view: RequestView) -> str:
    text = f"*{escape(view.outcome_sentence())}*"
    if view.decided_at:
        text += f" at {_when(view.decided_at)}"
    rejecting = [v for v in view.votes if v.verdict == "reject" and v.comment]
    if view.status == "rejected" and rejecting:
        text += f"\n*Reason:* {inline(rejecting[-1].comment, MAX_REASON)}"
    return cut(text, MAX_SECTION_TEXT)


def _buttons(view: RequestView, iteration: str) -> dict[str, Any]:
    return {
        "type": "actions",
        "block_id": f"decide-{iteration}",
        "elements": [
            {
                "type": "button",
                "action_id": APPROVE_ACTION,
                "style": "primary",
                "text": _plain("Approve"),
                "value": view.id,
                "confirm": {
                    "title": _plain("Approve this call?"),
                    "text": _plain("The agent's tool call will run as shown."),
                    "confirm": _plain("Approve"),
                    "deny": _plain("Cancel"),
                },
            },
            {
                "type": "button",
                "action_id": REJECT_ACTION,
                "style": "danger",
                "text": _plain("Reject…"),
                "value": view.id,
            },
        ],
    }


def reason_modal(request_id: str, channel_id: str | None, message_ts: str | None) -> dict[str, Any]:
    """The modal that asks why a request is rejected; the reason is what the model is told."""
    meta = json.dumps({"request_id": request_id, "channel_id": channel_id, "ts": message_ts})
    return {
        "type": "modal",
        "callback_id": REJECT_CALLBACK,
        "private_metadata": meta,
        "title": _plain("Reject request"),
        "submit": _plain("Reject"),
        "close": _plain("Cancel"),
        "blocks": [
            {
                "type": "input",
                "block_id": REASON_BLOCK,
                "label": _plain("Why? The agent is told this."),
                "element": {
                    "type": "plain_text_input",
                    "action_id": REASON_INPUT,
                    "multiline": True,
                    "max_length": MAX_REASON,
                },
            }
        ],
    }


# -- reading interactions -------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    """What an interaction asks for, in gate's terms."""

    kind: Literal["approve", "ask_reason", "reject", "ignore"]
    user_id: str = ""
    request_id: str = ""
    channel_id: str | None = None
    message_ts: str | None = None
    trigger_id: str | None = None
    reason: str | None = None


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
    if action_id not in (APPROVE_ACTION, REJECT_ACTION):
        return Action("ignore", user_id)  # e.g. a link button: acknowledged, nothing to do
    container, channel = _obj(payload, "container"), _obj(payload, "channel")
    trigger = payload.get("trigger_id")
    return Action(
        "approve" if action_id == APPROVE_ACTION else "ask_reason",
        user_id,
        _request_id(first.get("value")),
        _str(container.get("channel_id")) or _str(channel.get("id")),
        _str(container.get("message_ts")),
        trigger if isinstance(trigger, str) and trigger else None,
    )


def _parse_submission(payload: Mapping[str, Any], user_id: str) -> Action:
    view = payload.get("view")
    if not isinstance(view, dict) or view.get("callback_id") != REJECT_CALLBACK:
        return Action("ignore", user_id)
    try:
        meta = json.loads(view.get("private_metadata") or "")
        values = view["state"]["values"]
        entry = values[REASON_BLOCK][REASON_INPUT]
    except (ValueError, KeyError, TypeError):
        raise ValueError("the modal submission lacks its request or reason") from None
    if not isinstance(meta, dict) or not isinstance(entry, dict):
        raise ValueError("the modal submission lacks its request or reason")
    reason = entry.get("value")
    return Action(
        "reject",
        user_id,
        _request_id(meta.get("request_id")),
        _str(meta.get("channel_id")),
        _str(meta.get("ts")),
        reason=reason.strip() if isinstance(reason, str) else "",
    )


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
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("the payload is not a JSON object")
    return data


# -- the channel ----------------------------------------------------------------------------


class _FuncClock(Clock):
    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now

    def now(self) -> float:
        return self._now()


class SlackChannel:
    """Posts cards with chat.postMessage, refreshes them with chat.update, takes clicks."""

    name = "slack"

    def __init__(
        self, settings: SlackSettings, gate: GateContext, *, clock: Callable[[], float] = time.time
    ) -> None:
        if settings.bot_token is None or not settings.bot_token.get_secret_value().strip():
            raise ConfigError("a bot_token is required", key="channels.slack.bot_token")
        secret = settings.signing_secret
        if secret is None or not secret.get_secret_value().strip():
            raise ConfigError("a signing_secret is required", key="channels.slack.signing_secret")
        self.settings = settings
        self.gate = gate
        self.verifier = SignatureVerifier(secret.get_secret_value(), clock=_FuncClock(clock))
        self._session: aiohttp.ClientSession | None = None
        self._client: AsyncWebClient | None = None

    @classmethod
    def from_settings(cls, settings: SlackSettings, gate: GateContext) -> SlackChannel:
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
        response = await self._call(
            "chat.postMessage",
            channel=target,
            text=fallback_text(req),
            blocks=render_card(req),
            unfurl_links=False,
            unfurl_media=False,
        )
        return f"{response.get('channel') or target}:{response.get('ts')}"

    async def update(self, req: RequestView, target: str, ref: str) -> None:
        """Replace the card with the request's current state (buttons gone once final)."""
        channel, _, ts = ref.partition(":")
        if not ts:
            raise DeliveryError(f"not a Slack message reference: {ref!r}", permanent=True)
        await self._call(
            "chat.update", channel=channel, ts=ts, text=fallback_text(req), blocks=render_card(req)
        )

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
        """Check Slack's signature and the 5-minute window on the raw body; 401 otherwise."""
        timestamp = headers.get("x-slack-request-timestamp")
        signature = headers.get("x-slack-signature")
        valid = False
        if timestamp and signature and timestamp.isascii() and timestamp.isdigit():
            try:
                valid = self.verifier.is_valid(body, timestamp, signature)
            except ValueError:  # a body that is not UTF-8 cannot have been signed by Slack
                valid = False
        if not valid:
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
        elif action.kind == "ask_reason":
            await self._ask_reason(action, background)
        elif action.kind == "reject":
            return await self._reject(action)
        return Response(status_code=200)

    async def _approve(self, action: Action, background: BackgroundTasks, *, retry: bool) -> None:
        result = await self.gate.decide(
            request_id=action.request_id,
            channel=self.name,
            user_id=action.user_id,
            verdict="approve",
            comment=None,
        )
        repeat = isinstance(result.outcome, AlreadyFinal | AlreadyVoted)
        if result.changed and not isinstance(result.outcome, Voted):
            return  # the outbox refreshes the card, which is the answer everybody sees
        if retry and repeat:
            return  # Slack re-sent a click we already handled; the clicker was answered then
        self._tell(background, action, result.message())

    async def _ask_reason(self, action: Action, background: BackgroundTasks) -> None:
        view = await self.gate.view(action.request_id)
        refusal = self._refusal(view, action.user_id)
        if refusal:
            self._tell(background, action, refusal)
            return
        if action.trigger_id is None:
            self._tell(background, action, "Slack sent no trigger to open the reason dialog.")
            return
        modal = reason_modal(action.request_id, action.channel_id, action.message_ts)
        try:
            async with asyncio.timeout(INTERACTIVE_TIMEOUT):
                await self._call("views.open", trigger_id=action.trigger_id, view=modal)
        except (DeliveryError, TimeoutError) as exc:
            log.warning("views.open for %s failed: %s", action.request_id, exc)
            url = view.url if view else ""
            self._tell(background, action, f"Could not open the reason dialog; reject at {url}")

    def _refusal(self, view: RequestView | None, user_id: str) -> str | None:
        """Why this user cannot reject now (checked again, for real, on submission)."""
        if view is None:
            return "This request no longer exists."
        if view.is_final:
            status = RequestStatus(view.status)
            final = AlreadyFinal(
                view.id, status, view.decided_by, view.decided_at, view.decided_via
            )
            return already_final_message(final)
        approver = self.gate.settings.approver_by_identity(self.name, user_id)
        if approver is None:
            return "Not recorded: you are not an approver for this rule."
        why = may_decide(
            approver, actor_name=approver.name, allowed=view.approvers, requester=view.user_id
        )
        return f"Not recorded: {why}." if why else None

    async def _reject(self, action: Action) -> Response:
        if not action.reason:
            return _modal_error("Say why, so the agent knows what to do instead.")
        result = await self.gate.decide(
            request_id=action.request_id,
            channel=self.name,
            user_id=action.user_id,
            verdict="reject",
            comment=action.reason[:MAX_REASON],
        )
        if result.changed or self._own_rejection(result.outcome, action.user_id):
            return Response(status_code=200)  # closes the modal; the outbox refreshes the card
        return _modal_error(result.message())

    def _own_rejection(self, outcome: object, user_id: str) -> bool:
        """A second submission (or a retry) of a rejection this person already made."""
        approver = self.gate.settings.approver_by_identity(self.name, user_id)
        return (
            isinstance(outcome, AlreadyFinal)
            and approver is not None
            and outcome.status == RequestStatus.rejected
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


def _modal_error(message: str) -> Response:
    # Shown under the reason box; the modal stays open so the approver sees why.
    body = {"response_action": "errors", "errors": {REASON_BLOCK: cut(escape(message), 150)}}
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
