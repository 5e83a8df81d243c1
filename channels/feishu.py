"""Feishu / Lark: approval cards (JSON 2.0) over httpx, verified and decrypted callbacks.

Two pure translators do the platform work: `render_card(view)` builds the card (in
`channels.feishu_card`, re-exported here) and `parse_action(payload)` reads a click.
`FeishuChannel` is glue: a tenant-token cache, the message create/update calls, and
`POST /channels/feishu/events`, which verifies the raw bytes (signature, timestamp,
verification token), decrypts, decides and answers inside Feishu's 3-second budget with a
toast and the updated card.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from fastapi import APIRouter, Request

from channels import decisions
from channels.feishu_card import (
    ARGS_CHARS,
    CARD_BYTES,
    MASK,
    TEXT_CHARS,
    clean,
    code_block,
    editable,
    edits_from,
    mask_secrets,
    render_card,
)
from channels.inbound import NestedTooDeep, Once, load_json, same_secret
from gate.acting import Result
from gate.channel import ChannelContext, Click, DeliveryError
from gate.config import FeishuSettings
from gate.errors import BadRequest, ConfigError, Unauthenticated
from gate.machine import Extended
from gate.models import utcnow
from gate.readmodel import RequestView

log = logging.getLogger("gate.channels.feishu")

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
MESSAGES_PATH = "/open-apis/im/v1/messages"
#: codes meaning "this tenant token is no good": drop it, fetch a new one, retry once
TOKEN_INVALID = {99991663, 99991664, 99991665, 99991668, 99991671, 99991677}
#: frequency limits (app-wide, per chat, per message, and older message-create codes)
RATE_LIMITED = {99991400, 230020, 11232, 11233, 11247}
#: retrying cannot help: bot not in chat, bad receive_id/card, no permission, recalled...
PERMANENT = {
    10013, 10014, 10015, 99991401, 99991672, 99991676, 230001, 230002, 230006,
    230011, 230013, 230025, 230031, 230053, 230099, 230110, 232009,
}  # fmt: skip
#: the SDKs refresh 3-10 minutes early; five keeps a 2-hour token for 1h55m
TOKEN_MARGIN_SECONDS = 300.0
#: Feishu documents no replay window; five minutes is the Slack convention and ours
TIMESTAMP_WINDOW_SECONDS = 300
#: Feishu shows the clicker an error after 3 s; leave room for the network
ACK_BUDGET_SECONDS = 2.5
#: event ids remembered for duplicate deliveries (a few minutes of clicks)
DEDUPE_SIZE = 1024
#: what a card button may ask for: decide, open or leave the edit form, extend the deadline
VERDICTS = ("approve", "reject", "edit", "approve_edits", "view", "extend")

# -- clicks ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CardAction:
    """A click on one of our buttons, as the platform reported it."""

    request_id: str
    verdict: str
    open_id: str
    comment: str | None
    event_id: str | None
    message_id: str | None
    legacy: bool = False
    #: option values (`r<index>`) of the preset reject reasons picked in the form
    reasons: tuple[str, ...] = ()
    #: the "approve for a while" choice (`scope:duration`), if one was picked
    grant: str | None = None
    #: the edit form's texts by field index ("approve_edits")
    edits: tuple[tuple[int, str], ...] = ()


def parse_action(payload: Mapping[str, Any]) -> CardAction:
    """Read a `card.action.trigger` body (schema 2.0, or the legacy flat shape)."""
    legacy = "schema" not in payload and "event" not in payload
    event = payload if legacy else payload.get("event")
    if not isinstance(event, Mapping):
        raise BadRequest("card callback has no event", code="bad_callback")
    action = event.get("action")
    if not isinstance(action, Mapping):
        raise BadRequest("card callback has no action", code="bad_callback")
    value = action.get("value")
    if isinstance(value, str):
        try:
            value = load_json(value)
        except ValueError:
            value = None
    if not isinstance(value, Mapping):
        raise BadRequest("the button value is not ours", code="bad_callback")
    request_id, verdict = value.get("request_id"), value.get("verdict")
    if not isinstance(request_id, str) or not request_id or verdict not in VERDICTS:
        raise BadRequest("the button value is not ours", code="bad_callback")
    operator = event.get("operator")
    open_id = event.get("open_id") if legacy else None
    if isinstance(operator, Mapping):
        open_id = operator.get("open_id")
    if not isinstance(open_id, str) or not open_id:
        raise BadRequest("card callback names no operator", code="bad_callback")
    form = action.get("form_value")
    form = form if isinstance(form, Mapping) else {}
    comment = form.get("reason")
    comment = clean(comment, 500, mask=False).strip() if isinstance(comment, str) else None
    picked = form.get("reasons")
    reasons = tuple(str(r) for r in picked) if isinstance(picked, list) else ()
    grant = form.get("grant") if isinstance(form.get("grant"), str) else None
    header = payload.get("header")
    event_id = header.get("event_id") if isinstance(header, Mapping) else None
    context = event.get("context")
    message_id = (
        context.get("open_message_id") if isinstance(context, Mapping) else None
    ) or event.get("open_message_id")
    return CardAction(
        request_id=request_id,
        verdict=str(verdict),
        open_id=open_id,
        comment=comment or None,
        event_id=str(event_id) if event_id else None,
        message_id=str(message_id) if message_id else None,
        legacy=legacy,
        reasons=reasons,
        grant=grant or None,
        edits=tuple(sorted(edits_from(form).items())),
    )


def toast_for(result: Result) -> dict[str, str]:
    """The toast the clicker sees for what their click did."""
    if result.changed:
        kind = "success"
    elif result.refusal is not None or result.view is None:  # refused, or no such request
        kind = "error"
    else:
        kind = "info"
    return {"type": kind, "content": result.message()}


# -- crypto ---------------------------------------------------------------------------------


def decrypt(encrypt_key: str, data: str) -> bytes:
    """AES-256-CBC with key sha256(encrypt_key) and the IV in front; ValueError if broken."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not base64") from exc
    if len(raw) < 32 or len(raw) % 16:
        raise ValueError("not a whole number of AES blocks")
    key = hashlib.sha256(encrypt_key.encode()).digest()
    decryptor = Cipher(algorithms.AES(key), modes.CBC(raw[:16])).decryptor()
    padded = decryptor.update(raw[16:]) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    return unpadder.update(padded) + unpadder.finalize()


def signature(timestamp: str, nonce: str, secret: str, body: bytes, algo: str = "sha256") -> str:
    """Feishu's callback signature: a plain hash (not an HMAC) of ts+nonce+secret+body."""
    return hashlib.new(algo, (timestamp + nonce + secret).encode() + body).hexdigest()


# -- the channel ----------------------------------------------------------------------------


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
    ) -> None:
        if not settings.app_id or settings.app_secret is None:
            raise ConfigError("app_id and app_secret are required", key="channels.feishu")
        self.settings = settings
        self.gate = gate
        #: seconds since the epoch; replaced in tests to move time without sleeping
        self.clock = clock
        self._transport = transport
        self._http: httpx.AsyncClient | None = None
        self._token: str | None = None
        self._token_expires = 0.0
        self._token_lock = asyncio.Lock()
        # Feishu redelivers a callback it got no answer to, with the same event id: each
        # event is acted on once, and a repeat gets the first answer.
        self._events: Once[dict[str, Any]] = Once(size=DEDUPE_SIZE, clock=clock)
        self._background: set[asyncio.Task[Any]] = set()
        if settings.encrypt_key is None:
            log.warning(
                "channels.feishu has no encrypt_key: callbacks are checked by verification "
                "token only (it travels in clear). Set an Encrypt Key in production."
            )

    @classmethod
    def from_settings(cls, settings: FeishuSettings, gate: ChannelContext) -> FeishuChannel:
        """Build from `[channels.feishu]`."""
        return cls(settings, gate)

    # -- API calls ------------------------------------------------------------------------

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                base_url=self.settings.base_url.rstrip("/"),
                timeout=httpx.Timeout(10.0),
                transport=self._transport,
            )
        return self._http

    async def _tenant_token(self, stale: str | None = None) -> str:
        """The cached token, or one fresh fetch shared by every caller waiting on the lock."""
        async with self._token_lock:
            fresh = self._token and self.clock() < self._token_expires
            if fresh and self._token != stale:
                assert self._token is not None
                return self._token
            assert self.settings.app_secret is not None
            body = {
                "app_id": self.settings.app_id,
                "app_secret": self.settings.app_secret.get_secret_value(),
            }
            data = await self._send("POST", TOKEN_PATH, json_body=body, token=None)
            token, expire = data.get("tenant_access_token"), data.get("expire")
            if not isinstance(token, str) or not isinstance(expire, int | float):
                raise DeliveryError("token endpoint answered without a token")
            # Short-lived tokens (tests, clock skew) keep at least half their life.
            margin = min(TOKEN_MARGIN_SECONDS, expire / 2)
            self._token, self._token_expires = token, self.clock() + expire - margin
            return token

    async def _call(
        self,
        method: str,
        path: str,
        *,
        json_body: dict[str, Any],
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        token = await self._tenant_token()
        try:
            return await self._send(method, path, json_body=json_body, params=params, token=token)
        except _TokenInvalid:
            # Revoked or expired early: one refresh (shared with concurrent callers), one retry.
            token = await self._tenant_token(stale=token)
            try:
                return await self._send(
                    method, path, json_body=json_body, params=params, token=token
                )
            except _TokenInvalid as exc:
                raise DeliveryError(f"tenant token refused twice: {exc}") from exc

    async def _send(
        self,
        method: str,
        path: str,
        *,
        json_body: dict[str, Any],
        token: str | None,
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            response = await self._client().request(
                method, path, json=json_body, params=params, headers=headers
            )
        except httpx.HTTPError as exc:
            raise DeliveryError(f"Feishu unreachable: {type(exc).__name__}: {exc}") from exc
        try:
            envelope = response.json()
            code = int(envelope.get("code", -1))
        except (ValueError, AttributeError, TypeError):
            envelope, code = {}, -1
        msg = str(envelope.get("msg", ""))[:300] if isinstance(envelope, dict) else ""
        where = f"{method} {path}: HTTP {response.status_code}, code {code} {msg}".strip()
        if code == 0 and response.status_code < 400:
            data = envelope.get("data")
            # The token endpoint puts its fields at the top level, not under `data`.
            return data if isinstance(data, dict) else envelope
        if code in TOKEN_INVALID and token is not None:
            raise _TokenInvalid(where)
        if code in RATE_LIMITED or response.status_code == 429:
            reset = response.headers.get("x-ogw-ratelimit-reset", "")
            retry_after = float(reset) if reset.replace(".", "", 1).isdigit() else 1.0
            raise DeliveryError(f"rate limited: {where}", retry_after=retry_after)
        if code in PERMANENT:
            raise DeliveryError(where, permanent=True)
        if response.status_code >= 500 or code == -1:
            raise DeliveryError(where)
        # An unknown business error on a 4xx will not fix itself by asking again.
        raise DeliveryError(where, permanent=response.status_code >= 400)

    # -- Channel protocol -------------------------------------------------------------------

    async def post(self, req: RequestView, target: str) -> str:
        """Send the card to a chat (or person); returns the message_id."""
        digest = hashlib.sha256(target.encode()).hexdigest()[:8]
        body = {
            "receive_id": target,
            "msg_type": "interactive",
            "content": await anyio.to_thread.run_sync(card_content, req),
            # Feishu sends one message per uuid per hour: a retried post never duplicates.
            "uuid": f"gate-{req.id}-{digest}"[:50],
        }
        params = {"receive_id_type": receive_id_type(target)}
        data = await self._call("POST", MESSAGES_PATH, json_body=body, params=params)
        message_id = data.get("message_id")
        if not isinstance(message_id, str):
            raise DeliveryError("message create answered without a message_id")
        return message_id

    async def update(self, req: RequestView, target: str, ref: str) -> None:
        """Replace the card with the request's current state (PATCH the message)."""
        content = await anyio.to_thread.run_sync(card_content, req)
        await self._call("PATCH", f"{MESSAGES_PATH}/{ref}", json_body={"content": content})

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
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    # -- callbacks --------------------------------------------------------------------------

    async def handle(self, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        """Verify, decrypt and answer one callback; raises the one error body when refused."""
        payload, signed = self._open(headers, body)
        if payload.get("type") == "url_verification":
            self._check_token(payload.get("token"))
            return {"challenge": str(payload.get("challenge", ""))}
        if self.settings.encrypt_key is not None and not signed:
            raise Unauthenticated("missing X-Lark-Signature headers", code="bad_signature")
        if signed != "legacy":
            header = payload.get("header")
            self._check_token(header.get("token") if isinstance(header, dict) else None)
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
        answer, _ = await self._events.run(key, lambda: self._act(action))
        return answer

    def _open(self, headers: Mapping[str, str], body: bytes) -> tuple[dict[str, Any], str | None]:
        """Check the signature on the raw bytes, then parse and decrypt."""
        if self.settings.verification_token is None:
            raise Unauthenticated("Feishu callbacks are not configured", code="not_configured")
        key = self.settings.encrypt_key.get_secret_value() if self.settings.encrypt_key else None
        token = self.settings.verification_token.get_secret_value()
        sent = headers.get("x-lark-signature")
        signed: str | None = None
        if sent:
            ts = headers.get("x-lark-request-timestamp", "")
            nonce = headers.get("x-lark-request-nonce", "")
            # isdigit() alone accepts "²" (a latin-1 header byte), which int() refuses.
            if not (ts.isascii() and ts.isdigit() and len(ts) <= 12):
                raise Unauthenticated("missing or malformed timestamp", code="bad_signature")
            if abs(self.clock() - int(ts)) > TIMESTAMP_WINDOW_SECONDS:
                raise Unauthenticated("timestamp outside the 300 s window", code="stale_request")
            # Compared as bytes: a non-ASCII header is a mismatch, not a TypeError.
            if key and same_secret(sent, signature(ts, nonce, key, body)):
                signed = "v2"
            elif same_secret(sent, signature(ts, nonce, token, body, "sha1")):
                if key:
                    # The old callback is signed with the verification token alone, which
                    # unencrypted events carry in clear: with an Encrypt Key configured, only
                    # callbacks signed with that key are trusted.
                    raise Unauthenticated(
                        "legacy card callbacks (signed with the verification token) are "
                        "refused when an encrypt_key is set; use card.action.trigger",
                        code="legacy_callback_refused",
                    )
                signed = "legacy"  # old message-card callbacks sign with the verification token
            else:
                raise Unauthenticated("signature does not match", code="bad_signature")
        payload = _json_object(body, "body", code="bad_callback")
        if "encrypt" in payload:
            if key is None:
                raise BadRequest("encrypted body but no encrypt_key is set", code="undecryptable")
            try:
                plain = decrypt(key, str(payload["encrypt"]))
            except ValueError:
                raise BadRequest(
                    "body could not be decrypted with the configured encrypt_key",
                    code="undecryptable",
                ) from None
            payload = _json_object(plain, "decrypted body", code="undecryptable")
        return payload, signed

    def _check_token(self, sent: object) -> None:
        assert self.settings.verification_token is not None
        expected = self.settings.verification_token.get_secret_value()
        if not isinstance(sent, str) or not same_secret(sent, expected):
            raise Unauthenticated("verification token does not match", code="bad_token")

    async def _act(self, action: CardAction) -> dict[str, Any]:
        """Decide (or open the edit form, or extend), and answer with a toast and the card."""
        if action.verdict in ("edit", "view"):
            return await self._show(action)
        if action.verdict == "extend":
            click = Click(
                self.name, action.open_id, action.request_id, "extend",
                extend_by=decisions.EXTEND_BY,
            )  # fmt: skip
            moved = await self.gate.act(click)
            if isinstance(moved.outcome, Extended):
                text = decisions.extend_message(moved, utcnow())
                return await self._answer(action, {"type": "success", "content": text}, moved.view)
            return await self._answer(action, toast_for(moved), moved.view)
        extras = await self._extras(action)
        if isinstance(extras, str):
            return {"toast": {"type": "error", "content": extras}}
        click = Click(
            self.name,
            action.open_id,
            action.request_id,
            "reject" if action.verdict == "reject" else "approve",
            comment=action.comment,
            **extras,
        )
        task = asyncio.ensure_future(self.gate.act(click))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(_retrieve)
        try:
            result = await asyncio.wait_for(asyncio.shield(task), ACK_BUDGET_SECONDS)
        except TimeoutError:
            # The decision still lands; the outbox refreshes the card when it does.
            text = "Recording your decision; the card updates in a moment."
            return {"toast": {"type": "info", "content": text}}
        if result.refusal is not None:
            # open_ids are per app and hard to look up: log it so an admin can add the person.
            log.info("feishu click by %s refused: %s", action.open_id, result.refusal.value)
        return await self._answer(action, toast_for(result), result.view)

    async def _answer(
        self, action: CardAction, toast: dict[str, str], view: RequestView | None, **kw: Any
    ) -> dict[str, Any]:
        answer: dict[str, Any] = {"toast": toast}
        if view is not None and not action.legacy:
            # In a worker thread: rendering scans untrusted text (see card_content).
            card = await anyio.to_thread.run_sync(lambda: render_card(view, **kw))
            answer["card"] = {"type": "raw", "data": card}
        return answer

    async def _extras(self, action: CardAction) -> dict[str, Any] | str:
        """`decide`'s reasons / grant / edited_args from the form, or why the click is refused."""
        if action.verdict == "approve":
            if not action.grant:
                return {}
            try:
                return {"grant": decisions.parse_grant(action.grant)}
            except ValueError as exc:
                return f"Not recorded: {exc}."
        view = await self.gate.view(action.request_id)
        if view is None or view.is_final:
            return {}  # decide answers "already approved by X" / "no longer exists"
        if action.verdict == "reject":
            if not action.comment and not action.reasons:
                return (
                    "Type a reason in the box (or pick a preset), then press Reject: "
                    "the agent is told why."
                )
            try:
                picked = decisions.reasons_from(view, list(action.reasons))
            except ValueError as exc:
                return f"Not recorded: {exc}."
            return {"reasons": tuple(picked)}
        fields = editable(view)
        if not fields:
            return "Nothing here can be edited in Feishu; edit it in gate."
        texts = {fields[i].key: text for i, text in action.edits if i < len(fields)}
        edited, errors = decisions.apply_edits(view, fields, texts)
        if errors:
            # An argument's name is untrusted text, like anything else shown in a toast.
            named = (f"{clean(k, 40)}: {why}" for k, why in errors.items())
            return "Not recorded: " + "; ".join(named)
        return {"edits": edited}

    async def _show(self, action: CardAction) -> dict[str, Any]:
        """Swap the card between its decision form and its edit form."""
        view = await self.gate.view(action.request_id)
        if action.verdict == "view" or view is None:
            return await self._answer(
                action, {"type": "info", "content": "Back to the decision."}, view
            )
        refusal, view = await decisions.refusal(
            self.gate, self.name, action.request_id, action.open_id
        )
        if refusal or view is None:
            content = refusal or "This request no longer exists."
            return await self._answer(action, {"type": "error", "content": content}, view)
        if not editable(view):
            text = "Nothing here can be edited in Feishu; edit it in gate."
            return await self._answer(action, {"type": "error", "content": text}, view)
        text = "Change the values, then press Approve with edits."
        return await self._answer(action, {"type": "info", "content": text}, view, editing=True)


def _json_object(raw: bytes, what: str, *, code: str) -> dict[str, Any]:
    """The JSON object in `raw`; 400 (never a 500) for anything else, deep nesting included."""
    try:
        payload = load_json(raw)
    except ValueError as exc:
        reason = "nested too deeply" if isinstance(exc, NestedTooDeep) else "not JSON"
        raise BadRequest(f"{what} is {reason}", code=code) from None
    if not isinstance(payload, dict):
        raise BadRequest(f"{what} is not a JSON object", code=code)
    return payload


def card_content(req: RequestView) -> str:
    """The card as the message's JSON content. Channels call it in a worker thread: rendering
    scans untrusted text, and a huge argument must not hold up the event loop."""
    return json.dumps(render_card(req), ensure_ascii=False)


def _retrieve(task: asyncio.Future[Any]) -> None:
    # A decision that fails after the 3 s answer went out must not warn "never retrieved".
    if not task.cancelled():
        task.exception()


class _TokenInvalid(Exception):
    """The platform refused our tenant token."""


def receive_id_type(target: str) -> str:
    """Feishu's `receive_id_type` for a target id, by its prefix."""
    if target.startswith("ou_"):
        return "open_id"
    if target.startswith("on_"):
        return "union_id"
    if "@" in target:
        return "email"
    return "chat_id"


__all__ = [
    "ARGS_CHARS",
    "CARD_BYTES",
    "MASK",
    "TEXT_CHARS",
    "CardAction",
    "FeishuChannel",
    "clean",
    "code_block",
    "decrypt",
    "mask_secrets",
    "parse_action",
    "receive_id_type",
    "render_card",
    "signature",
    "toast_for",
]
