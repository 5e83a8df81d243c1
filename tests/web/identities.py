"""Chat identity test helpers: a gate with Slack beside the console, Slack's `/gate link`
signed the way Slack signs it, and what the Identities page shows."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

import httpx

from tests.conftest import Gate
from tests.slack.conftest import SIGNING_SECRET, sign
from tests.support.fake_slack import CHANNEL, TOKEN, FakeSlack
from tests.support.http import TLS

COMMANDS = "/channels/slack/commands"


def with_slack(data: dict[str, Any], fake: FakeSlack) -> dict[str, Any]:
    """`data` with `[channels.slack]` pointed at the fake, and bob without a Slack key."""
    data["channels"]["slack"] = {
        "bot_token": TOKEN,
        "signing_secret": SIGNING_SECRET,
        "default_target": CHANNEL,
        "api_url": fake.api_url,
    }
    for approver in data["approvers"]:
        if approver["name"] == "bob":
            approver.pop("slack")
    return data


def slash(gate: Gate, user_id: str, text: str, *, secret: str = SIGNING_SECRET) -> httpx.Response:
    """Slack's POST of `/gate <text>` typed by `user_id`, signed with `secret`."""
    body = urlencode(
        {"command": "/gate", "text": text, "user_id": user_id, "team_id": "T0"}
    ).encode()
    headers = {"Content-Type": "application/x-www-form-urlencoded", **sign(body, secret=secret)}
    with httpx.Client(base_url=gate.url, timeout=10, verify=TLS) as client:
        return client.post(COMMANDS, content=body, headers=headers)


def code_on(page: str) -> str:
    """The one-time code the Identities page shows."""
    found = re.search(r'data-code="([A-Z0-9-]+)"', page)
    assert found is not None, page
    return found.group(1)


def rows(page: str) -> list[tuple[str, str]]:
    """(platform, bound_by) of each identity the page lists."""
    return re.findall(r'<tr data-platform="([^"]+)" data-bound-by="([^"]+)">', page)
