"""The Feishu driver: JSON 2.0 cards on `FakeFeishu`, encrypted and signed callbacks, toasts."""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import httpx

from tests.channels.drivers.base import (
    ACTIONS,
    Answer,
    Card,
    Driver,
    Private,
    click_number,
    invisible,
    no_answer,
    objects,
    strings,
)
from tests.support import fake_feishu
from tests.support.http import TLS
from tests.support.servers import wait_until

#: `<` opening something a markup reader could take for a tag: <at ...>, </a>, <!...>
TAG_SHAPED = re.compile(r"<[A-Za-z/!?][^<]{0,20}")


class FeishuDriver(Driver):
    """Feishu through `FakeFeishu`: JSON 2.0 cards, encrypted and signed callbacks, toasts."""

    name = "feishu"
    args_chars = 2500
    VERIFICATION_TOKEN = "vt-contract-suite"
    ENCRYPT_KEY = "ek-contract-suite"
    CHAT = "oc_contract"
    URL = "/channels/feishu/events"

    def start(self) -> None:
        self.fake = fake_feishu.FakeFeishu().start()

    def stop(self) -> None:
        self.fake.stop()

    def settings(self) -> dict[str, Any]:
        return {
            "app_id": fake_feishu.APP_ID,
            "app_secret": fake_feishu.APP_SECRET,
            "verification_token": self.VERIFICATION_TOKEN,
            "encrypt_key": self.ENCRYPT_KEY,
            "default_target": self.CHAT,
            "base_url": self.fake.url,
        }

    def user_id(self, person: str) -> str:
        return "ou_" + person

    # -- cards --

    def _message(self, request_id: str) -> fake_feishu.Message | None:
        for message in self.fake.posted():
            if request_id in json.dumps(message.cards[0]):
                return message
        return None

    @staticmethod
    def _offers(card: dict[str, Any]) -> frozenset[str]:
        offers = set()
        for el in objects(card.get("body", {})):
            if el.get("tag") == "button":
                for behavior in el.get("behaviors", []):
                    verdict = behavior.get("value", {}).get("verdict")
                    if behavior.get("type") == "callback" and verdict in ACTIONS:
                        offers.add(verdict)
            elif el.get("tag") == "select_static" and el.get("name") == "grant":
                offers.add("grant")
        return frozenset(offers)

    def card(self, request_id: str) -> Card:
        message: fake_feishu.Message = wait_until(lambda: self._message(request_id))
        raw = message.card
        text = json.dumps(raw, ensure_ascii=False)
        return Card(text, len(message.cards) - 1, self._offers(raw), raw)

    def live_markup(self, card: Card, request_id: str, own_url: str) -> list[str]:
        # Markdown (and lark_md) render links, <at> mentions and tags; plain_text is plain,
        # but a tag-shaped `<x` in it is refused too (Feishu does not document that it never
        # reads one). A callback button for another request would be an injected control.
        live: list[str] = []
        for el in objects(card.raw):
            tag = el.get("tag")
            if tag == "lark_md":
                live.append(f"lark_md element: {str(el.get('content'))[:60]}")
            elif tag == "markdown":
                content = str(el.get("content", ""))
                closed_block = content.startswith("```") and content.count("```") == 2
                if not closed_block or "<" in content or ">" in content:
                    live.append(f"markdown: {content[:60]}")
            elif tag == "plain_text":
                content = str(el.get("content", ""))
                live += [m.group() for m in TAG_SHAPED.finditer(content)]
            for behavior in el.get("behaviors", []) if tag == "button" else []:
                value = behavior.get("value", {})
                if behavior.get("type") == "callback" and value.get("request_id") != request_id:
                    live.append(f"a button for another request: {value}")
                if behavior.get("type") == "open_url" and behavior.get("default_url") != own_url:
                    live.append(f"a link away from gate: {behavior.get('default_url')}")
        return live + invisible("".join(strings(card.raw)))

    # -- clicks --

    def _payload(
        self, request_id: str, person: str, verdict: str, form: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        action: dict[str, Any] = {
            "value": {"request_id": request_id, "verdict": verdict},
            "tag": "button",
            "timezone": "Asia/Shanghai",
            "name": verdict,
        }
        if form is not None:
            action["form_value"] = form
        return fake_feishu.card_action_payload(
            action=action,
            open_id=self.user_id(person),
            verification_token=self.VERIFICATION_TOKEN,
            event_id=f"contract-{click_number()}-{uuid.uuid4().hex[:8]}",
            chat_id=self.CHAT,
        )

    def _send(self, gate_url: str, callback: fake_feishu.Callback) -> httpx.Response:
        with httpx.Client(base_url=gate_url, timeout=10, verify=TLS) as client:
            return client.post(self.URL, content=callback.body, headers=callback.headers)

    def _deliver(self, gate_url: str, payload: dict[str, Any]) -> tuple[Answer, dict[str, Any]]:
        r = self._send(gate_url, fake_feishu.build_callback(payload, encrypt_key=self.ENCRYPT_KEY))
        body: dict[str, Any] = (
            r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        )
        toast = body.get("toast")
        user = payload["event"]["operator"]["open_id"]
        if not isinstance(toast, dict):
            return Answer(r.status_code, no_answer(f"HTTP {r.status_code} {r.text[:200]}")), body
        # A toast is part of the callback's answer: Feishu shows it to the clicker alone.
        text = str(toast.get("content"))
        return Answer(r.status_code, lambda: Private(text, user)), body

    def _options(self, request_id: str) -> dict[str, str]:
        """Preset reject reasons on the posted card: label -> option value."""
        card = self.card(request_id).raw
        return {
            o["text"]["content"]: o["value"]
            for el in objects(card)
            if el.get("tag") == "multi_select_static"
            for o in el.get("options", [])
        }

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
        if action in ("extend", "acknowledge"):
            return self._deliver(gate_url, self._payload(request_id, person, action))[0]
        if action == "edit":
            return self._edit(gate_url, request_id, person, reason, edits or {})
        form: dict[str, Any] = {"reason": reason or ""}
        if action == "reject" and reasons:
            offered = self._options(request_id)
            form["reasons"] = [offered.get(label, label) for label in reasons]
        if grant is not None:
            form["grant"] = f"{grant[0]}:{grant[1]}"
        return self._deliver(gate_url, self._payload(request_id, person, action, form))[0]

    def _edit(
        self, gate_url: str, request_id: str, person: str, note: str | None, edits: dict[str, str]
    ) -> Answer:
        """Press "Edit & approve" (the answer is the card with the edit form), then submit it
        with the boxes changed by label (the argument's name), others at their defaults."""
        answer, body = self._deliver(gate_url, self._payload(request_id, person, "edit"))
        card = body.get("card", {}).get("data", {})
        boxes = [
            el
            for el in objects(card)
            if el.get("tag") == "input" and "label" in el and "default_value" in el
        ]
        if not boxes:
            return answer  # refused: the toast says why
        form: dict[str, Any] = {"reason": note or ""}
        for box in boxes:
            form[box["name"]] = edits.get(box["label"]["content"], box["default_value"])
        payload = self._payload(request_id, person, "approve_edits", form)
        return self._deliver(gate_url, payload)[0]

    def forgeries(self, gate_url: str, request_id: str, person: str) -> dict[str, httpx.Response]:
        payload = self._payload(request_id, person, "approve", {"reason": ""})
        key = self.ENCRYPT_KEY
        build = fake_feishu.build_callback
        garbage = b"\xff{not json" * 10
        return {
            "wrong secret": self._send(
                gate_url, build(payload, encrypt_key=key, signing_secret="not-the-key")
            ),
            "garbage under a wrong secret": self._send(
                gate_url,
                build(garbage, encrypt_key=key, encrypted=False, signing_secret="not-the-key"),
            ),
            # unsigned and in clear: what someone without the Encrypt Key can send
            "unsigned": self._send(
                gate_url, build(payload, encrypt_key=key, encrypted=False, signed=False)
            ),
            "stale": self._send(
                gate_url, build(payload, encrypt_key=key, timestamp=int(time.time()) - 600)
            ),
        }

    def replay(self, gate_url: str, request_id: str, person: str, action: str) -> list[Answer]:
        payload = self._payload(request_id, person, action, {"reason": ""})
        callback = fake_feishu.build_callback(payload, encrypt_key=self.ENCRYPT_KEY)
        user = self.user_id(person)
        answers = []
        for _ in range(2):
            r = self._send(gate_url, callback)
            text = str(r.json().get("toast", {}).get("content"))
            answers.append(Answer(r.status_code, lambda text=text: Private(text, user)))
        return answers

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        for kind in ("create", "update"):
            # code 1 is no code Feishu documents: only the 5xx says "try again later"
            self.fake.fail(kind, code=1, status=503, msg="service unavailable", times=10**6)
        try:
            yield
        finally:
            with self.fake.lock:
                self.fake.failures.clear()

    def platform_calls(self) -> int:
        return len(self.fake.recorded(path_prefix="/open-apis/im/v1/messages"))
