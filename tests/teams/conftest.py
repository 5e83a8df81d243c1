"""Fixtures for the Teams channel: the fake Teams and a gate that talks to it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import pytest

from channels.teams import TeamsChannel
from gate.config.settings import Settings
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support.chat_rules import CHAT_RULES
from tests.support.fake_teams import FakeTeams
from tests.support.servers import wait_until

URL = "/channels/teams/messages"


def object_id(person: str) -> str:
    """A person's Entra object id in these tests (stable, a GUID like the real ones)."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{person}.teams-tests.example"))


def teams_settings(
    db_url: str,
    fake: FakeTeams,
    *,
    extra_rules: Sequence[dict[str, Any]] = CHAT_RULES,
    **table: Any,
) -> Settings:
    """The standard settings, the chat rules, and only the Teams channel, pointed at the fake.

    Every approver gets an Entra object id and is a member of the fake's conversation.
    """
    data = cfg.settings_data(db_url)
    data["rules"] = [*extra_rules, *data["rules"]]
    for approver in data["approvers"]:
        approver["teams"] = object_id(approver["name"])
        fake.add_member(approver["teams"])
    data["channels"] = {"teams": fake.settings(**table)}
    return Settings(**data)


@pytest.fixture
def fake_teams() -> Iterator[FakeTeams]:
    """A running fake Teams (metadata, keys, token endpoint, Bot Connector)."""
    fake = FakeTeams().start()
    yield fake
    fake.stop()


@pytest.fixture
def teams_gate(make_gate: GateFactory, sqlite_url: str, fake_teams: FakeTeams) -> Gate:
    """A gate on SQLite whose only channel is Teams (the fake)."""
    return make_gate(settings=teams_settings(sqlite_url, fake_teams))


def channel(gate: Gate) -> TeamsChannel:
    """The live TeamsChannel inside a running gate."""
    found = gate.state.channels["teams"]
    assert isinstance(found, TeamsChannel)
    return found


def ask(gate: Gate, tool: str = "pay_vendor", args: Any = None, **extra: Any) -> str:
    """Submit a call that needs a human; the id of the request."""
    extra.setdefault("user_id", "dave")
    answer = gate.submit(
        tool_name=tool, tool_args=args or {"amount": 60000, "vendor": "acme"}, **extra
    )
    assert answer["decision"] == "ask", answer
    request_id: str = answer["request"]["id"]
    return request_id


def posted_card(fake: FakeTeams, request_id: str, updates: int = 0) -> dict[str, Any]:
    """The base card for a request once it has been replaced `updates` times."""

    def found() -> dict[str, Any] | None:
        for message in fake.posted():
            if request_id in json.dumps(message.cards[0]) and len(message.cards) > updates:
                return message.card
        return None

    card: dict[str, Any] = wait_until(found)
    return card


def send(
    gate: Gate,
    fake: FakeTeams,
    activity: dict[str, Any] | bytes,
    *,
    token: str | None = None,
    **claims: Any,
) -> httpx.Response:
    """POST an activity to gate with a connector token (the fake's own unless `token`)."""
    body = activity if isinstance(activity, bytes) else json.dumps(activity).encode()
    if token is None:
        service_url = activity["serviceUrl"] if isinstance(activity, dict) else fake.url + "/"
        token = fake.sign(service_url=service_url, **claims)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    with gate.client() as c:
        return c.post(URL, content=body, headers=headers)


def press(
    gate: Gate,
    fake: FakeTeams,
    person: str,
    verb: str,
    request_id: str,
    **inputs: Any,
) -> httpx.Response:
    """`person` presses the Action.Execute `verb` for a request, signed like the connector."""
    activity = fake.invoke(
        verb=verb,
        data={"request_id": request_id, **inputs},
        object_id=object_id(person),
        service_url=fake.url + "/",
    )
    return send(gate, fake, activity)


def notice(response: httpx.Response) -> str:
    """The line an invoke answer shows the presser (the card's notice, or a message)."""
    assert response.status_code == 200, response.text
    answer = response.json()
    if answer["type"] == "application/vnd.microsoft.activity.message":
        return str(answer["value"])
    texts = [
        "".join(run["text"] for run in el["inlines"])
        for el in walk(answer["value"])
        if el.get("id") == "notice_text"
    ]
    assert texts, answer
    return texts[0]


def walk(node: Any) -> list[dict[str, Any]]:
    """Every object in a card, depth first."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found += walk(value)
    elif isinstance(node, list):
        for value in node:
            found += walk(value)
    return found


def verbs(card: dict[str, Any]) -> set[str]:
    """The Action.Execute verbs a card offers."""
    return {el["verb"] for el in walk(card) if el.get("type") == "Action.Execute"}
