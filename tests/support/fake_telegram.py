"""A fake Telegram Bot API on loopback, and updates built the way Telegram builds them.

`FakeTelegram` serves `POST /bot<token>/<method>` for the methods gate uses (sendMessage,
editMessageText, answerCallbackQuery) with the Bot API's `{ok, result}` / `{ok: false,
error_code, description, parameters}` envelope. It checks what it receives as Telegram does:
the token in the path, chats the bot is in, HTML parse mode parsed with its own parser (only
Telegram's tags, balanced; at most 4,096 characters once parsed), inline keyboards (one
action per button, callback_data 1-64 bytes), forced replies, replies to messages that
exist, answers of at most 200 characters to a query it issued, edits of the bot's own
messages ("message is not modified" when nothing changes). It records every call and fails
on command (5xx outages, 429 flood control with `parameters.retry_after`, 403 kicked).

It also builds the Updates Telegram pushes to the webhook (a button press with the card as
the presser sees it, a message, a reply to one of the bot's messages) and remembers which
person each callback query and message was, so a test can tell who an answer went to.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from html.parser import HTMLParser
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.support.servers import LoopbackFake

BOT_ID = 7000000001
TOKEN = f"{BOT_ID}:AAFakeTelegramTokenForGateTests_0123"
BOT_USERNAME = "gate_test_bot"
CHAT = -1001234567890
#: Telegram's limits (Bot API docs: sendMessage, InlineKeyboardButton, answerCallbackQuery,
#: ForceReply)
TEXT_LIMIT = 4096
CALLBACK_DATA_BYTES = 64
NOTICE_LIMIT = 200
PLACEHOLDER_LIMIT = 64
#: the tags HTML parse mode reads ("HTML style" in the Bot API's formatting options)
TAGS = {
    "b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler",
    "a", "code", "pre", "blockquote", "tg-emoji",
}  # fmt: skip
QUERY_TOO_OLD = "Bad Request: query is too old and response timeout expired or query ID is invalid"
NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup "
    "are exactly the same as a current content and reply markup of the message"
)


class ApiError(Exception):
    """A call Telegram refuses: its error_code and description."""

    def __init__(self, code: int, description: str, parameters: dict[str, Any] | None = None):
        super().__init__(description)
        self.code = code
        self.description = description
        self.parameters = parameters


# -- HTML parse mode --------------------------------------------------------------------------


@dataclass(frozen=True)
class Entity:
    """A formatting entity of parsed text: its type, where it is (Python characters), its URL."""

    type: str
    offset: int
    length: int
    url: str | None = None


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.length = 0  # of the text so far: entities are placed by it
        self.stack: list[tuple[str, int, str | None]] = []
        self.entities: list[Entity] = []

    def _at(self) -> int:
        return self.length

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in TAGS:
            raise ApiError(
                400, f'Bad Request: can\'t parse entities: Unsupported start tag "{tag}"'
            )
        url = dict(attrs).get("href") if tag == "a" else None
        if tag == "a" and not url:
            raise ApiError(400, "Bad Request: can't parse entities: a link needs an href")
        self.stack.append((tag, self._at(), url))

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1][0] != tag:
            raise ApiError(400, f"Bad Request: can't parse entities: unexpected end tag {tag}")
        name, start, url = self.stack.pop()
        kind = {"a": "text_link", "b": "bold", "strong": "bold", "i": "italic"}.get(name, name)
        self.entities.append(Entity(kind, start, self._at() - start, url))

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        self.length += len(data)


_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(\s[^<>]*)?>")
_ENTITY = re.compile(r"&(lt|gt|amp|quot|#[0-9]+|#x[0-9A-Fa-f]+);")


def _check_escapes(text: str) -> None:
    """Telegram: every `<`, `>` and `&` that is not part of a tag or an entity must be
    written as an entity, or the message is refused."""
    for data in _TAG.split(text)[::2]:  # split keeps one group per tag: every other part
        if data is None:
            continue
        bare = _ENTITY.sub("", data)
        for char in "<>&":
            if char in bare:
                raise ApiError(400, f"Bad Request: can't parse entities: unescaped {char!r}")


def parse_html(text: str) -> tuple[str, list[Entity]]:
    """The text Telegram shows for an HTML-mode message, and its entities; ApiError if it
    would refuse it."""
    shown, entities = _parsed(text)
    return shown, list(entities)


@lru_cache(maxsize=512)
def _parsed(text: str) -> tuple[str, tuple[Entity, ...]]:
    # the tests' polling reads the same card many times: each text is parsed once
    _check_escapes(text)
    parser = _Parser()
    parser.feed(text)
    parser.close()
    if parser.stack:
        raise ApiError(400, f"Bad Request: can't parse entities: unclosed {parser.stack[-1][0]}")
    return "".join(parser.text), tuple(sorted(parser.entities, key=lambda e: e.offset))


def utf16_length(text: str) -> int:
    """Length as Telegram counts it (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2


# -- what the fake holds ----------------------------------------------------------------------


@dataclass
class Call:
    method: str
    token: str
    body: Any
    status: int
    response: dict[str, Any]
    #: when it arrived (monotonic seconds), to check a retry waited as asked
    at: float = field(default_factory=time.monotonic)


@dataclass
class Message:
    """A message in a chat: the bot's (with every version it was edited to) or a person's."""

    chat_id: int
    message_id: int
    sender: dict[str, Any]
    #: what was sent (HTML for the bot's cards), one entry per version
    versions: list[str]
    markups: list[dict[str, Any] | None]
    parse_mode: str | None = None
    reply_to: int | None = None
    date: int = field(default_factory=lambda: int(time.time()))

    @property
    def html(self) -> str:
        return self.versions[-1]

    @property
    def markup(self) -> dict[str, Any] | None:
        return self.markups[-1]

    def shown(self) -> tuple[str, list[Entity]]:
        """The text and entities Telegram shows for the latest version."""
        if self.parse_mode == "HTML":
            return parse_html(self.html)
        return self.html, []

    @property
    def buttons(self) -> list[dict[str, Any]]:
        keyboard = (self.markup or {}).get("inline_keyboard", [])
        return [button for row in keyboard for button in row]


@dataclass
class Failure:
    method: str | None
    status: int
    description: str
    retry_after: int | None
    times: int | None


def user(user_id: int, name: str = "Person") -> dict[str, Any]:
    """A `User` object for a person."""
    return {"id": user_id, "is_bot": False, "first_name": name, "language_code": "en"}


BOT_USER = {"id": BOT_ID, "is_bot": True, "first_name": "gate", "username": BOT_USERNAME}


class FakeTelegram(LoopbackFake):
    """The Bot API as far as gate uses it. Thread-safe: tests read while it serves."""

    def __init__(self, token: str = TOKEN, chats: tuple[int, ...] = (CHAT,)) -> None:
        self.token = token
        #: chats the bot is in
        self.chats = set(chats)
        self.calls: list[Call] = []
        self.messages: dict[tuple[int, int], Message] = {}
        self.failures: list[Failure] = []
        #: callback query id -> (the presser's id, the answer once given)
        self.queries: dict[str, tuple[int, dict[str, Any] | None]] = {}
        self._ids = itertools.count(1)
        self._updates = itertools.count(500_000_000)
        self.lock = threading.RLock()
        self.app = Starlette(
            routes=[Route("/bot{token}/{method}", self._handle, methods=["POST", "GET"])]
        )

    # -- control --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.base_url

    def fail(
        self,
        method: str | None = None,
        *,
        status: int = 502,
        description: str = "Bad Gateway",
        retry_after: int | None = None,
        times: int | None = 1,
    ) -> None:
        """Make the next `times` calls of `method` (None: any) fail (times=None: until heal)."""
        with self.lock:
            self.failures.append(Failure(method, status, description, retry_after, times))

    def flood(self, method: str, retry_after: int, times: int = 1) -> None:
        """429 flood control with `parameters.retry_after`, as Telegram answers it."""
        self.fail(
            method,
            status=429,
            description=f"Too Many Requests: retry after {retry_after}",
            retry_after=retry_after,
            times=times,
        )

    def heal(self) -> None:
        """Stop failing."""
        with self.lock:
            self.failures.clear()

    @contextmanager
    def down(self) -> Iterator[None]:
        """Every card call fails with a 502 inside the block."""
        for method in ("sendMessage", "editMessageText"):
            self.fail(method, times=None)
        try:
            yield
        finally:
            self.heal()

    def calls_to(self, method: str, *, ok: bool | None = None) -> list[Call]:
        with self.lock:
            found = [c for c in self.calls if c.method == method]
        return [c for c in found if ok is None or c.response.get("ok") is ok]

    def bot_messages(self) -> list[Message]:
        """The bot's messages, oldest first."""
        with self.lock:
            return [m for m in self.messages.values() if m.sender["id"] == BOT_ID]

    def answer(self, query_id: str) -> tuple[int, dict[str, Any] | None]:
        """(who pressed, the answerCallbackQuery body once given) for a query."""
        with self.lock:
            return self.queries[query_id]

    # -- updates as Telegram pushes them ------------------------------------------------------

    def as_seen(self, message: Message) -> dict[str, Any]:
        """A `Message` object as an update carries it: plain text, entities, keyboard."""
        text, entities = message.shown()
        seen: dict[str, Any] = {
            "message_id": message.message_id,
            "from": message.sender,
            "chat": {"id": message.chat_id, "title": "Approvals", "type": "supergroup"},
            "date": message.date,
            "text": text,
        }
        if entities:
            seen["entities"] = [
                {"type": e.type, "offset": e.offset, "length": e.length}
                | ({"url": e.url} if e.url else {})
                for e in entities
            ]
        if message.markup and "inline_keyboard" in message.markup:
            seen["reply_markup"] = message.markup
        return seen

    def press(self, chat_id: int, message_id: int, data: str, person: int) -> dict[str, Any]:
        """The Update a press of a button carrying `data` on a message becomes.

        Telegram sends the data of a button the client shows; a modified client can send
        any, so `data` need not be on the message.
        """
        with self.lock:
            card = self.messages[(chat_id, message_id)]
            query_id = str(next(self._ids) * 1_000_003 + 4_200_000_000_000)
            self.queries[query_id] = (person, None)
            return {
                "update_id": next(self._updates),
                "callback_query": {
                    "id": query_id,
                    "from": user(person),
                    "message": self.as_seen(card),
                    "chat_instance": "-4096150343512278611",
                    "data": data,
                },
            }

    def say(
        self, chat_id: int, person: int, text: str, *, reply_to: int | None = None
    ) -> dict[str, Any]:
        """The Update a person's message becomes (a reply when `reply_to` names a message)."""
        with self.lock:
            message_id = next(self._ids)
            message = Message(chat_id, message_id, user(person), [text], [None], reply_to=reply_to)
            self.messages[(chat_id, message_id)] = message
            seen = self.as_seen(message)
            # a person's private chat with the bot has the person's id
            seen["chat"]["type"] = "private" if chat_id == person else "supergroup"
            if text.startswith("/"):
                verb = text.split(None, 1)[0]
                seen["entities"] = [{"type": "bot_command", "offset": 0, "length": len(verb)}]
            if reply_to is not None:
                seen["reply_to_message"] = self.as_seen(self.messages[(chat_id, reply_to)])
            return {"update_id": next(self._updates), "message": seen}

    def replies_to(self, chat_id: int, message_id: int) -> list[Message]:
        """The bot's messages that reply to a message."""
        with self.lock:
            return [
                m
                for m in self.messages.values()
                if m.chat_id == chat_id and m.reply_to == message_id and m.sender["id"] == BOT_ID
            ]

    # -- the API --------------------------------------------------------------------------

    async def _handle(self, request: Request) -> JSONResponse:
        token, method = request.path_params["token"], request.path_params["method"]
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = None
        try:
            if token != self.token:
                raise ApiError(401, "Unauthorized")
            if not isinstance(body, dict):
                raise ApiError(400, "Bad Request: the body is not a JSON object")
            self._take_failure(method)
            with self.lock:
                result = self._method(method, body)
            status, response = 200, {"ok": True, "result": result}
        except ApiError as exc:
            status = exc.code
            response = {"ok": False, "error_code": exc.code, "description": exc.description}
            if exc.parameters:
                response["parameters"] = exc.parameters
        with self.lock:
            self.calls.append(Call(method, token, body, status, response))
        return JSONResponse(response, status)

    def _take_failure(self, method: str) -> None:
        with self.lock:
            for failure in self.failures:
                if failure.method not in (None, method):
                    continue
                if failure.times is not None:
                    failure.times -= 1
                    if failure.times <= 0:
                        self.failures.remove(failure)
                parameters = None
                if failure.retry_after is not None:
                    parameters = {"retry_after": failure.retry_after}
                raise ApiError(failure.status, failure.description, parameters)

    def _method(self, method: str, body: dict[str, Any]) -> Any:
        if method == "sendMessage":
            return self._send(body)
        if method == "editMessageText":
            return self._edit(body)
        if method == "answerCallbackQuery":
            return self._answer_query(body)
        raise ApiError(404, "Not Found")

    def _chat(self, body: dict[str, Any]) -> int:
        chat_id = body.get("chat_id")
        if isinstance(chat_id, str) and chat_id.lstrip("-").isdigit():
            chat_id = int(chat_id)
        if not isinstance(chat_id, int) or chat_id not in self.chats:
            raise ApiError(400, "Bad Request: chat not found")
        return chat_id

    def _send(self, body: dict[str, Any]) -> dict[str, Any]:
        chat_id = self._chat(body)
        text, parse_mode = self._text(body)
        markup = check_markup(body.get("reply_markup"))
        reply_to = None
        reply = body.get("reply_parameters")
        if reply is not None:
            reply_to = reply.get("message_id") if isinstance(reply, dict) else None
            if not isinstance(reply_to, int):
                raise ApiError(400, "Bad Request: reply_parameters needs a message_id")
            if (chat_id, reply_to) not in self.messages:
                if not reply.get("allow_sending_without_reply"):
                    raise ApiError(400, "Bad Request: message to be replied not found")
                reply_to = None
        message = Message(
            chat_id, next(self._ids), BOT_USER, [text], [markup], parse_mode, reply_to
        )
        self.messages[(chat_id, message.message_id)] = message
        return self.as_seen(message)

    def _edit(self, body: dict[str, Any]) -> dict[str, Any]:
        chat_id = self._chat(body)
        message = self.messages.get((chat_id, body.get("message_id")))  # type: ignore[arg-type]
        if message is None:
            raise ApiError(400, "Bad Request: message to edit not found")
        if message.sender["id"] != BOT_ID:
            raise ApiError(400, "Bad Request: message can't be edited")
        text, parse_mode = self._text(body)
        markup = check_markup(body.get("reply_markup"))
        if markup is not None and "force_reply" in markup:
            raise ApiError(400, "Bad Request: inline keyboard expected")
        if (text, parse_mode, markup or None) == (
            message.html,
            message.parse_mode,
            message.markup or None,
        ):
            raise ApiError(400, NOT_MODIFIED)
        message.versions.append(text)
        message.markups.append(markup)
        message.parse_mode = parse_mode
        return self.as_seen(message)

    def _text(self, body: dict[str, Any]) -> tuple[str, str | None]:
        text, parse_mode = body.get("text"), body.get("parse_mode")
        if not isinstance(text, str):
            raise ApiError(400, "Bad Request: message text is empty")
        if parse_mode not in (None, "HTML"):
            raise ApiError(400, f"Bad Request: unsupported parse_mode {parse_mode!r} here")
        shown = parse_html(text)[0] if parse_mode == "HTML" else text
        if not shown.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        if utf16_length(shown) > TEXT_LIMIT:
            raise ApiError(400, "Bad Request: message is too long")
        return text, parse_mode

    def _answer_query(self, body: dict[str, Any]) -> bool:
        query_id = body.get("callback_query_id")
        if not isinstance(query_id, str) or query_id not in self.queries:
            raise ApiError(
                400,
                "Bad Request: query is too old and response timeout expired or query ID is invalid",
            )
        person, given = self.queries[query_id]
        if given is not None:
            raise ApiError(400, "Bad Request: query is already answered")
        text = body.get("text", "")
        if not isinstance(text, str) or len(text) > NOTICE_LIMIT:
            raise ApiError(400, "Bad Request: MESSAGE_TOO_LONG")
        self.queries[query_id] = (person, body)
        return True


def check_markup(markup: Any) -> dict[str, Any] | None:
    """An inline keyboard or a forced reply as Telegram checks it; ApiError otherwise."""
    if markup is None:
        return None
    if not isinstance(markup, dict):
        raise ApiError(400, "Bad Request: can't parse reply keyboard markup JSON object")
    if "force_reply" in markup:
        if markup["force_reply"] is not True:
            raise ApiError(400, "Bad Request: force_reply must be True")
        placeholder = markup.get("input_field_placeholder", "x")
        if not isinstance(placeholder, str) or not 1 <= len(placeholder) <= PLACEHOLDER_LIMIT:
            raise ApiError(400, "Bad Request: input_field_placeholder must be 1-64 characters")
        return markup
    keyboard = markup.get("inline_keyboard")
    if not isinstance(keyboard, list) or not all(isinstance(row, list) for row in keyboard):
        raise ApiError(400, "Bad Request: inline_keyboard must be an Array of Arrays")
    for row in keyboard:
        for button in row:
            check_button(button)
    return markup


def check_button(button: Any) -> None:
    """One InlineKeyboardButton: a text and exactly one action; callback_data 1-64 bytes."""
    if not isinstance(button, dict) or not isinstance(button.get("text"), str):
        raise ApiError(400, "Bad Request: button text must be a String")
    if not button["text"].strip():
        raise ApiError(400, "Bad Request: BUTTON_TEXT_EMPTY")
    actions = set(button) - {"text"}
    if len(actions) != 1 or actions - {"callback_data", "url"}:
        raise ApiError(400, "Bad Request: a button needs exactly one of callback_data or url")
    data = button.get("callback_data")
    if "callback_data" in button and (
        not isinstance(data, str) or not 1 <= len(data.encode()) <= CALLBACK_DATA_BYTES
    ):
        raise ApiError(400, "Bad Request: BUTTON_DATA_INVALID")
    if "url" in button and not str(button["url"]).startswith(("https://", "http://", "tg://")):
        raise ApiError(400, "Bad Request: BUTTON_URL_INVALID")


@dataclass(frozen=True)
class Delivery:
    """An Update's body and headers as Telegram POSTs it to the webhook."""

    body: bytes
    headers: dict[str, str]


def deliver(update: dict[str, Any] | bytes, secret: str | None) -> Delivery:
    """The webhook request for an update: JSON, with the secret_token header when set."""
    body = update if isinstance(update, bytes) else json.dumps(update).encode()
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers["X-Telegram-Bot-Api-Secret-Token"] = secret
    return Delivery(body, headers)
