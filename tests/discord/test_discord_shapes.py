"""The fake is not blind: what it refuses, and the documented payloads the channel reads."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest

from channels.discord.interaction import parse_interaction
from tests.discord.conftest import fixture
from tests.support.discord_shapes import message_problems, modal_problems
from tests.support.fake_discord import CHANNEL, FakeDiscord
from tests.support.http import TLS

RID = "01JREQ0000000000000000000A"
BUTTON = {"type": 2, "style": 1, "label": "Go", "custom_id": "a"}
SIX_BUTTONS = [{**BUTTON, "custom_id": str(i)} for i in range(6)]
GOOD: dict[str, Any] = {
    "content": "x",
    "embeds": [{"title": "t", "description": "d", "fields": [{"name": "n", "value": "v"}]}],
    "components": [{"type": 1, "components": [BUTTON]}],
    "allowed_mentions": {"parse": []},
}


def _with(path: str, value: Any) -> dict[str, Any]:
    body = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node: Any = body
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[int(last) if last.isdigit() else last] = value
    return body


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (_with("allowed_mentions", {"parse": ["everyone"]}), "allowed_mentions"),
        ({k: v for k, v in GOOD.items() if k != "allowed_mentions"}, "allowed_mentions"),
        (_with("content", "x" * 2001), "content"),
        (_with("embeds.0.description", "x" * 4097), "description"),
        (_with("embeds.0.fields.0.value", "x" * 1025), "value"),
        (_with("embeds.0.fields.0.value", ""), "value"),
        (_with("embeds.0.fields", [{"name": "n", "value": "x" * 1000}] * 7), "6000"),
        (_with("components", [{"type": 1, "components": [BUTTON]}] * 6), "5 action rows"),
        (_with("components.0.components", SIX_BUTTONS), "5 buttons"),
        (_with("components.0.components.0.custom_id", "x" * 101), "custom_id"),
        (_with("components.0.components", [BUTTON, BUTTON]), "unique"),
        (_with("components.0.components.0.label", "x" * 81), "label"),
        (_with("components.0.components.0", {**BUTTON, "style": 5}), "link button"),
        (_with("flags", 64), "flags"),
    ],
)  # fmt: skip
def test_the_message_check_refuses_what_discord_refuses(body: dict[str, Any], problem: str) -> None:
    assert message_problems(GOOD) == []
    found = " | ".join(message_problems(body))
    assert problem in found, found


def test_the_modal_check_refuses_what_discord_refuses() -> None:
    good = fixture("modal_docs.json")
    assert modal_problems(good) == []
    row = good["components"][0]
    assert "1..5" in " ".join(modal_problems({**good, "components": [row] * 6}))
    assert "title" in " ".join(modal_problems({**good, "title": "x" * 46}))
    long_label = copy.deepcopy(row)
    long_label["components"][0]["label"] = "x" * 46
    assert "label" in " ".join(modal_problems({**good, "components": [long_label]}))


def test_the_api_refuses_a_wrong_token_and_a_missing_user_agent(fake_discord: FakeDiscord) -> None:
    url = f"{fake_discord.api_url}/channels/{CHANNEL}/messages"
    agent = {"User-Agent": "DiscordBot (https://example.org, 1)"}
    r = httpx.post(url, json=GOOD, headers={"Authorization": "Bot wrong", **agent}, verify=TLS)
    assert (r.status_code, r.json()["code"]) == (401, 0)
    r = httpx.post(
        url, json=GOOD, headers={"Authorization": f"Bot {fake_discord.token}"}, verify=TLS
    )
    assert r.status_code == 400
    r = httpx.post(
        url,
        json=GOOD,
        headers={"Authorization": f"Bearer {fake_discord.token}", **agent},
        verify=TLS,
    )
    assert r.status_code == 401
    assert fake_discord.posted() == []


def test_the_documented_select_and_modal_payloads_read_as_gates() -> None:
    select = fixture("interaction_string_select_docs.json")
    select["data"]["custom_id"] = f"gate:reasons:{RID}"
    read = parse_interaction(select)
    assert (read.kind, read.user_id, read.values) == (
        "component",
        "53908232506183680",
        ("mage", "rogue"),
    )
    assert read.message_id == "847587334500646933" and not read.on_its_card
    modal = fixture("interaction_modal_submit_docs.json")
    modal["data"]["custom_id"] = f"gate:rejectm:{RID}:0"
    read = parse_interaction(modal)
    assert (read.kind, read.request_id, read.inputs) == ("modal", RID, {"name": "John"})
    assert read.message_id is None  # a modal opened by a command has no message
    for name in ("interaction_button_docs.json", "interaction_string_select_docs.json"):
        with pytest.raises(ValueError, match="not one of gate's controls"):
            parse_interaction(fixture(name))  # the docs' own custom_ids are not gate's
