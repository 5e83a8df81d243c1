"""The Slack driver: Block Kit cards on `FakeSlack`, signed interactions, ephemeral answers."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar
from urllib.parse import quote

import httpx

from tests.channels.drivers.base import (
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
from tests.support import fake_slack
from tests.support.http import TLS
from tests.support.servers import wait_until


class SlackDriver(Driver):
    """Slack through `FakeSlack`: Block Kit cards, signed interactions, ephemeral answers."""

    name = "slack"
    args_chars = 3000
    SECRET = "contract-suite-slack-signing-secret"
    URL = "/channels/slack/interactions"
    BUTTONS: ClassVar[dict[str, str]] = {
        "gate_approve": "approve",
        "gate_reject": "reject",
        "gate_edit": "edit",
        "gate_extend": "extend",
        "gate_grant": "grant",
        "gate_acknowledge": "acknowledge",
    }

    def start(self) -> None:
        self.fake = fake_slack.FakeSlack().start()

    def stop(self) -> None:
        self.fake.stop()

    def settings(self) -> dict[str, Any]:
        return {
            "bot_token": fake_slack.TOKEN,
            "signing_secret": self.SECRET,
            "default_target": fake_slack.CHANNEL,
            "api_url": self.fake.api_url,
        }

    def user_id(self, person: str) -> str:
        return "U0" + person.upper()

    # -- cards --

    def _message(self, request_id: str) -> fake_slack.Message | None:
        for message in self.fake.posted():
            if request_id in json.dumps(message.blocks):
                return message
        return None

    def card(self, request_id: str) -> Card:
        message: fake_slack.Message = wait_until(lambda: self._message(request_id))
        raw = {"text": message.text, "blocks": message.blocks}
        offers = {
            self.BUTTONS[el["action_id"]]
            for block in message.blocks
            if block.get("type") == "actions"
            for el in block.get("elements", [])
            if el.get("action_id") in self.BUTTONS
        }
        return Card(json.dumps(raw, ensure_ascii=False), message.updates, frozenset(offers), raw)

    def live_markup(self, card: Card, request_id: str, own_url: str) -> list[str]:
        # Slack acts on <...> in mrkdwn (mentions, @channel, links) and in the fallback text;
        # plain_text is shown as typed. gate's own link and its deadline's date token are
        # the only <...> allowed.
        texts = [card.raw["text"]] + [
            str(o.get("text", "")) for o in objects(card.raw["blocks"]) if o.get("type") == "mrkdwn"
        ]
        own = re.compile(re.escape(f"<{own_url}") + r"(\|[^<>]*)?>|<!date\^\d+\^[^<>|]*\|[^<>]*>")
        live: list[str] = []
        for text in texts:
            live += re.findall(r"[<>][^<>]{0,30}", own.sub("", text))
        return live + invisible("".join(strings(card.raw)))

    # -- clicks --

    def send_link(self, gate_url: str, person: str, code: str) -> Answer | None:
        """`/gate link <code>` typed in Slack: a signed slash command; the answer is ephemeral
        (in the command's response, for the typer alone)."""
        fields = {"command": "/gate", "text": f"link {code}", "user_id": self.user_id(person)}
        body = "&".join(f"{k}={quote(v)}" for k, v in fields.items()).encode()
        with httpx.Client(base_url=gate_url, timeout=15, verify=TLS) as client:
            r = client.post("/channels/slack/commands", content=body, headers=self._signed(body))
        said = r.json() if r.status_code == 200 else {}
        assert said.get("response_type", "ephemeral") == "ephemeral", said
        who = self.user_id(person)
        return Answer(r.status_code, lambda: Private(str(said.get("text", "")), who))

    def _signed(
        self, body: bytes, secret: str | None = None, at: float | None = None
    ) -> dict[str, str]:
        ts = str(int(time.time() if at is None else at))
        base = b"v0:" + ts.encode() + b":" + body
        digest = hmac.new((secret or self.SECRET).encode(), base, hashlib.sha256).hexdigest()
        return {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": ts,
            "X-Slack-Signature": f"v0={digest}",
        }

    @staticmethod
    def _form(payload: dict[str, Any]) -> bytes:
        return ("payload=" + quote(json.dumps(payload, separators=(",", ":")))).encode()

    def _post(self, gate_url: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
        with httpx.Client(base_url=gate_url, timeout=10, verify=TLS) as client:
            return client.post(self.URL, content=body, headers=headers)

    def _block_actions(
        self, request_id: str, person: str, action: str, grant: tuple[str, str] | None
    ) -> dict[str, Any]:
        """A click on one of the card's controls, in the shape Slack posts (block_actions)."""
        n = click_number()
        user = self.user_id(person)
        # Each click comes from a channel of its own (the card shared there), so the private
        # answer gate sends to the click's channel is this click's and no earlier one's.
        channel = f"C0CLICK{n}"
        self.fake.channels.add(channel)
        if grant is not None and action == "approve":
            element: dict[str, Any] = {
                "type": "static_select",
                "action_id": "gate_grant",
                "selected_option": {
                    "text": {"type": "plain_text", "text": "Approve + allow"},
                    "value": f"{request_id}|{grant[0]}:{grant[1]}",
                },
            }
        else:
            action_id = {v: k for k, v in self.BUTTONS.items()}[action]
            element = {"type": "button", "action_id": action_id, "value": request_id}
        element.update({"block_id": f"decide-{n}", "action_ts": f"{time.time():.6f}"})
        return {
            "type": "block_actions",
            "user": {"id": user, "username": person, "name": person, "team_id": "T0CONTRACT"},
            "api_app_id": "A0CONTRACT",
            "token": "deprecated-verification-token",
            "container": {
                "type": "message",
                "message_ts": "1700000000.000100",
                "channel_id": channel,
                "is_ephemeral": False,
            },
            "trigger_id": f"{n}.{int(time.time())}.contract",
            "team": {"id": "T0CONTRACT", "domain": "contract"},
            "channel": {"id": channel, "name": "approvals"},
            "response_url": "https://hooks.slack.com/actions/T0/1/contract",
            "actions": [element],
        }

    def _ephemeral(self, payload: dict[str, Any], nth: int = 0) -> Callable[[], Private]:
        """Waits for the `nth` ephemeral message gate sends the clicker in the click's channel
        (a delivery sent twice is answered there twice)."""
        where = (payload["container"]["channel_id"], payload["user"]["id"])

        def wait() -> Private:
            def found() -> dict[str, Any] | None:
                sent = [
                    e for e in self.fake.ephemerals if (e.get("channel"), e.get("user")) == where
                ]
                return sent[nth] if len(sent) > nth else None

            ephemeral: dict[str, Any] = wait_until(found)
            return Private(str(ephemeral["text"]), str(ephemeral["user"]))

        return wait

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
        views = len(self.fake.views)
        payload = self._block_actions(request_id, person, action, grant)
        body = self._form(payload)
        r = self._post(gate_url, body, self._signed(body))
        told = self._ephemeral(payload)
        if action not in ("reject", "edit") or len(self.fake.views) == views:
            return Answer(r.status_code, told)  # refused before a modal opened, or no modal
        modal = self.fake.views[-1]
        values = self._modal_values(modal, reason or "", reasons, edits or {})
        submitted = {
            "type": "view_submission",
            "team": {"id": "T0CONTRACT", "domain": "contract"},
            "user": {"id": user, "username": person, "name": person, "team_id": "T0CONTRACT"},
            "api_app_id": "A0CONTRACT",
            "trigger_id": f"{click_number()}.{int(time.time())}.contract",
            "view": {**modal, "id": f"V{click_number():08d}", "state": {"values": values}},
            "response_urls": [],
        }
        body = self._form(submitted)
        r = self._post(gate_url, body, self._signed(body))
        if r.content:  # response_action errors: shown in the modal, which only the clicker has
            errors = r.json().get("errors", {})
            return Answer(r.status_code, lambda: Private("; ".join(errors.values()), user))
        return Answer(r.status_code, no_answer("the modal closed"))

    @staticmethod
    def _modal_values(
        modal: dict[str, Any], reason: str, reasons: Sequence[str], edits: dict[str, str]
    ) -> dict[str, Any]:
        """The modal's state as Slack submits it: edit boxes by label (the argument's name,
        others at their initial value), the free-text box, ticked preset reasons by label
        (an unknown label is sent as its own value, as a crafted submission could)."""
        values: dict[str, Any] = {}
        for block in modal.get("blocks", []):
            if block.get("type") != "input":
                continue
            element, label = block["element"], block["label"]["text"]
            if element["type"] == "plain_text_input":
                if "initial_value" in element:
                    text = edits.get(label, element["initial_value"])
                else:
                    text = reason
                state = {"type": "plain_text_input", "value": text}
            else:
                by_label = {o["text"]["text"]: o for o in element.get("options", [])}
                picked = [by_label.get(r, {"value": r}) for r in reasons]
                state = {"type": element["type"], "selected_options": picked}
            values[block["block_id"]] = {element["action_id"]: state}
        return values

    def forgeries(self, gate_url: str, request_id: str, person: str) -> dict[str, httpx.Response]:
        body = self._form(self._block_actions(request_id, person, "approve", None))
        garbage = b"\xff{not a form, not json" * 10
        unsigned = {"Content-Type": "application/x-www-form-urlencoded"}
        return {
            "wrong secret": self._post(gate_url, body, self._signed(body, "not-the-secret")),
            "garbage under a wrong secret": self._post(
                gate_url, garbage, self._signed(garbage, "not-the-secret")
            ),
            "unsigned": self._post(gate_url, body, unsigned),
            "stale": self._post(gate_url, body, self._signed(body, at=time.time() - 600)),
        }

    def replay(self, gate_url: str, request_id: str, person: str, action: str) -> list[Answer]:
        payload = self._block_actions(request_id, person, action, None)
        body = self._form(payload)
        headers = self._signed(body)
        answers = []
        for nth in range(2):
            r = self._post(gate_url, body, headers)
            answers.append(Answer(r.status_code, self._ephemeral(payload, nth)))
        return answers

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        with self.fake.down(500):
            yield

    def platform_calls(self) -> int:
        return len(self.fake.calls_to("chat.postMessage")) + len(self.fake.calls_to("chat.update"))
