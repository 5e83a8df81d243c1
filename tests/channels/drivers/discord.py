"""The Discord driver: embed cards on `FakeDiscord`, Ed25519-signed interactions, ephemeral
answers."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import time
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.channels.drivers.base import (
    Answer,
    Card,
    Driver,
    Private,
    invisible,
    no_answer,
    objects,
    strings,
)
from tests.support import fake_discord
from tests.support.servers import wait_until

#: Discord's own timestamp markup, which gate builds from a number
_TIMESTAMP = re.compile(r"<t:\d+(:[tTdDfFR])?>")
#: what Discord's markdown would act on outside code: mentions, channels, roles, emoji and
#: <url> (`<...>`), @everyone / @here, masked links, auto-linked URLs
_LIVE = re.compile(r"<[@#:a/]|<https?:|@everyone|@here|\]\(|https?://")


def _outside_code(text: str) -> str | None:
    """The text Discord's markdown reads, left to right as Discord does: without code blocks,
    inline code and backslash-escaped characters (all shown as typed). None when a code span
    is left open (what follows it would be read as markdown)."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("```", i):
            end = text.find("```", i + 3)
            if end < 0:
                return None
            i = end + 3
        elif text[i] == "\\" and i + 1 < len(text):
            i += 2
        elif text[i] == "`":
            end = text.find("`", i + 1)
            if end < 0:
                return None
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


class DiscordDriver(Driver):
    """Discord through `FakeDiscord`: embed cards, signed interactions, ephemeral answers."""

    name = "discord"
    args_chars = 3000
    OFFERS: ClassVar[dict[str, str]] = {
        "approve": "approve",
        "reject": "reject",
        "reasons": "reject",
        "edit": "edit",
        "extend": "extend",
        "grant": "grant",
        "acknowledge": "acknowledge",
    }

    def start(self) -> None:
        self.fake = fake_discord.FakeDiscord().start()

    def stop(self) -> None:
        self.fake.stop()

    def settings(self) -> dict[str, Any]:
        return {
            "bot_token": fake_discord.TOKEN,
            "public_key": self.fake.public_key,
            "default_target": fake_discord.CHANNEL,
            "api_url": self.fake.api_url,
        }

    def user_id(self, person: str) -> str:
        # a snowflake of its own for every name, the same each time
        return str(10**17 + int(hashlib.sha256(person.encode()).hexdigest()[:12], 16))

    # -- cards --

    def _message(self, request_id: str) -> fake_discord.Message | None:
        for message in self.fake.posted():
            if request_id in json.dumps(message.body):
                return message
        return None

    def message(self, request_id: str) -> fake_discord.Message:
        found: fake_discord.Message = wait_until(lambda: self._message(request_id))
        return found

    def card(self, request_id: str) -> Card:
        message = self.message(request_id)
        offers = set()
        for component in objects(message.body.get("components", [])):
            parts = str(component.get("custom_id", "")).split(":")
            if len(parts) > 2 and parts[0] == "gate" and parts[1] in self.OFFERS:
                offers.add(self.OFFERS[parts[1]])
        text = json.dumps(message.body, ensure_ascii=False)
        return Card(text, message.updates, frozenset(offers), message.body)

    def live_markup(self, card: Card, request_id: str, own_url: str) -> list[str]:
        raw = card.raw
        texts = [str(raw.get("content", ""))]
        for embed in raw.get("embeds", []):
            texts += [str(embed.get(k, "")) for k in ("title", "description")]
            texts.append(str(embed.get("footer", {}).get("text", "")))
            for f in embed.get("fields", []):
                texts += [str(f.get("name", "")), str(f.get("value", ""))]
        live: list[str] = []
        for text in texts:
            outside = _outside_code(text)
            if outside is None:
                live.append(f"code left open: {text[:40]!r}")
                continue
            outside = _TIMESTAMP.sub("", outside)
            live += [outside[m.start() : m.start() + 30] for m in _LIVE.finditer(outside)]
        if raw.get("allowed_mentions") != {"parse": []}:
            live.append(f"allowed_mentions {raw.get('allowed_mentions')!r}")
        for component in objects(raw.get("components", [])):
            custom_id = str(component.get("custom_id", ""))
            if custom_id and custom_id.split(":")[2:3] != [request_id]:
                live.append(f"a control for another request: {custom_id}")
            if "url" in component and component["url"] != own_url:
                live.append(f"a link away from gate: {component['url']}")
        for embed in raw.get("embeds", []):
            if embed.get("url", own_url) != own_url:
                live.append(f"an embed link away from gate: {embed.get('url')}")
        return live + invisible("".join(strings(raw)))

    # -- clicks --

    def _control(self, message: fake_discord.Message, verb: str, request_id: str) -> dict[str, Any]:
        """The card's control for `verb`, or (not on the card) one crafted with its custom_id."""
        for component in objects(message.body.get("components", [])):
            if str(component.get("custom_id", "")).startswith(f"gate:{verb}:"):
                return component
        suffix = ":0" if verb == "extend" else ""
        return {"custom_id": f"gate:{verb}:{request_id}{suffix}", "options": []}

    def _answer(self, delivered: fake_discord.Delivered, user: str) -> Answer:
        assert delivered.problems == [], delivered.problems
        text = delivered.private
        if text is None:
            what = f"answer {delivered.answer!r}"[:200]
            return Answer(delivered.status, no_answer(what))
        return Answer(delivered.status, lambda: Private(text, user))

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
        user = self.user_id(person)
        message = self.message(request_id)
        verb, values = (
            action if action in ("edit", "extend", "reject", "acknowledge") else "approve",
            None,
        )
        if action == "approve" and grant is not None:
            verb, values = "grant", [f"{grant[0]}:{grant[1]}"]
        elif action == "reject" and reasons:
            control = self._control(message, "reasons", request_id)
            by_label = {o["label"]: o["value"] for o in control.get("options", [])}
            verb, values = "reasons", [by_label.get(r, r) for r in reasons]
        control = self._control(message, verb, request_id)
        payload = self.fake.component(message, control["custom_id"], user, values)
        first = self.fake.deliver(gate_url, payload)
        if first.kind != 9:
            return self._answer(first, user)
        modal = first.answer["data"]
        texts = {"reason": reason or "", "note": reason or ""}
        for row in modal["components"]:
            text_input = row["components"][0]
            if "value" in text_input and text_input["label"] in (edits or {}):
                texts[text_input["custom_id"]] = (edits or {})[text_input["label"]]
        submitted = self.fake.modal_submit(message, modal, texts, user)
        return self._answer(self.fake.deliver(gate_url, submitted), user)

    def forgeries(self, gate_url: str, request_id: str, person: str) -> dict[str, httpx.Response]:
        message = self.message(request_id)
        custom_id = self._control(message, "approve", request_id)["custom_id"]
        body = json.dumps(self.fake.component(message, custom_id, self.user_id(person))).encode()
        other = Ed25519PrivateKey.generate()
        garbage = b"\xff{not json" * 10
        sign, post = self.fake.sign, self.fake.post_raw
        return {
            "wrong secret": post(gate_url, body, sign(body, key=other)),
            "garbage under a wrong secret": post(gate_url, garbage, sign(garbage, key=other)),
            "unsigned": post(gate_url, body, {"Content-Type": "application/json"}),
            "stale": post(gate_url, body, sign(body, timestamp=int(time.time()) - 600)),
        }

    def replay(self, gate_url: str, request_id: str, person: str, action: str) -> list[Answer]:
        message = self.message(request_id)
        user = self.user_id(person)
        control = self._control(message, action, request_id)
        payload = self.fake.component(message, control["custom_id"], user)
        body = json.dumps(payload).encode()
        return [self._answer(self.fake.deliver(gate_url, payload, body=body), user) for _ in "12"]

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        with self.fake.down(500):
            yield

    def platform_calls(self) -> int:
        return len(self.fake.calls_to("POST")) + len(self.fake.calls_to("PATCH"))
