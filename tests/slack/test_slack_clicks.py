"""What reaches gate from Slack: one neutral `Click` per interaction, and nothing past the port.

The Slack adapter here talks to a recording port wrapped around a running gate's real
`ChannelGate` (so clicks go through the real decision pipeline): each test checks the exact
`Click` gate received, and that the adapter never read gate's settings, i.e. never worked
out for itself who may act or what a rule offers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from channels.slack import SlackChannel
from channels.slack.card import EDIT_ACTION, EXTEND_ACTION, GRANT_ACTION, REJECT_ACTION
from channels.slack.mrkdwn import ARGS_CHARS
from channels.slack.settings import SlackSettings
from gate.api.middleware import install_error_handlers
from gate.config.settings import Settings
from gate.decisions.acting import Result
from gate.decisions.clicks import Click
from gate.decisions.readmodel import RequestView
from gate.server.state import ChannelGate
from tests.conftest import Gate, GateFactory
from tests.slack.conftest import (
    INTERACTIONS,
    SIGNING_SECRET,
    block_actions,
    card_for,
    form,
    sign,
    slack_settings,
)
from tests.slack.test_slack_offers import _edit_values, _submission
from tests.support import config as cfg
from tests.support.chat_rules import CHAT_RULES
from tests.support.fake_slack import TOKEN, FakeSlack, Message
from tests.support.http import TLS
from tests.support.servers import ThreadServer, wait_until


class RecordingGate:
    """The channel port of a running gate, recording each click; settings are off limits."""

    def __init__(self, real: ChannelGate) -> None:
        self._real = real
        self.clicks: list[Click] = []
        self.settings_read = False

    @property
    def settings(self) -> Settings:
        self.settings_read = True
        raise AssertionError("the Slack adapter read gate's settings")

    async def act(self, click: Click) -> Result:
        self.clicks.append(click)
        return await self._real.act(click)

    async def view(self, request_id: str) -> RequestView | None:
        return await self._real.view(request_id)


@dataclass
class Adapter:
    """A Slack adapter on its own server, in front of a real gate, recording what reaches it."""

    gate: Gate
    port: RecordingGate
    url: str
    fake: FakeSlack

    def send(self, payload: dict[str, Any], **headers: str) -> httpx.Response:
        """POST a signed interaction to the adapter."""
        body = form(payload)
        sent = {"Content-Type": "application/x-www-form-urlencoded", **sign(body), **headers}
        return httpx.post(
            self.url + INTERACTIONS, content=body, headers=sent, timeout=10, verify=TLS
        )

    def submit(self, tool: str, args: dict[str, Any], **extra: Any) -> tuple[str, Message]:
        """Ask gate; return the request id and the card the gate posted to the fake."""
        answer = self.gate.submit(tool_name=tool, tool_args=args, user_id="dave", **extra)
        assert answer["decision"] == "ask", answer
        request_id: str = answer["request"]["id"]
        return request_id, card_for(self.fake, request_id)

    def status(self, request_id: str) -> dict[str, Any]:
        with self.gate.client(cfg.ADMIN) as c:
            data: dict[str, Any] = c.get(f"/v1/requests/{request_id}").json()
        return data

    def open_modal(self, request_id: str, card: Message, user: str, action: str) -> dict[str, Any]:
        """Click a button that opens a modal; the modal Slack was asked to show."""
        before = len(self.fake.views)
        trigger = f"trigger-{action}-{user}"
        payload = block_actions(request_id, user, action, message=card, trigger_id=trigger)
        assert self.send(payload).status_code == 200
        wait_until(lambda: len(self.fake.views) > before)
        modal: dict[str, Any] = self.fake.views[-1]
        return modal


@pytest.fixture
def adapter(make_gate: GateFactory, sqlite_url: str, fake_slack: FakeSlack) -> Iterator[Adapter]:
    gate = make_gate(settings=slack_settings(sqlite_url, fake_slack, extra_rules=CHAT_RULES))
    port = RecordingGate(ChannelGate(gate.state.service))
    settings = SlackSettings.model_validate(
        {"bot_token": TOKEN, "signing_secret": SIGNING_SECRET, "api_url": fake_slack.api_url}
    )
    channel = SlackChannel(settings, port)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await channel.aclose()

    app = FastAPI(lifespan=lifespan)
    install_error_handlers(app)
    app.include_router(channel.router())
    server = ThreadServer(app).start()
    yield Adapter(gate, port, server.url, fake_slack)
    server.stop()
    assert not port.settings_read


def test_an_approve_click_is_a_click_with_nothing_else(adapter: Adapter) -> None:
    request_id, card = adapter.submit("pay_vendor", {"amount": 60000})
    assert adapter.send(block_actions(request_id, "U0ALICE", message=card)).status_code == 200
    assert adapter.port.clicks == [
        Click("slack", "U0ALICE", request_id, "approve", args_chars=ARGS_CHARS)
    ]
    assert adapter.status(request_id)["decided_by"] == "alice"


def test_a_grant_pick_reaches_gate_as_scope_and_duration(adapter: Adapter) -> None:
    request_id, card = adapter.submit("shell_run", {"cmd": "ls"}, session_id="s-1")
    select = next(
        e
        for b in card.blocks
        if b["type"] == "actions"
        for e in b["elements"]
        if e["action_id"] == GRANT_ACTION
    )
    option = next(o for o in select["options"] if o["value"].endswith("|session:1800s"))
    payload = block_actions(request_id, "U0ALICE", GRANT_ACTION, message=card)
    payload["actions"][0].pop("value")
    payload["actions"][0].update(type="static_select", selected_option=option)
    assert adapter.send(payload).status_code == 200
    [click] = adapter.port.clicks
    assert (click.action, click.grant) == ("approve", ("session", "1800s"))
    assert adapter.status(request_id)["status"] == "approved"


def test_edits_reach_gate_by_argument_name_only_when_changed(adapter: Adapter) -> None:
    args = {"amount": 900, "currency": "EUR", "customer": "c-1"}
    request_id, card = adapter.submit("refund_order", args)
    modal = adapter.open_modal(request_id, card, "U0BOB", EDIT_ACTION)
    # the check before the modal opens is a click too: gate says whether bob may act
    assert adapter.port.clicks == [
        Click("slack", "U0BOB", request_id, "check", args_chars=ARGS_CHARS)
    ]
    values = _edit_values(modal, amount="500")  # currency left as it was
    values["comment"] = {"comment_input": {"type": "plain_text_input", "value": "half now"}}
    assert adapter.send(_submission(modal, "U0BOB", values)).status_code == 200
    click = adapter.port.clicks[-1]
    assert click == Click(
        "slack",
        "U0BOB",
        request_id,
        "approve",
        comment="half now",
        edits={"amount": 500},
        args_chars=ARGS_CHARS,
    )
    after = adapter.status(request_id)
    assert after["status"] == "approved"
    assert after["approved_args"] == {"amount": 500, "currency": "EUR", "customer": "c-1"}


def test_preset_reasons_reach_gate_as_their_text(adapter: Adapter) -> None:
    request_id, card = adapter.submit("refund_order", {"amount": 900, "customer": "c-1"})
    modal = adapter.open_modal(request_id, card, "U0BOB", REJECT_ACTION)
    options = modal["blocks"][0]["element"]["options"]
    value = next(o["value"] for o in options if o["text"]["text"] == "too expensive")
    values = {
        "reasons": {"reasons_input": {"selected_options": [{"value": value}]}},
        "reason": {"reason_input": {"type": "plain_text_input", "value": "see ticket 42"}},
    }
    assert adapter.send(_submission(modal, "U0BOB", values)).status_code == 200
    click = adapter.port.clicks[-1]
    assert (click.action, click.reasons, click.comment) == (
        "reject",
        ("too expensive",),
        "see ticket 42",
    )
    assert adapter.status(request_id)["status"] == "rejected"


def test_extend_reaches_gate_with_its_duration(adapter: Adapter) -> None:
    request_id, card = adapter.submit("pay_vendor", {"amount": 60000})
    payload = block_actions(request_id, "U0BOB", EXTEND_ACTION, message=card)
    assert adapter.send(payload).status_code == 200
    assert adapter.port.clicks == [
        Click("slack", "U0BOB", request_id, "extend", extend_by="15m", args_chars=ARGS_CHARS)
    ]


def test_a_forged_or_malformed_click_never_reaches_gate(adapter: Adapter) -> None:
    request_id, card = adapter.submit("pay_vendor", {"amount": 60000})
    body = form(block_actions(request_id, "U0ALICE", message=card))
    forged = sign(body, secret="not-the-signing-secret")
    r = httpx.post(adapter.url + INTERACTIONS, content=body, headers=forged, timeout=10, verify=TLS)
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_signature"
    # unsigned garbage is refused for its signature, before anything parses it
    r = httpx.post(adapter.url + INTERACTIONS, content=b"payload=%5B", timeout=10, verify=TLS)
    assert r.status_code == 401
    # signed but not an interaction: a precise 400
    r = adapter.send({"type": "block_actions", "user": {"id": "U0ALICE"}, "actions": []})
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_slack_payload"
    assert adapter.port.clicks == []
    assert adapter.status(request_id)["status"] == "pending"


def test_a_second_submission_without_a_retry_says_who_decided(adapter: Adapter) -> None:
    # A retried delivery closes the modal (test_slack_flow); a fresh one is answered from
    # what gate returns, with no lookup of who the clicker is.
    request_id, card = adapter.submit("pay_vendor", {"amount": 60000})
    modal = adapter.open_modal(request_id, card, "U0BOB", REJECT_ACTION)
    values = {"reason": {"reason_input": {"type": "plain_text_input", "value": "no"}}}
    submission = _submission(modal, "U0BOB", values)
    assert adapter.send(submission).content == b""
    again = adapter.send(submission)
    assert again.json()["errors"]["reason"].startswith("Already rejected by bob at ")
    retried = adapter.send(submission, **{"X-Slack-Retry-Num": "1"})
    assert retried.status_code == 200 and retried.content == b""
    votes = adapter.status(request_id)["votes"]
    assert [(v["approver"], v["verdict"]) for v in votes] == [("bob", "reject")]
