"""Cards go out as the bot through the REST API; every failure maps onto the outbox's rules."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gate.decisions.readmodel import RequestView
from gate.delivery.channel import DeliveryError
from tests.conftest import Gate
from tests.discord.conftest import ask, card_for, fixture, standalone, status
from tests.support.fake_discord import CHANNEL, TOKEN, FakeDiscord
from tests.support.servers import wait_until


def a_view(gate: Gate) -> RequestView:
    view = gate.state.service.view(ask(gate))
    assert view is not None
    return view


def test_cards_are_posted_and_edited_as_the_bot(
    discord_gate: Gate, fake_discord: FakeDiscord
) -> None:
    request_id = ask(discord_gate)
    message = card_for(fake_discord, request_id)
    assert discord_gate.decide(request_id, "tok-approver-bob", "reject", "no").status_code == 200
    wait_until(lambda: message.updates >= 1)
    calls = fake_discord.calls_to("POST") + fake_discord.calls_to("PATCH")
    assert {c.path for c in calls} >= {
        f"/api/v10/channels/{CHANNEL}/messages",
        f"/api/v10/channels/{CHANNEL}/messages/{message.id}",
    }
    for call in calls:
        assert call.headers["authorization"] == f"Bot {TOKEN}"
        assert call.headers["user-agent"].startswith("DiscordBot (")
        assert call.body["allowed_mentions"] == {"parse": []}
    assert fake_discord.problems == []

    def all_sent() -> bool:
        # the fake has the card a moment before gate records the delivery as sent
        view = discord_gate.state.service.view(request_id, full=True)
        assert view is not None
        return {d.status for d in view.deliveries} == {"sent"}

    wait_until(all_sent)


def _failure(gate: Gate, fake: FakeDiscord, kind: str, **failure: Any) -> DeliveryError:
    """The error a second channel gets for one call that fails as `failure` says (set once
    gate's own outbox has posted its card, so the outbox does not take the failure)."""
    view = a_view(gate)
    ref = f"{CHANNEL}:{card_for(fake, view.id).id}"
    fake.fail(kind, **failure)

    async def run() -> DeliveryError:
        channel = standalone(gate)
        try:
            with pytest.raises(DeliveryError) as caught:
                if kind == "create":
                    await channel.post(view, CHANNEL)
                else:
                    await channel.update(view, CHANNEL, ref)
            return caught.value
        finally:
            await channel.aclose()

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("status_code", "code", "permanent"),
    [(500, 0, False), (502, 0, False), (401, 0, True), (403, 50001, True), (403, 50013, True),
     (404, 10003, True), (404, 10008, True), (400, 50035, True)],
)  # fmt: skip
def test_error_mapping(
    discord_gate_sqlite: Gate,
    fake_discord: FakeDiscord,
    status_code: int,
    code: int,
    permanent: bool,
) -> None:
    kind = "edit" if code == 10008 else "create"
    error = _failure(discord_gate_sqlite, fake_discord, kind, status=status_code, code=code)
    assert (error.permanent, error.retry_after) == (permanent, None)
    assert f"HTTP {status_code}" in str(error)


def test_a_rate_limit_carries_discords_retry_after(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    documented = fixture("rate_limit_429_docs.json")["body"]
    retry_after = documented["retry_after"]
    error = _failure(discord_gate_sqlite, fake_discord, "edit", status=429, retry_after=retry_after)
    # the body's precise 64.57, not the header's rounded 65
    assert (error.permanent, error.retry_after) == (False, 64.57)


def test_an_unreachable_api_and_a_bad_target_are_told_apart(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    view = a_view(discord_gate_sqlite)

    async def run(target: str) -> DeliveryError:
        channel = standalone(discord_gate_sqlite)
        try:
            with pytest.raises(DeliveryError) as caught:
                await channel.post(view, target)
            return caught.value
        finally:
            await channel.aclose()

    assert asyncio.run(run("#approvals")).permanent  # not a channel id: asking again cannot help
    card_for(fake_discord, view.id)
    fake_discord.stop()
    error = asyncio.run(run(CHANNEL))
    assert not error.permanent and "unreachable" in str(error)


def test_a_rate_limited_post_is_retried_by_the_outbox(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    fake_discord.fail("create", status=429, retry_after=0.2, times=2)
    request_id = ask(discord_gate_sqlite)
    card_for(fake_discord, request_id)
    posts = [c for c in fake_discord.calls_to("POST") if request_id in json.dumps(c.body)]
    assert [c.status for c in posts] == [429, 429, 200]

    def sent() -> object:
        view = discord_gate_sqlite.state.service.view(request_id, full=True)
        assert view is not None
        post = next(d for d in view.deliveries if d.kind == "post")
        return post if post.status == "sent" else None

    assert wait_until(sent).attempts == 3
    assert status(discord_gate_sqlite, request_id)["status"] == "pending"


def test_a_channel_the_bot_cannot_write_to_marks_the_card_dead(
    discord_gate_sqlite: Gate, fake_discord: FakeDiscord
) -> None:
    fake_discord.read_only.add(CHANNEL)
    request_id = ask(discord_gate_sqlite)

    def dead() -> object:
        view = discord_gate_sqlite.state.service.view(request_id, full=True)
        assert view is not None
        return next((d for d in view.deliveries if d.status == "dead"), None)

    delivery = wait_until(dead)
    assert "50013" in str(delivery.last_error) and delivery.attempts == 1
