"""A fake Feishu / Lark open platform on loopback, and callbacks built the way Feishu builds them.

`FakeFeishu` serves the three endpoints gate uses (tenant token, message create, message
PATCH) with Feishu's `{code, msg, data}` envelope, records every request, checks every
card's JSON 2.0 structure, and fails on command (rate limits, revoked tokens, bot not in
chat). `build_callback` signs and encrypts a body with its own AES code, independent of
the channel's, so the two implementations check each other.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import json
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.support.servers import LoopbackFake

APP_ID = "cli_gate_test"
APP_SECRET = "app-secret-for-tests"
TEMPLATES = {
    "blue", "wathet", "turquoise", "green", "yellow", "orange", "red", "carmine",
    "violet", "purple", "indigo", "grey", "default",
}  # fmt: skip
BUTTON_TYPES = {
    "default", "primary", "danger", "text", "primary_text", "danger_text",
    "primary_filled", "danger_filled", "laser",
}  # fmt: skip
TAGS = {
    "div", "markdown", "hr", "button", "column_set", "column", "form", "input", "note",
    "img", "collapsible_panel", "plain_text", "lark_md", "select_static", "person",
    "multi_select_static",
}  # fmt: skip
#: the input component's max_length range
INPUT_MAX = 1000
ELEMENT_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,19}$")
CARD_LIMIT = 30 * 1024


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class Failure:
    kind: str  # "token" | "create" | "update"
    status: int
    code: int
    msg: str
    headers: dict[str, str]
    times: int


@dataclass
class Message:
    message_id: str
    receive_id: str
    receive_id_type: str
    cards: list[dict[str, Any]] = field(default_factory=list)

    @property
    def card(self) -> dict[str, Any]:
        return self.cards[-1]


def check_card(content: str) -> list[str]:
    """Problems Feishu would reject a card for (empty when it is a valid JSON 2.0 card)."""
    problems: list[str] = []
    if len(content.encode()) > CARD_LIMIT:
        problems.append(f"card is {len(content.encode())} bytes, over 30 KB")
    try:
        card = json.loads(content)
    except ValueError:
        return ["content is not JSON"]
    if not isinstance(card, dict) or card.get("schema") != "2.0":
        return ["not a JSON 2.0 card"]
    header = card.get("header", {})
    title = header.get("title", {})
    if title.get("tag") not in ("plain_text", "lark_md") or not isinstance(
        title.get("content"), str
    ):
        problems.append("header.title must be a text object")
    if header.get("template", "default") not in TEMPLATES:
        problems.append(f"unknown header template {header.get('template')!r}")
    if card.get("config", {}).get("update_multi") is False:
        problems.append("JSON 2.0 cards are shared: update_multi may only be true")
    elements = card.get("body", {}).get("elements")
    if not isinstance(elements, list):
        return [*problems, "body.elements must be a list"]
    ids: list[str] = []
    count = _walk(elements, problems, ids, root=True, in_form=False)
    if count > 200:
        problems.append(f"{count} components, over 200")
    if len(ids) != len(set(ids)):
        problems.append("element_id values must be unique")
    return problems


def _walk(
    elements: list[Any], problems: list[str], ids: list[str], *, root: bool, in_form: bool
) -> int:
    count = 0
    for el in elements:
        count += 1
        tag = el.get("tag") if isinstance(el, dict) else None
        if tag == "action":
            problems.append("JSON 2.0 has no action module")
            continue
        if tag not in TAGS:
            problems.append(f"unknown component {tag!r}")
            continue
        if "element_id" in el:
            if not ELEMENT_ID.match(str(el["element_id"])):
                problems.append(f"bad element_id {el['element_id']!r}")
            ids.append(str(el["element_id"]))
        if tag == "div" and not isinstance(el.get("text", {}).get("content"), str):
            problems.append("div needs text.content")
        if tag == "markdown" and not isinstance(el.get("content"), str):
            problems.append("markdown needs content")
        if tag == "button":
            _check_button(el, problems, in_form)
        if tag in ("input", "select_static", "multi_select_static") and in_form:
            if not el.get("name"):
                problems.append(f"a form {tag} needs a name (client error 200530)")
        if tag == "input":
            _check_input(el, problems)
        if tag in ("select_static", "multi_select_static"):
            _check_select(el, problems)
            if tag == "multi_select_static" and not in_form:
                problems.append("multi_select_static only works inside a form")
        if tag == "form":
            if not root:
                problems.append("a form may only sit at the card root")
            if not el.get("name"):
                problems.append("a form needs a name")
            count += _walk(el.get("elements", []), problems, ids, root=False, in_form=True)
        if tag == "column_set":
            for column in el.get("columns", []):
                count += 1 + _walk(
                    column.get("elements", []), problems, ids, root=False, in_form=in_form
                )
    return count


def _check_input(el: dict[str, Any], problems: list[str]) -> None:
    limit = el.get("max_length", INPUT_MAX)
    if not isinstance(limit, int) or not 1 <= limit <= INPUT_MAX:
        problems.append(f"input max_length must be 1..{INPUT_MAX}")
        return
    default = el.get("default_value")
    if default is not None and (not isinstance(default, str) or len(default) > limit):
        problems.append(f"input default_value must be a string of at most {limit} characters")
    for key in ("label", "placeholder"):
        if key in el and el[key].get("tag") != "plain_text":
            problems.append(f"input {key} must be plain_text")


def _check_select(el: dict[str, Any], problems: list[str]) -> None:
    options = el.get("options")
    if not isinstance(options, list) or not options:
        problems.append(f"{el.get('tag')} needs options")
        return
    values = []
    for option in options:
        text = option.get("text", {}) if isinstance(option, dict) else {}
        if text.get("tag") != "plain_text" or not isinstance(text.get("content"), str):
            problems.append("an option's text must be plain_text")
        value = option.get("value") if isinstance(option, dict) else None
        if not isinstance(value, str) or not value:
            problems.append("an option needs a string value")
        values.append(value)
    if len(values) != len(set(map(str, values))):
        problems.append("option values must be unique")


def _check_button(el: dict[str, Any], problems: list[str], in_form: bool) -> None:
    if el.get("text", {}).get("tag") != "plain_text":
        problems.append("button text must be plain_text")
    if el.get("type", "default") not in BUTTON_TYPES:
        problems.append(f"unknown button type {el.get('type')!r}")
    for behavior in el.get("behaviors", []):
        if behavior.get("type") == "callback" and not isinstance(behavior.get("value"), dict):
            problems.append("a callback behavior needs a value object")
        if behavior.get("type") == "open_url" and not behavior.get("default_url"):
            problems.append("an open_url behavior needs default_url")
    if "confirm" in el and not el["confirm"].get("title"):
        problems.append("button confirm needs a title")
    if in_form and el.get("form_action_type") == "submit" and not el.get("name"):
        problems.append("a form submit button needs a name")


class FakeFeishu(LoopbackFake):
    """The open platform, as far as gate uses it. Thread-safe: tests read while it serves."""

    def __init__(self, *, expire: int = 7200, token_delay: float = 0.0) -> None:
        self.lock = threading.Lock()
        self.requests: list[Recorded] = []
        self.tokens: dict[str, float] = {}
        self.token_requests = 0
        self.messages: dict[str, Message] = {}
        self.failures: list[Failure] = []
        self.card_problems: list[str] = []
        #: chats the bot is in; None means every chat
        self.chats: set[str] | None = None
        #: open_ids of the people in the app's availability range; None means everyone
        self.users: set[str] | None = None
        self.expire = expire
        #: seconds the token endpoint takes, so concurrent callers really overlap
        self.token_delay = token_delay
        self._uuids: dict[str, str] = {}
        self._ids = itertools.count(1)
        self.app = Starlette(
            routes=[
                Route(
                    "/open-apis/auth/v3/tenant_access_token/internal", self._token, methods=["POST"]
                ),
                Route("/open-apis/im/v1/messages", self._create, methods=["POST"]),
                Route("/open-apis/im/v1/messages/{message_id}", self._patch, methods=["PATCH"]),
            ]
        )

    # -- lifecycle and commands --------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.base_url

    def fail(
        self,
        kind: str,
        *,
        code: int,
        status: int = 400,
        msg: str = "failure on command",
        times: int = 1,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Make the next `times` calls of `kind` (token, create, update) fail like this."""
        with self.lock:
            self.failures.append(Failure(kind, status, code, msg, headers or {}, times))

    def rate_limit(self, kind: str, *, times: int = 1, reset: int = 0) -> None:
        """Answer HTTP 429 / 99991400 with `x-ogw-ratelimit-reset` for the next calls."""
        self.fail(
            kind,
            code=99991400,
            status=429,
            msg="request trigger frequency limit",
            times=times,
            headers={"x-ogw-ratelimit-reset": str(reset)},
        )

    def revoke_tokens(self) -> None:
        """Every token issued so far is now invalid (code 99991663), as after a secret reset."""
        with self.lock:
            self.tokens.clear()

    def recorded(self, method: str | None = None, path_prefix: str = "") -> list[Recorded]:
        with self.lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method) and r.path.startswith(path_prefix)
            ]

    def posted(self) -> list[Message]:
        with self.lock:
            return list(self.messages.values())

    def click(
        self,
        message_id: str,
        button: str,
        *,
        open_id: str,
        reason: str | None = None,
        event_id: str | None = None,
        verification_token: str,
        form: dict[str, Any] | None = None,
        card: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The `card.action.trigger` body Feishu sends when `open_id` presses `button`.

        `form` adds form values (select choices, edit boxes) beside `reason`; `card` is the card
        the person sees when it is not the message's last one (a callback's answer).
        """
        with self.lock:
            message = self.messages[message_id]
            card = card or message.card
        found = _find_button(card["body"]["elements"], button, in_form=False)
        if found is None:
            raise AssertionError(f"no button {button!r} on the card")
        el, in_form = found
        action: dict[str, Any] = {
            "value": el["behaviors"][0]["value"],
            "tag": "button",
            "timezone": "Asia/Shanghai",
            "name": el.get("name", "Button_x"),
        }
        if in_form:
            action["form_value"] = {"reason": reason or "", **(form or {})}
        return card_action_payload(
            action=action,
            open_id=open_id,
            verification_token=verification_token,
            event_id=event_id,
            message_id=message_id,
            chat_id=message.receive_id,
        )

    # -- endpoints -------------------------------------------------------------------------

    async def _record(self, request: Request) -> Any:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        with self.lock:
            self.requests.append(
                Recorded(
                    request.method,
                    request.url.path,
                    dict(request.query_params),
                    {k.lower(): v for k, v in request.headers.items()},
                    body,
                )
            )
        return body

    def _failure(self, kind: str) -> JSONResponse | None:
        with self.lock:
            for failure in self.failures:
                if failure.kind == kind and failure.times > 0:
                    failure.times -= 1
                    return _envelope(
                        failure.code, failure.msg, status=failure.status, headers=failure.headers
                    )
        return None

    def _auth(self, request: Request) -> JSONResponse | None:
        header = request.headers.get("authorization", "")
        if not header.startswith("Bearer "):
            return _envelope(99991661, "Missing access token for authorization", status=400)
        with self.lock:
            expires = self.tokens.get(header[7:])
        if expires is None or expires < time.monotonic():
            return _envelope(99991663, "Invalid access token for authorization", status=400)
        return None

    async def _token(self, request: Request) -> JSONResponse:
        body = await self._record(request)
        with self.lock:
            self.token_requests += 1
        if self.token_delay:
            await asyncio.sleep(self.token_delay)
        failed = self._failure("token")
        if failed:
            return failed
        if not isinstance(body, dict) or body.get("app_id") != APP_ID:
            return _envelope(10003, "invalid param", status=400)
        if body.get("app_secret") != APP_SECRET:
            return _envelope(10014, "app secret invalid", status=400)
        token = "t-" + uuid.uuid4().hex + uuid.uuid4().hex[:8]
        with self.lock:
            self.tokens[token] = time.monotonic() + self.expire
        return JSONResponse(
            {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": self.expire}
        )

    async def _create(self, request: Request) -> JSONResponse:
        body = await self._record(request)
        denied = self._auth(request) or self._failure("create")
        if denied:
            return denied
        id_type = request.query_params.get("receive_id_type")
        if id_type not in ("open_id", "union_id", "user_id", "email", "chat_id"):
            return _envelope(230001, "invalid receive_id_type", status=400)
        if not isinstance(body, dict) or body.get("msg_type") != "interactive":
            return _envelope(230001, "msg_type must be interactive here", status=400)
        content, receive_id = body.get("content"), body.get("receive_id")
        if not isinstance(content, str) or not isinstance(receive_id, str):
            return _envelope(230001, "content must be a string", status=400)
        problems = check_card(content)
        if problems:
            with self.lock:
                self.card_problems.extend(problems)
            code = 230025 if any("30 KB" in p for p in problems) else 230099
            return _envelope(code, "; ".join(problems), status=400)
        refused = self._recipient_refused(id_type, receive_id)
        if refused:
            return refused
        dedup = body.get("uuid")
        with self.lock:
            if dedup and dedup in self._uuids:
                message = self.messages[self._uuids[dedup]]
            else:
                message_id = f"om_{next(self._ids):024x}"
                message = Message(message_id, receive_id, id_type, [json.loads(content)])
                self.messages[message_id] = message
                if dedup:
                    self._uuids[dedup] = message_id
        data = {
            "message_id": message.message_id,
            "chat_id": receive_id,
            "msg_type": "interactive",
            "create_time": str(int(time.time() * 1000)),
        }
        return JSONResponse({"code": 0, "msg": "success", "data": data})

    def _recipient_refused(self, id_type: str, receive_id: str) -> JSONResponse | None:
        """Feishu's refusal of a recipient: the id must be of the type the query names (an
        open_id is `ou_...`, a chat_id `oc_...`), a chat must have the bot in it, and a
        person must be in the app's availability range."""
        prefixes = {"open_id": "ou_", "union_id": "on_", "chat_id": "oc_"}
        if not receive_id.startswith(prefixes.get(id_type, "")):
            return _envelope(99992402, f"field validation failed: not a {id_type}", status=400)
        if id_type == "chat_id" and self.chats is not None and receive_id not in self.chats:
            return _envelope(230002, "Bot/User can NOT be out of the chat.", status=400)
        if id_type == "open_id" and self.users is not None and receive_id not in self.users:
            return _envelope(230013, "Bot has NO availability to this user.", status=400)
        return None

    def to_user(self, open_id: str) -> list[Message]:
        """The messages the app sent one person privately (by open_id), oldest first."""
        with self.lock:
            return [
                m
                for m in self.messages.values()
                if m.receive_id_type == "open_id" and m.receive_id == open_id
            ]

    async def _patch(self, request: Request) -> JSONResponse:
        body = await self._record(request)
        denied = self._auth(request) or self._failure("update")
        if denied:
            return denied
        message_id = request.path_params["message_id"]
        content = body.get("content") if isinstance(body, dict) else None
        if not isinstance(content, str):
            return _envelope(230001, "content must be a string", status=400)
        problems = check_card(content)
        with self.lock:
            message = self.messages.get(message_id)
            if message is None:
                return _envelope(230001, "invalid message_id", status=400)
            if problems:
                self.card_problems.extend(problems)
                return _envelope(230099, "; ".join(problems), status=400)
            message.cards.append(json.loads(content))
        return JSONResponse({"code": 0, "msg": "ok", "data": {}})


def _envelope(
    code: int, msg: str, *, status: int, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"code": code, "msg": msg, "data": {}}, status_code=status, headers=headers)


def _find_button(
    elements: list[Any], name: str, *, in_form: bool
) -> tuple[dict[str, Any], bool] | None:
    for el in elements:
        if el.get("tag") == "button" and name in (el.get("name"), el.get("element_id")):
            return el, in_form
        children = list(el.get("elements", []))
        for column in el.get("columns", []):
            children.extend(column.get("elements", []))
        found = _find_button(children, name, in_form=in_form or el.get("tag") == "form")
        if found:
            return found
    return None


# -- callbacks as Feishu sends them ---------------------------------------------------------


def encrypt(encrypt_key: str, plaintext: bytes, iv: bytes | None = None) -> str:
    """base64(iv + AES-256-CBC(sha256(key), pkcs7(plaintext))), as Feishu encrypts pushes."""
    iv = iv or os.urandom(16)
    key = hashlib.sha256(encrypt_key.encode()).digest()
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plaintext) + padder.finalize()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + encryptor.update(padded) + encryptor.finalize()).decode()


def sign(timestamp: str, nonce: str, secret: str, body: bytes, algo: str = "sha256") -> str:
    """X-Lark-Signature: hex(sha256(timestamp + nonce + encrypt_key + body))."""
    return hashlib.new(
        algo, timestamp.encode() + nonce.encode() + secret.encode() + body
    ).hexdigest()


@dataclass(frozen=True)
class Callback:
    body: bytes
    headers: dict[str, str]


def build_callback(
    payload: dict[str, Any] | bytes,
    *,
    encrypt_key: str | None,
    encrypted: bool = True,
    signed: bool = True,
    timestamp: int | None = None,
    nonce: str | None = None,
    signing_secret: str | None = None,
    algo: str = "sha256",
) -> Callback:
    """The body and headers of a callback: optionally encrypted, signed over the exact bytes."""
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    if encrypted:
        assert encrypt_key is not None
        raw = json.dumps({"encrypt": encrypt(encrypt_key, raw)}).encode()
    headers = {"Content-Type": "application/json"}
    secret = signing_secret or encrypt_key
    if signed and secret is not None:
        ts = str(int(time.time()) if timestamp is None else timestamp)
        nonce = nonce or uuid.uuid4().hex[:16]
        headers.update(
            {
                "X-Lark-Request-Timestamp": ts,
                "X-Lark-Request-Nonce": nonce,
                "X-Lark-Signature": sign(ts, nonce, secret, raw, algo),
            }
        )
    return Callback(raw, headers)


def card_action_payload(
    *,
    action: dict[str, Any],
    open_id: str,
    verification_token: str,
    event_id: str | None = None,
    message_id: str = "om_unknown",
    chat_id: str = "oc_unknown",
) -> dict[str, Any]:
    """A schema 2.0 `card.action.trigger` body (the shape of the docs' fixture)."""
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id or uuid.uuid4().hex,
            "token": verification_token,
            "create_time": str(int(time.time() * 1_000_000)),
            "event_type": "card.action.trigger",
            "tenant_key": "2df73991750",
            "app_id": APP_ID,
        },
        "event": {
            "operator": {"tenant_key": "2df73991750", "open_id": open_id, "union_id": "on_x"},
            "token": "c-" + uuid.uuid4().hex,
            "action": action,
            "host": "im_message",
            "context": {"open_message_id": message_id, "open_chat_id": chat_id},
        },
    }


def url_verification(verification_token: str, challenge: str = "ajls384kdjx98XX") -> dict[str, Any]:
    """The challenge Feishu sends when the request URL is saved."""
    return {"challenge": challenge, "token": verification_token, "type": "url_verification"}
