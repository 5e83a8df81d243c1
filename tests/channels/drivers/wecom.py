"""The WeCom driver: template cards on `FakeWeCom`, encrypted and signed callbacks, and the
private text messages gate sends the clicker.

Template cards have no text inputs, so a reason or an edit takes two steps, as a person
would take them: press Reject… (or Edit…) on the card, read the instructions gate sends in
the private chat, then type the command (`reject <id> <reason>`, `edit <id>` + `name=value`
lines) or tick preset reasons on the form gate sent and press its Reject.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx

from tests.channels.drivers.base import (
    Answer,
    Card,
    Driver,
    Private,
    invisible,
    objects,
    strings,
)
from tests.support import fake_wecom
from tests.support.http import TLS
from tests.support.servers import wait_until

#: fields of a template card that hold a link WeCom opens
LINK_FIELDS = ("url", "pagepath", "appid")


class WeComDriver(Driver):
    """WeCom through `FakeWeCom`: template cards, encrypted callbacks, private texts."""

    name = "wecom"
    args_chars = 160 - len("Call: ")
    #: a template card's key holds five characters
    claim_label = "Claim"
    refresh_on_click = (
        "WeCom replaces a template card only with the one-use code a click on it brings"
    )
    TOKEN = "wecomContractToken01"
    AES_KEY = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"
    URL = "/channels/wecom/callback"

    def start(self) -> None:
        self.fake = fake_wecom.FakeWeCom().start()

    def stop(self) -> None:
        self.fake.stop()

    def settings(self) -> dict[str, Any]:
        return {
            "corp_id": fake_wecom.CORP_ID,
            "agent_id": fake_wecom.AGENT_ID,
            "secret": fake_wecom.SECRET,
            "token": self.TOKEN,
            "encoding_aes_key": self.AES_KEY,
            "default_target": "alice|bob|carol|mallory",
            "api_url": self.fake.url,
        }

    def user_id(self, person: str) -> str:
        return f"wx-{person}"

    # -- cards --

    def _message(self, request_id: str) -> fake_wecom.Message | None:
        for message in self.fake.posted():
            if message.cards[0]["card_type"] != "vote_interaction" and request_id in json.dumps(
                message.cards[0]
            ):
                return message
        return None

    @staticmethod
    def _offers(card: dict[str, Any]) -> frozenset[str]:
        if card.get("card_type") != "button_interaction":
            return frozenset()
        offers = set()
        for button in card.get("button_list", []):
            verb = str(button.get("key", "")).partition("-")[0]
            verbs = ("approve", "reject", "edit", "extend", "acknowledge")
            if button.get("type", 0) == 0 and verb in verbs:
                offers.add(verb)
        if card.get("button_selection", {}).get("question_key") == "grant":
            offers.add("grant")
        return frozenset(offers)

    def card(self, request_id: str) -> Card:
        message: fake_wecom.Message = wait_until(lambda: self._message(request_id))
        raw = {"card": message.card, "enable_id_trans": message.enable_id_trans}
        text = json.dumps(message.card, ensure_ascii=False)
        return Card(text, len(message.cards) - 1, self._offers(message.card), raw)

    def live_markup(self, card: Card, request_id: str, own_url: str) -> list[str]:
        # Template card text fields are plain: WeCom reads no markup in them. What it acts on
        # is links (any url field), `$userName=…$` / `$departmentName=…$` when the message
        # asked for id translation, and a callback button on a card for another request.
        live: list[str] = []
        if card.raw["enable_id_trans"]:
            ids = ("$userName=", "$departmentName=")
            live += [s for s in strings(card.raw["card"]) if any(i in s for i in ids)]
        for obj in objects(card.raw["card"]):
            for key in LINK_FIELDS:
                if key in obj and obj[key] != own_url:
                    live.append(f"a link away from gate: {key}={obj[key]}")
        task = str(card.raw["card"].get("task_id", ""))
        if task and request_id not in task:
            live.append(f"a card whose buttons act on another request: {task}")
        return live + invisible("".join(strings(card.raw["card"])))

    # -- clicks --

    def _post(self, gate_url: str, callback: fake_wecom.Callback) -> httpx.Response:
        with httpx.Client(base_url=gate_url, timeout=15, verify=TLS) as client:
            return client.post(self.URL, params=callback.query, content=callback.body)

    def _signed(self, plain: bytes, **kwargs: Any) -> fake_wecom.Callback:
        return fake_wecom.build_callback(
            plain, token=self.TOKEN, encoding_aes_key=self.AES_KEY, **kwargs
        )

    def _private(self, user: str, seen: int) -> Callable[[], Private]:
        """Waits for the first text gate sends `user` after the `seen` ones already there."""

        def wait() -> Private:
            texts: list[str] = wait_until(lambda: (t := self.fake.texts_to(user))[seen:] and t)
            return Private(texts[seen], user)

        return wait

    def _press(
        self,
        gate_url: str,
        request_id: str,
        person: str,
        key: str,
        *,
        task: str | None = None,
        selected: dict[str, list[str]] | None = None,
        card_type: str = "button_interaction",
        created: int | None = None,
    ) -> tuple[httpx.Response, fake_wecom.Callback]:
        """A `template_card_event`: `person` presses the button `key` on the card."""
        task = task or self._message(request_id).task_id  # type: ignore[union-attr]
        plain = fake_wecom.card_event_xml(
            user=self.user_id(person),
            task_id=task,
            event_key=key,
            response_code=self.fake.issue_code(task),
            card_type=card_type,
            selected=selected,
            create_time=created,
        )
        callback = self._signed(plain)
        return self._post(gate_url, callback), callback

    def _type(self, gate_url: str, person: str, content: str) -> Answer:
        """`person` sends the app a text message; the answer is gate's next private text."""
        user = self.user_id(person)
        seen = len(self.fake.texts_to(user))
        plain = fake_wecom.text_xml(user=user, content=content)
        r = self._post(gate_url, self._signed(plain))
        return Answer(r.status_code, self._private(user, seen))

    def _key(self, request_id: str, action: str) -> str:
        """The key of the card's button for `action` (crafted when the card shows none)."""
        message = self._message(request_id)
        for button in message.card.get("button_list", []) if message else []:
            if str(button.get("key", "")).partition("-")[0] == action:
                return str(button["key"])
        return action

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
        wait_until(lambda: self._message(request_id))
        user = self.user_id(person)
        seen = len(self.fake.texts_to(user))
        forms = len(self.fake.posted())
        selected = {"grant": [f"{grant[0]}:{grant[1]}"]} if grant else None
        key = self._key(request_id, action)
        r, _ = self._press(gate_url, request_id, person, key, selected=selected)
        first = Answer(r.status_code, self._private(user, seen))
        if action in ("approve", "extend", "acknowledge") or r.status_code != 200:
            return first
        told = first.private().text
        if action == "reject" and reasons:
            return self._tick(gate_url, request_id, person, reasons, forms) or first
        if action == "reject" and reason and f"reject {request_id}" in told:
            return self._type(gate_url, person, f"reject {request_id} {reason}")
        if action == "edit" and f"edit {request_id}" in told:
            return self._type(gate_url, person, self._edited(told, request_id, edits or {}))
        return first

    def _tick(
        self, gate_url: str, request_id: str, person: str, labels: Sequence[str], forms: int
    ) -> Answer | None:
        """Tick preset reasons by label on the reasons form gate sent `person`, press Reject
        (an unknown label is sent as its own option id, as a crafted callback could)."""
        user = self.user_id(person)
        sent = [
            m
            for m in self.fake.posted()[forms:]
            if m.card["card_type"] == "vote_interaction" and m.recipients.get("touser") == user
        ]
        if not sent:
            return None
        form = sent[-1].card
        by_label = {o["text"]: o["id"] for o in form["checkbox"]["option_list"]}
        picked = [by_label.get(label, label) for label in labels]
        seen = len(self.fake.texts_to(user))
        r, _ = self._press(
            gate_url, request_id, person, form["submit_button"]["key"], task=form["task_id"],
            selected={form["checkbox"]["question_key"]: picked}, card_type="vote_interaction",
        )  # fmt: skip
        # A reject that is recorded is answered by the refreshed card; a refusal privately.
        return Answer(r.status_code, self._private(user, seen))

    @staticmethod
    def _edited(template: str, request_id: str, edits: dict[str, str]) -> str:
        """The `edit` command gate sent, with the named arguments' values replaced."""
        lines = template.splitlines()
        start = lines.index(f"edit {request_id}")
        out = [lines[start]]
        for line in lines[start + 1 :]:
            name, eq, value = line.partition("=")
            if not eq:
                break
            out.append(f"{name}={edits.get(name, value)}")
        return "\n".join(out)

    def forgeries(self, gate_url: str, request_id: str, person: str) -> dict[str, httpx.Response]:
        task = self._message(request_id).task_id  # type: ignore[union-attr]
        plain = fake_wecom.card_event_xml(
            user=self.user_id(person), task_id=task, event_key="approve", response_code="rc-x"
        )
        garbage = fake_wecom.Callback(
            self._signed(plain, signing_token="not-the-token").query, b"\xff<not xml" * 10
        )
        return {
            "wrong secret": self._post(gate_url, self._signed(plain, signing_token="nope")),
            "garbage under a wrong secret": self._post(gate_url, garbage),
            "unsigned": self._post(gate_url, self._signed(plain, signed=False)),
            "stale": self._post(gate_url, self._signed(plain, timestamp=int(time.time()) - 600)),
        }

    def replay(self, gate_url: str, request_id: str, person: str, action: str) -> list[Answer]:
        user = self.user_id(person)
        wait_until(lambda: self._message(request_id))
        seen = len(self.fake.texts_to(user))
        task = self._message(request_id).task_id  # type: ignore[union-attr]
        plain = fake_wecom.card_event_xml(
            user=user,
            task_id=task,
            event_key=self._key(request_id, action),
            response_code=self.fake.issue_code(task),
        )
        callback = self._signed(plain)
        return [
            Answer(self._post(gate_url, callback).status_code, self._private(user, seen))
            for _ in range(2)
        ]

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        for kind in ("send", "update"):
            self.fake.fail(kind, errcode=-1, status=503, errmsg="service unavailable", times=10**6)
        try:
            yield
        finally:
            self.fake.heal()

    def platform_calls(self) -> int:
        cards = [
            r
            for r in self.fake.recorded("/cgi-bin/message/")
            if not (isinstance(r.body, dict) and r.body.get("msgtype") == "text")
        ]
        return len(cards)
