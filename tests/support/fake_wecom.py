"""A fake WeCom server API on loopback, and callbacks built the way WeCom builds them.

`FakeWeCom` serves what gate calls (`gettoken`, `message/send`, `message/update_template_card`)
with WeCom's `{errcode, errmsg}` answers, records every request, and checks what it gets the
way the platform would: the access token on every call, the app's agentid, recipients, the
template card's shape and its documented field lengths (hard caps here, where WeCom only
recommends), task ids (charset, length, unique per app), ResponseCodes (issued by the fake,
one use each), text messages of at most 2048 bytes. It fails on command (errcodes, HTTP
5xx, revoked tokens) until healed.

`build_callback` encrypts and signs a callback with this module's own AES and SHA1 code
(independent of the channel's), so the two implementations check each other; both are
checked against Tencent's reference vectors in tests/wecom/.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import re
import struct
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

CORP_ID = "ww0123456789abcdef"
SECRET = "wecom-app-secret-for-tests"
AGENT_ID = 1000002
CARD_TYPES = {
    "text_notice", "news_notice", "button_interaction", "vote_interaction",
    "multiple_interaction",
}  # fmt: skip
INTERACTIVE = {"button_interaction", "vote_interaction", "multiple_interaction"}
TASK_ID = re.compile(r"^[A-Za-z0-9_\-@]{1,128}$")
#: the documented lengths ("建议不超过 N 个字"), enforced as hard limits
LIMITS = {
    "source.desc": 13, "main_title.title": 36, "main_title.desc": 44,
    "sub_title_text": 160, "keyname": 5, "value": 30, "button.text": 10, "option.text": 16,
    "checkbox.text": 17, "submit.text": 10, "jump.title": 18,
}  # fmt: skip
TEXT_BYTES = 2048
KEY_BYTES = 1024
OPTION_ID_BYTES = 128
#: ResponseCodes last 72 hours
CODE_LIFETIME = 72 * 3600


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    body: Any


@dataclass
class Failure:
    kind: str  # "token" | "send" | "update" | "text"
    status: int
    errcode: int
    errmsg: str
    times: int


@dataclass
class Message:
    """A template card as sent, and every version it was updated to."""

    msgid: str
    recipients: dict[str, str]
    task_id: str
    cards: list[dict[str, Any]] = field(default_factory=list)
    enable_id_trans: int = 0

    @property
    def card(self) -> dict[str, Any]:
        return self.cards[-1]


@dataclass
class Text:
    touser: str
    content: str


def _chars(value: Any) -> int:
    return len(value) if isinstance(value, str) else 0


def check_card(card: Any, *, strict: bool = True) -> list[str]:
    """Problems WeCom would refuse a template card for (empty when it is a valid one).

    `strict` also holds text fields to the lengths WeCom documents as recommended (gate's
    cards keep to them; the docs' own example does not, so WeCom must accept longer ones).
    """
    if not isinstance(card, dict) or card.get("card_type") not in CARD_TYPES:
        return ["template_card.card_type must be one of the five card types"]
    problems: list[str] = []

    def longer(value: Any, limit_key: str, where: str) -> None:
        if value is not None and not isinstance(value, str):
            problems.append(f"{where} must be a string")
        elif strict and _chars(value) > LIMITS[limit_key]:
            problems.append(f"{where} is {_chars(value)} characters, over {LIMITS[limit_key]}")

    kind = card["card_type"]
    task = card.get("task_id")
    if kind in INTERACTIVE and not isinstance(task, str):
        problems.append(f"{kind} needs a task_id")
    if task is not None and not (isinstance(task, str) and TASK_ID.match(task)):
        problems.append(f"task_id {task!r} is not 1-128 of [A-Za-z0-9_-@]")
    longer(card.get("source", {}).get("desc"), "source.desc", "source.desc")
    title = card.get("main_title", {})
    longer(title.get("title"), "main_title.title", "main_title.title")
    longer(title.get("desc"), "main_title.desc", "main_title.desc")
    longer(card.get("sub_title_text"), "sub_title_text", "sub_title_text")
    rows = card.get("horizontal_content_list", [])
    if len(rows) > 6:
        problems.append("horizontal_content_list has more than 6 rows")
    for row in rows:
        longer(row.get("keyname"), "keyname", "horizontal_content_list.keyname")
        longer(row.get("value"), "value", "horizontal_content_list.value")
        if row.get("type", 0) == 1 and not row.get("url"):
            problems.append("a horizontal_content_list link needs a url")
    jumps = card.get("jump_list", [])
    if len(jumps) > 3:
        problems.append("jump_list has more than 3 entries")
    for jump in jumps:
        longer(jump.get("title"), "jump.title", "jump_list.title")
    action = card.get("card_action")
    if kind == "text_notice" and not (isinstance(action, dict) and action.get("type") in (1, 2)):
        problems.append("text_notice needs card_action of type 1 or 2")
    if isinstance(action, dict) and action.get("type") == 1 and not action.get("url"):
        problems.append("card_action type 1 needs a url")
    if kind == "button_interaction":
        _check_buttons(card, problems, longer)
    if kind == "vote_interaction":
        _check_vote(card, problems, longer)
    return problems


def _check_buttons(card: dict[str, Any], problems: list[str], longer: Any) -> None:
    buttons = card.get("button_list")
    if not isinstance(buttons, list) or not 1 <= len(buttons) <= 6:
        problems.append("button_list needs 1 to 6 buttons")
        return
    keys = []
    for button in buttons:
        longer(button.get("text"), "button.text", "button_list.text")
        if button.get("style", 1) not in (1, 2, 3, 4):
            problems.append("button_list.style must be 1-4")
        if button.get("type", 0) == 1:
            if not button.get("url"):
                problems.append("a link button needs a url")
        else:
            key = button.get("key")
            if not isinstance(key, str) or not key or len(key.encode()) > KEY_BYTES:
                problems.append("a callback button needs a key of 1-1024 bytes")
            keys.append(key)
    if len(keys) != len(set(map(str, keys))):
        problems.append("button keys must be unique")
    selection = card.get("button_selection")
    if selection is not None:
        _check_options(selection.get("option_list"), "option.text", problems, longer)
        if not selection.get("question_key"):
            problems.append("button_selection needs a question_key")


def _check_vote(card: dict[str, Any], problems: list[str], longer: Any) -> None:
    box = card.get("checkbox", {})
    if not box.get("question_key"):
        problems.append("checkbox needs a question_key")
    if box.get("mode", 0) not in (0, 1):
        problems.append("checkbox.mode must be 0 or 1")
    _check_options(box.get("option_list"), "checkbox.text", problems, longer, most=20)
    submit = card.get("submit_button", {})
    longer(submit.get("text"), "submit.text", "submit_button.text")
    if not submit.get("key"):
        problems.append("submit_button needs a key")


def _check_options(
    options: Any, limit_key: str, problems: list[str], longer: Any, most: int = 10
) -> None:
    if not isinstance(options, list) or not 1 <= len(options) <= most:
        problems.append(f"an option_list needs 1 to {most} options")
        return
    ids = [o.get("id") for o in options]
    for option in options:
        longer(option.get("text"), limit_key, "option text")
        oid = option.get("id")
        if not isinstance(oid, str) or not oid or len(oid.encode()) > OPTION_ID_BYTES:
            problems.append("an option id must be 1-128 bytes")
    if len(ids) != len(set(map(str, ids))):
        problems.append("option ids must be unique")


class FakeWeCom(LoopbackFake):
    """The server API, as far as gate uses it. Thread-safe: tests read while it serves."""

    def __init__(self, *, expire: int = 7200) -> None:
        self.lock = threading.Lock()
        self.requests: list[Recorded] = []
        self.tokens: dict[str, float] = {}
        self.messages: dict[str, Message] = {}
        self.texts: list[Text] = []
        #: text cards sent to group chats: (chatid, textcard)
        self.chat_cards: list[tuple[str, dict[str, Any]]] = []
        #: group chats the app created (appchat/send refuses others: 86003)
        self.chats: set[str] = {"wrApprovals"}
        #: userids in the app's visible range; None: everyone
        self.visible: set[str] | None = None
        self.failures: list[Failure] = []
        self.card_problems: list[str] = []
        #: response_code -> (task id, issued at, spent)
        self.codes: dict[str, tuple[str, float, bool]] = {}
        self.expire = expire
        self._ids = itertools.count(1)
        self.app = Starlette(
            routes=[
                Route("/cgi-bin/gettoken", self._gettoken, methods=["GET"]),
                Route("/cgi-bin/message/send", self._send, methods=["POST"]),
                Route("/cgi-bin/message/update_template_card", self._update, methods=["POST"]),
                Route("/cgi-bin/appchat/send", self._appchat, methods=["POST"]),
            ]
        )

    # -- lifecycle and commands --------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.base_url

    def fail(
        self, kind: str, *, errcode: int, status: int = 200, errmsg: str = "", times: int = 1
    ) -> None:
        """Make the next `times` calls of `kind` (token, send, update, text) fail like this."""
        with self.lock:
            self.failures.append(Failure(kind, status, errcode, errmsg or "on command", times))

    def heal(self) -> None:
        """Forget every failure on command."""
        with self.lock:
            self.failures.clear()

    def revoke_tokens(self) -> None:
        """Every token issued so far is now invalid (errcode 40014), as after a secret reset."""
        with self.lock:
            self.tokens.clear()

    def recorded(self, path: str = "") -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.path.startswith(path)]

    def posted(self) -> list[Message]:
        with self.lock:
            return list(self.messages.values())

    def texts_to(self, user: str) -> list[str]:
        with self.lock:
            return [t.content for t in self.texts if t.touser == user]

    def issue_code(self, task_id: str) -> str:
        """A new ResponseCode for a click on the card `task_id` (as a callback carries)."""
        code = "rc-" + uuid.uuid4().hex
        with self.lock:
            self.codes[code] = (task_id, time.time(), False)
        return code

    # -- endpoints -------------------------------------------------------------------------

    async def _record(self, request: Request) -> Any:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        with self.lock:
            self.requests.append(
                Recorded(request.method, request.url.path, dict(request.query_params), body)
            )
        return body

    def _failure(self, kind: str) -> JSONResponse | None:
        with self.lock:
            for failure in self.failures:
                if failure.kind == kind and failure.times > 0:
                    failure.times -= 1
                    return _answer(failure.errcode, failure.errmsg, status=failure.status)
        return None

    def _auth(self, request: Request, body: Any) -> JSONResponse | None:
        token = request.query_params.get("access_token")
        if not token:
            return _answer(41001, "access_token missing")
        with self.lock:
            expires = self.tokens.get(token)
        if expires is None:
            return _answer(40014, "invalid access_token")
        if expires < time.monotonic():
            return _answer(42001, "access_token expired")
        if not isinstance(body, dict) or body.get("agentid") != AGENT_ID:
            return _answer(40056, "invalid agentid")
        return None

    async def _gettoken(self, request: Request) -> JSONResponse:
        await self._record(request)
        failed = self._failure("token")
        if failed:
            return failed
        if request.query_params.get("corpid") != CORP_ID:
            return _answer(40013, "invalid corpid")
        if request.query_params.get("corpsecret") != SECRET:
            return _answer(40001, "invalid credential")
        token = "at-" + uuid.uuid4().hex + uuid.uuid4().hex
        with self.lock:
            self.tokens[token] = time.monotonic() + self.expire
        return JSONResponse(
            {"errcode": 0, "errmsg": "ok", "access_token": token, "expires_in": self.expire}
        )

    async def _send(self, request: Request) -> JSONResponse:
        body = await self._record(request)
        denied = self._auth(request, body)
        if denied:
            return denied
        assert isinstance(body, dict)
        to = {k: body[k] for k in ("touser", "toparty", "totag") if body.get(k)}
        if not to:
            return _answer(40035, "touser, toparty and totag are all empty")
        if body.get("msgtype") == "text":
            return self._text(body, to)
        if body.get("msgtype") != "template_card":
            return _answer(40008, "gate sends only text and template_card")
        failed = self._failure("send")
        if failed:
            return failed
        invalid = self._outside(to)
        if invalid is None:
            return _answer(81013, "no valid userid, partyid or tagid in the app's range")
        card = body.get("template_card")
        problems = check_card(card)
        task = card.get("task_id", "") if isinstance(card, dict) else ""
        with self.lock:
            if task and any(m.task_id == task for m in self.messages.values()):
                problems.append(f"task_id {task} was used before")
            if problems:
                self.card_problems.extend(problems)
                return _answer(40058, "; ".join(problems))
            msgid = f"msg{next(self._ids):08d}"
            self.messages[msgid] = Message(
                msgid, to, task, [card], int(body.get("enable_id_trans", 0))
            )
        answer: dict[str, Any] = {
            "errcode": 0, "errmsg": "ok", "invaliduser": invalid, "msgid": msgid,
        }  # fmt: skip
        if card["card_type"] in INTERACTIVE:
            answer["response_code"] = self.issue_code(task)
        return JSONResponse(answer)

    def _outside(self, to: dict[str, str]) -> str | None:
        """The userids outside the app's visible range ("a|b"); None when nobody is left."""
        users = [u for u in to.get("touser", "").split("|") if u]
        if self.visible is None or users == ["@all"]:
            return ""
        invalid = [u for u in users if u not in self.visible]
        if len(invalid) == len(users) and not (to.get("toparty") or to.get("totag")):
            return None
        return "|".join(invalid)

    def _text(self, body: dict[str, Any], to: dict[str, str]) -> JSONResponse:
        failed = self._failure("text")
        if failed:
            return failed
        content = body.get("text", {}).get("content")
        if not isinstance(content, str) or not content:
            return _answer(44004, "text content is empty")
        if len(content.encode()) > TEXT_BYTES:
            return _answer(45002, "text content over 2048 bytes")
        with self.lock:
            self.texts.append(Text(to.get("touser", ""), content))
        return JSONResponse({"errcode": 0, "errmsg": "ok", "msgid": f"txt{next(self._ids)}"})

    async def _appchat(self, request: Request) -> JSONResponse:
        body = await self._record(request)
        denied = self._failure("send")
        token = request.query_params.get("access_token")
        with self.lock:
            known = token in self.tokens
        if not known:
            return _answer(40014, "invalid access_token")
        if denied:
            return denied
        if not isinstance(body, dict) or body.get("chatid") not in self.chats:
            return _answer(86003, "chatid does not exist")
        if body.get("msgtype") != "textcard":
            return _answer(40008, "appchat takes text, textcard, news, markdown; not template_card")
        textcard = body.get("textcard", {})
        problems = [
            f"textcard.{k} over {n} bytes"
            for k, n in (("title", 128), ("description", 512), ("url", 2048))
            if not isinstance(textcard.get(k), str) or len(textcard[k].encode()) > n
        ]
        if len(str(textcard.get("btntxt", ""))) > 4:
            problems.append("textcard.btntxt over 4 characters")
        if problems:
            return _answer(40058, "; ".join(problems))
        with self.lock:
            self.chat_cards.append((body["chatid"], textcard))
        return JSONResponse({"errcode": 0, "errmsg": "ok"})

    async def _update(self, request: Request) -> JSONResponse:
        body = await self._record(request)
        denied = self._auth(request, body) or self._failure("update")
        if denied:
            return denied
        assert isinstance(body, dict)
        if not (body.get("atall") == 1 or body.get("userids") or body.get("partyids")):
            return _answer(40035, "nobody to update the card for")
        code = body.get("response_code")
        with self.lock:
            found = self.codes.get(code) if isinstance(code, str) else None
            if found is None:
                return _answer(40058, "invalid response_code")
            task, issued, spent = found
            if spent:
                return _answer(42022, "response_code already used")
            if time.time() - issued > CODE_LIFETIME:
                return _answer(40058, "response_code expired")
            message = next((m for m in self.messages.values() if m.task_id == task), None)
            if message is None:
                return _answer(42016, "task_id does not exist")
            card = body.get("template_card")
            problems = check_card(card) if card is not None else []
            if card is None and not isinstance(body.get("button", {}).get("replace_name"), str):
                problems.append("give template_card or button.replace_name")
            if problems:
                self.card_problems.extend(problems)
                return _answer(40058, "; ".join(problems))
            self.codes[code] = (task, issued, True)
            if card is not None:
                message.cards.append(card)
        return JSONResponse({"errcode": 0, "errmsg": "ok", "invaliduser": []})


def _answer(errcode: int, errmsg: str, *, status: int = 200) -> JSONResponse:
    # WeCom answers errors with HTTP 200 and an errcode; an outage is a 5xx page.
    return JSONResponse({"errcode": errcode, "errmsg": errmsg}, status_code=status)


# -- callbacks as WeCom sends them ----------------------------------------------------------


def aes_key(encoding_aes_key: str) -> bytes:
    """base64-decode(EncodingAESKey + "=")."""
    return base64.b64decode(encoding_aes_key + "=")


def encrypt(encoding_aes_key: str, message: bytes, receive_id: str) -> str:
    """WeCom's encryption: random(16) + len(4, big-endian) + message + receive id, PKCS#7 to
    32-byte blocks, AES-256-CBC with IV = key[:16], base64."""
    key = aes_key(encoding_aes_key)
    plain = os.urandom(16) + struct.pack("!I", len(message)) + message + receive_id.encode()
    pad = 32 - len(plain) % 32
    plain += bytes([pad]) * pad
    encryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
    return base64.b64encode(encryptor.update(plain) + encryptor.finalize()).decode()


def decrypt(encoding_aes_key: str, encrypted: str) -> tuple[bytes, bytes]:
    """(message, receive id) from WeCom's encryption."""
    key = aes_key(encoding_aes_key)
    decryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
    plain = decryptor.update(base64.b64decode(encrypted)) + decryptor.finalize()
    unpadder = padding.PKCS7(256).unpadder()
    plain = unpadder.update(plain) + unpadder.finalize()
    (length,) = struct.unpack("!I", plain[16:20])
    return plain[20 : 20 + length], plain[20 + length :]


def sign(token: str, timestamp: str, nonce: str, encrypted: str) -> str:
    """msg_signature: sha1 of the four values sorted as strings and joined."""
    return hashlib.sha1("".join(sorted([token, timestamp, nonce, encrypted])).encode()).hexdigest()


@dataclass(frozen=True)
class Callback:
    query: dict[str, str]
    body: bytes


def build_callback(
    plain: bytes,
    *,
    token: str,
    encoding_aes_key: str,
    receive_id: str = CORP_ID,
    timestamp: int | None = None,
    nonce: str | None = None,
    signing_token: str | None = None,
    signed: bool = True,
) -> Callback:
    """The query and XML body WeCom POSTs: `plain` encrypted, signed with `token`."""
    encrypted = encrypt(encoding_aes_key, plain, receive_id)
    body = (
        f"<xml><ToUserName><![CDATA[{receive_id}]]></ToUserName>"
        f"<Encrypt><![CDATA[{encrypted}]]></Encrypt>"
        f"<AgentID><![CDATA[{AGENT_ID}]]></AgentID></xml>"
    ).encode()
    ts = str(int(time.time()) if timestamp is None else timestamp)
    nonce = nonce or str(uuid.uuid4().int)[:10]
    query = {"timestamp": ts, "nonce": nonce}
    if signed:
        query["msg_signature"] = sign(signing_token or token, ts, nonce, encrypted)
    return Callback(query, body)


def url_verification(
    *, token: str, encoding_aes_key: str, echo: str, timestamp: int | None = None
) -> dict[str, str]:
    """The GET query WeCom sends when the callback URL is saved."""
    encrypted = encrypt(encoding_aes_key, echo.encode(), CORP_ID)
    ts = str(int(time.time()) if timestamp is None else timestamp)
    nonce = str(uuid.uuid4().int)[:10]
    return {
        "msg_signature": sign(token, ts, nonce, encrypted),
        "timestamp": ts,
        "nonce": nonce,
        "echostr": encrypted,
    }


def _cdata(value: str) -> str:
    # A CDATA section cannot hold "]]>": split it the standard way.
    return "<![CDATA[" + value.replace("]]>", "]]]]><![CDATA[>") + "]]>"


def card_event_xml(
    *,
    user: str,
    task_id: str,
    event_key: str,
    response_code: str,
    card_type: str = "button_interaction",
    selected: dict[str, list[str]] | None = None,
    create_time: int | None = None,
) -> bytes:
    """A `template_card_event` (the docs' shape, tests/wecom/fixtures/template_card_event.xml)."""
    items = "".join(
        f"<SelectedItem><QuestionKey>{_cdata(q)}</QuestionKey><OptionIds>"
        + "".join(f"<OptionId>{_cdata(o)}</OptionId>" for o in ids)
        + "</OptionIds></SelectedItem>"
        for q, ids in (selected or {}).items()
    )
    return (
        f"<xml><ToUserName>{_cdata(CORP_ID)}</ToUserName><FromUserName>{_cdata(user)}</FromUserName>"
        f"<CreateTime>{create_time or int(time.time())}</CreateTime>"
        f"<MsgType>{_cdata('event')}</MsgType><Event>{_cdata('template_card_event')}</Event>"
        f"<EventKey>{_cdata(event_key)}</EventKey><TaskId>{_cdata(task_id)}</TaskId>"
        f"<CardType>{_cdata(card_type)}</CardType><ResponseCode>{_cdata(response_code)}</ResponseCode>"
        f"<AgentID>{AGENT_ID}</AgentID>"
        + (f"<SelectedItems>{items}</SelectedItems>" if items else "")
        + "</xml>"
    ).encode()


_msg_ids = itertools.count(int(time.time()) * 1000)


def text_xml(*, user: str, content: str, msg_id: int | None = None) -> bytes:
    """A text message from `user` to the app (the shape of the reference sample)."""
    return (
        f"<xml><ToUserName>{_cdata(CORP_ID)}</ToUserName><FromUserName>{_cdata(user)}</FromUserName>"
        f"<CreateTime>{int(time.time())}</CreateTime><MsgType>{_cdata('text')}</MsgType>"
        f"<Content>{_cdata(content)}</Content><MsgId>{msg_id or next(_msg_ids)}</MsgId>"
        f"<AgentID>{AGENT_ID}</AgentID></xml>"
    ).encode()
