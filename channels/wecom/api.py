"""The WeCom server API over httpx: the access token cache, and messages sent or updated.

Every failure becomes a `DeliveryError` the outbox understands: rate limits ask it to wait,
errors that asking again cannot fix are permanent, and a token the platform calls invalid or
expired (40014, 42001) is dropped and fetched again, once.

WeCom wants the access token (and, for `gettoken`, the app's Secret) in the query string, and
httpx logs request URLs at INFO: a filter on the `httpx` logger masks both before any
handler sees them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import httpx

from channels.app_token import AppToken
from channels.wecom.settings import WeComSettings
from gate.base.tls import verifying_context
from gate.delivery.channel import DeliveryError
from gate.text import untrusted

log = logging.getLogger("gate.channels.wecom")

TOKEN_PATH = "/cgi-bin/gettoken"
SEND_PATH = "/cgi-bin/message/send"
UPDATE_PATH = "/cgi-bin/message/update_template_card"
CHAT_PATH = "/cgi-bin/appchat/send"
#: "access_token invalid / expired / missing": drop it, fetch a new one, retry once
TOKEN_INVALID = {40014, 42001, 41001}
#: "api freq out of limit", "api concurrent out of limit"; -1 is "system busy"
RATE_LIMITED = {45009, 45033}
#: WeCom's limits are per minute and it sends no Retry-After: "the block lasts as long as
#: the limit's period" (global error codes, 45009)
RATE_LIMIT_WAIT_SECONDS = 60.0
#: asking again cannot help: bad secret or corp id, bad agentid, no recipient in the app's
#: visible range, IP not trusted, app disabled, a card the platform refuses, a used code,
#: a group chat the app did not create (86003)...
PERMANENT = {
    40001, 40003, 40008, 40013, 40031, 40033, 40056, 40058, 40063, 41011, 42015, 42016,
    42022, 44004, 45002, 48002, 50002, 50003, 60011, 60020, 81013, 86003,
}  # fmt: skip
#: tokens live 7200 s; five minutes early keeps a refresh off the critical path
TOKEN_MARGIN_SECONDS = 300.0
_QUERY_SECRETS = untrusted.compile(r"(access_token|corpsecret)=[^&\s\"']*")


class _MaskQuerySecrets(logging.Filter):
    """Masks `access_token=` and `corpsecret=` in httpx's request log lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                _QUERY_SECRETS.sub(lambda m: f"{m.group(1)}=[masked]", str(arg))
                if isinstance(arg, httpx.URL | str) and "=" in str(arg)
                else arg
                for arg in record.args
            )
        return True


_MASK_FILTER = _MaskQuerySecrets()


def recipients(target: str) -> dict[str, str]:
    """`message/send`'s recipient fields for a target: "alice|bob", "party:2", "tag:3", "@all"."""
    kind, _, rest = target.partition(":")
    if kind == "party" and rest:
        return {"toparty": rest}
    if kind == "tag" and rest:
        return {"totag": rest}
    if kind == "chat":
        raise DeliveryError(f"{target!r} is a group chat: use send_chat_card", permanent=True)
    return {"touser": target}


class TokenInvalid(Exception):
    """The platform refused our access token."""


class WeComApi:
    """Calls the server API as the app, with one cached access token."""

    def __init__(
        self,
        settings: WeComSettings,
        *,
        clock: Callable[[], float],
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        #: seconds since the epoch, for the token's lifetime
        self.clock = clock
        self._transport = transport
        self._http: httpx.AsyncClient | None = None
        self._token = AppToken(self._fetch_token, clock=clock, margin=TOKEN_MARGIN_SECONDS)
        logging.getLogger("httpx").addFilter(_MASK_FILTER)  # idempotent: one filter object

    async def send_card(self, target: str, card: dict[str, Any]) -> tuple[str, str]:
        """Send a template card; (msgid, response_code: "" for a card without callbacks)."""
        body = {**recipients(target), "msgtype": "template_card", "template_card": card}
        data = await self.call(SEND_PATH, body)
        if data.get("invaliduser"):
            # Sent, but not to everyone: say who, so an admin can fix the app's visible range.
            missed = untrusted.clean(str(data["invaliduser"]), 200)
            log.warning("wecom card not delivered to %r (outside the app's visible range)", missed)
        msgid, code = data.get("msgid"), data.get("response_code", "")
        if not isinstance(msgid, str) or not isinstance(code, str):
            raise DeliveryError("message/send answered without a msgid")
        return msgid, code

    async def send_text(self, userid: str, content: str) -> None:
        """A text message to one person, in the app's chat with them (only they see it)."""
        body = {"touser": userid, "msgtype": "text", "text": {"content": content}}
        await self.call(SEND_PATH, body)

    async def send_chat_card(self, chatid: str, textcard: dict[str, str]) -> None:
        """A text card (title, description, link) to a group chat the app created.

        `appchat/send` takes text, textcard, news and markdown, never a template card, and
        returns no msgid: such a card has no buttons and cannot be updated.
        """
        await self.call(CHAT_PATH, {"chatid": chatid, "msgtype": "textcard", "textcard": textcard})

    async def update_card(self, response_code: str, card: dict[str, Any]) -> None:
        """Replace a sent card for everyone who got it, spending one response_code."""
        body = {"atall": 1, "response_code": response_code, "template_card": card}
        await self.call(UPDATE_PATH, body)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                base_url=self.settings.api_url.rstrip("/"),
                timeout=httpx.Timeout(10.0),
                transport=self._transport,
                verify=verifying_context(),
            )
        return self._http

    async def access_token(self, stale: str | None = None) -> str:
        """The cached access token (`stale`: one the platform refused, never handed out again)."""
        return await self._token.get(stale)

    async def _fetch_token(self) -> tuple[str, float]:
        assert self.settings.secret is not None and self.settings.corp_id is not None
        params = {
            "corpid": self.settings.corp_id,
            "corpsecret": self.settings.secret.get_secret_value(),
        }
        data = await self._send("GET", TOKEN_PATH, params=params, body=None)
        token, expire = data.get("access_token"), data.get("expires_in")
        if not isinstance(token, str) or not token or not isinstance(expire, int):
            raise DeliveryError("gettoken answered without a token")
        return token, float(expire)

    async def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """One POST with the access token (and the agentid, but to appchat, which has none);
        the answer, or DeliveryError."""
        if path != CHAT_PATH:
            body = {**body, "agentid": self.settings.agent_id}
        token = await self.access_token()
        try:
            return await self._send("POST", path, params={"access_token": token}, body=body)
        except TokenInvalid:
            # Revoked or expired early: one refresh (shared with concurrent callers), one retry.
            token = await self.access_token(stale=token)
            try:
                return await self._send("POST", path, params={"access_token": token}, body=body)
            except TokenInvalid as exc:
                raise DeliveryError(f"access token refused twice: {exc}") from exc

    async def _send(
        self, method: str, path: str, *, params: dict[str, str], body: dict[str, Any] | None
    ) -> dict[str, Any]:
        try:
            response = await self._client().request(method, path, params=params, json=body)
        except httpx.HTTPError as exc:
            raise DeliveryError(f"WeCom unreachable: {type(exc).__name__}") from exc
        return _answer_or_raise(response, f"{method} {path}", token="access_token" in params)


def _answer_or_raise(response: httpx.Response, call: str, *, token: bool) -> dict[str, Any]:
    """The answer, or the DeliveryError (or TokenInvalid) its errcode means."""
    try:
        answer = response.json()
        code = int(answer.get("errcode", -1))
    except (ValueError, AttributeError, TypeError):
        answer, code = {}, -2  # not WeCom's JSON: a proxy's error page, an outage
    msg = str(answer.get("errmsg", ""))[:300] if isinstance(answer, dict) else ""
    where = f"{call}: HTTP {response.status_code}, errcode {code} {msg}".strip()
    if code == 0 and response.status_code < 400:
        return dict(answer)
    if code in TOKEN_INVALID and token:
        raise TokenInvalid(where)
    if code in RATE_LIMITED or response.status_code == 429:
        raise DeliveryError(f"rate limited: {where}", retry_after=RATE_LIMIT_WAIT_SECONDS)
    if code in PERMANENT:
        raise DeliveryError(where, permanent=True)
    # -1 (system busy), 5xx, a body that is not WeCom's, an errcode not listed above: try
    # again later; the outbox gives up after its attempts, and the API still decides.
    raise DeliveryError(where)
