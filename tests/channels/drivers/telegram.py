"""The Telegram driver: HTML cards with inline keyboards on `FakeTelegram`, updates pushed to
the webhook with the secret header, answers by answerCallbackQuery or by a reply."""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterator, Sequence
from typing import Any

import httpx

from tests.channels.drivers.base import Answer, Card, Driver, Private, invisible
from tests.support import fake_telegram, telegram_buttons
from tests.support.fake_telegram import CHAT, Message
from tests.support.http import TLS
from tests.support.servers import wait_until

#: what a Telegram client turns into something live in plain text (outside <code>/<pre>):
#: links (with a scheme or a bare domain), @mentions, /commands, #hashtags, $cashtags, emails
AUTO_ENTITIES = re.compile(
    r"[A-Za-z][A-Za-z0-9+.-]*://\S+|\b[\w-]+(\.[\w-]+)*\.[A-Za-z]{2,}\b|@\w{2,}|"
    r"(?<!\S)/[A-Za-z]\w*|#\w+|\$[A-Z]{1,8}\b"
)
#: tags a card may use; the rest of HTML mode (spoilers, custom emoji, blockquotes) it needs not
CARD_TAGS = {"bold", "code", "pre", "text_link"}
SCOPE_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class TelegramDriver(Driver):
    """Telegram through `FakeTelegram`: presses, typed replies, the secret header."""

    name = "telegram"
    args_chars = 1000
    WEBHOOK_SECRET = "contract-suite-telegram-webhook-secret"
    CALLBACK_SECRET = "contract-suite-telegram-callback-secret-0123456789"
    URL = "/channels/telegram/webhook"

    def start(self) -> None:
        self.fake = fake_telegram.FakeTelegram().start()

    def stop(self) -> None:
        self.fake.stop()

    def settings(self) -> dict[str, Any]:
        return {
            "bot_token": fake_telegram.TOKEN,
            "webhook_secret": self.WEBHOOK_SECRET,
            "callback_secret": self.CALLBACK_SECRET,
            "default_target": str(CHAT),
            "bot_username": fake_telegram.BOT_USERNAME,
            "api_url": self.fake.url,
        }

    def user_id(self, person: str) -> str:
        # Telegram user ids are numbers; a stable one per person.
        return str(100_000_000 + int(hashlib.sha256(person.encode()).hexdigest()[:6], 16))

    # -- cards --

    def _card_message(self, request_id: str) -> Message | None:
        for message in self.fake.bot_messages():
            if message.parse_mode == "HTML" and request_id in message.shown()[0]:
                return message
        return None

    def _kinds(self, message: Message) -> list[tuple[str, str, dict[str, Any]]]:
        """(request id, kind, button) for each button: read with the format's own code."""
        found = []
        for button in message.buttons:
            if "callback_data" in button:
                request_id, kind = telegram_buttons.read(
                    self.CALLBACK_SECRET, button["callback_data"]
                )
                found.append((request_id, kind, button))
        return found

    def card(self, request_id: str) -> Card:
        message: Message = wait_until(lambda: self._card_message(request_id))
        text, _ = message.shown()
        # A preset reason is a kind of Reject; every other kind is one of the neutral actions.
        offers = {kind for _, kind, _ in self._kinds(message)} - {"reason"}
        return Card(text, len(message.versions) - 1, frozenset(offers), message)

    def links_to(self, card: Card, url: str) -> bool:
        # a link in Telegram's text is an entity, not text
        message: Message = card.raw
        _, entities = message.shown()
        return any(e.type == "text_link" and e.url == url for e in entities)

    def live_markup(self, card: Card, request_id: str, own_url: str) -> list[str]:
        message: Message = card.raw
        text, entities = message.shown()
        live: list[str] = []
        inert = [False] * len(text)
        for entity in entities:
            if entity.type not in CARD_TAGS:
                live.append(f"<{entity.type}> on a card")
            if entity.type in ("code", "pre"):
                inert[entity.offset : entity.offset + entity.length] = [True] * entity.length
            if entity.type == "text_link" and entity.url != own_url:
                live.append(f"a link away from gate: {entity.url}")
        for found in AUTO_ENTITIES.finditer(text):
            if not all(inert[found.start() : found.end()]):
                live.append(f"auto-detected in plain text: {found.group().strip()}")
        for button_request, kind, button in self._kinds(message):
            if button_request != request_id:
                live.append(f"a {kind} button for another request: {button['text']}")
        live += [f"a url button: {b.get('url')}" for b in message.buttons if "url" in b]
        buttons = "".join(b["text"] for b in message.buttons)
        return live + invisible(text + buttons)

    # -- clicks --

    def _post(self, gate_url: str, delivery: fake_telegram.Delivery) -> httpx.Response:
        with httpx.Client(base_url=gate_url, timeout=15, verify=TLS) as client:
            return client.post(self.URL, content=delivery.body, headers=delivery.headers)

    def _push(self, gate_url: str, update: dict[str, Any]) -> httpx.Response:
        return self._post(gate_url, fake_telegram.deliver(update, self.WEBHOOK_SECRET))

    def _noticed(self, update: dict[str, Any], status: int) -> Answer:
        """The press's answerCallbackQuery, shown to the presser alone."""
        query_id = update["callback_query"]["id"]

        def notice() -> Private:
            person, body = wait_until(lambda: (a := self.fake.answer(query_id))[1] and a)
            return Private(str(body.get("text", "")), str(person))

        return Answer(status, notice)

    def _replied(self, message_id: int, person: str, status: int) -> Answer:
        """The bot's reply to a person's message (Telegram has no private answer to text)."""

        def reply() -> Private:
            found = wait_until(lambda: self.fake.replies_to(CHAT, message_id))
            return Private(found[-1].shown()[0], person)

        return Answer(status, reply)

    def _data(self, request_id: str, kind: str, **args: Any) -> str:
        """The data of the card's button of `kind` (matching `args`), or one minted the way a
        crafted client could send it when the card shows no such button."""
        message = self._card_message(request_id)
        for button_request, button_kind, button in self._kinds(message) if message else []:
            if button_request == request_id and button_kind == kind and not args:
                return str(button["callback_data"])
        return telegram_buttons.mint(self.CALLBACK_SECRET, request_id, kind, **args)

    def press(
        self, gate_url: str, request_id: str, person: str, kind: str, **args: Any
    ) -> tuple[dict[str, Any], httpx.Response]:
        """`person` presses the button of `kind` on the card of `request_id`."""
        card: Message = wait_until(lambda: self._card_message(request_id))
        data = self._data(request_id, kind, **args)
        update = self.fake.press(CHAT, card.message_id, data, int(self.user_id(person)))
        return update, self._push(gate_url, update)

    def _prompted(
        self, gate_url: str, request_id: str, person: str, kind: str, reply: str
    ) -> Answer:
        """Press Reject… or Edit & approve…; if a prompt comes, reply to it with `reply`."""
        before = len(self._prompts())
        update, r = self.press(gate_url, request_id, person, kind)
        prompts = self._prompts()
        if len(prompts) == before or r.status_code != 200:
            return self._noticed(update, r.status_code)  # refused: the notice says why
        said = self.fake.say(
            CHAT, int(self.user_id(person)), reply, reply_to=prompts[-1].message_id
        )
        r = self._push(gate_url, said)
        return self._replied(said["message"]["message_id"], self.user_id(person), r.status_code)

    def send_link(self, gate_url: str, person: str, code: str) -> Answer | None:
        """`/link <code>` sent in the person's private chat with the bot (whose id is the
        person's); the bot's reply there is the answer."""
        uid = int(self.user_id(person))
        self.fake.chats.add(uid)  # the bot may write to a person who wrote to it
        said = self.fake.say(uid, uid, f"/link {code}")
        r = self._push(gate_url, said)
        message_id = said["message"]["message_id"]

        def reply() -> Private:
            found = wait_until(lambda: self.fake.replies_to(uid, message_id))
            return Private(found[-1].shown()[0], str(uid))

        return Answer(r.status_code, reply)

    def _prompts(self) -> list[Message]:
        return [m for m in self.fake.bot_messages() if (m.markup or {}).get("force_reply")]

    def click(
        self,
        gate_url: str,
        request_id: str,
        person: str,
        action: str,
        *,
        reason: str | None = None,
        reasons: Sequence[str] = (),
        edits: dict[str, str] | None = None,
        grant: tuple[str, str] | None = None,
    ) -> Answer:
        if action == "reject" and reasons:
            return self._preset(gate_url, request_id, person, reasons[0])
        if action == "reject" and reason:
            return self._prompted(gate_url, request_id, person, "reject", reason)
        if action == "edit":
            lines = "\n".join(f"{k} = {v}" for k, v in (edits or {}).items())
            return self._prompted(gate_url, request_id, person, "edit", lines)
        if grant is not None:
            scope, duration = grant
            seconds = int(duration[:-1]) * SCOPE_SECONDS[duration[-1]]
            update, r = self.press(gate_url, request_id, person, "grant", grant=(scope, seconds))
            return self._noticed(update, r.status_code)
        update, r = self.press(gate_url, request_id, person, action)
        return self._noticed(update, r.status_code)

    def _preset(self, gate_url: str, request_id: str, person: str, label: str) -> Answer:
        """Press "Reject: <label>"; a label the card lacks is sent as a crafted index."""
        card: Message = wait_until(lambda: self._card_message(request_id))
        for button in card.buttons:
            if button["text"] == f"Reject: {label}":
                update = self.fake.press(
                    CHAT, card.message_id, button["callback_data"], int(self.user_id(person))
                )
                return self._noticed(update, self._push(gate_url, update).status_code)
        update, r = self.press(gate_url, request_id, person, "reason", reason=200)
        return self._noticed(update, r.status_code)

    def forgeries(self, gate_url: str, request_id: str, person: str) -> dict[str, httpx.Response]:
        # Telegram signs nothing and puts no time in an update: the secret header is all
        # there is, so there is no "stale" delivery; a replay is the `replay` case.
        card: Message = wait_until(lambda: self._card_message(request_id))
        data = self._data(request_id, "approve")
        update = self.fake.press(CHAT, card.message_id, data, int(self.user_id(person)))
        deliver = fake_telegram.deliver
        garbage = b"\xff{not json" * 10
        return {
            "wrong secret": self._post(gate_url, deliver(update, "not-the-webhook-secret-at-all")),
            "garbage under a wrong secret": self._post(gate_url, deliver(garbage, "nope" * 8)),
            "unsigned": self._post(gate_url, deliver(update, None)),
            "empty secret": self._post(gate_url, deliver(update, "")),
            "the bot token as secret": self._post(gate_url, deliver(update, fake_telegram.TOKEN)),
        }

    def replay(self, gate_url: str, request_id: str, person: str, action: str) -> list[Answer]:
        card: Message = wait_until(lambda: self._card_message(request_id))
        data = self._data(request_id, action)
        update = self.fake.press(CHAT, card.message_id, data, int(self.user_id(person)))
        return [self._noticed(update, self._push(gate_url, update).status_code) for _ in range(2)]

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        with self.fake.down():
            yield

    def platform_calls(self) -> int:
        return len(self.fake.calls_to("sendMessage")) + len(self.fake.calls_to("editMessageText"))
