"""Posting and editing cards: what each Bot API failure means to the outbox, the token in
the path only, edits that change nothing, and retries that wait as Telegram asks."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx
import pytest

from channels.telegram import TelegramChannel, TelegramSettings
from channels.telegram.api import NOT_MODIFIED, result_or_raise
from gate.base.errors import ConfigError
from gate.decisions.readmodel import RequestView
from gate.delivery.channel import DeliveryError, validate_settings
from gate.server.state import ChannelGate
from tests.conftest import Gate
from tests.support import fake_telegram
from tests.support.fake_telegram import CHAT, FakeTelegram
from tests.support.servers import wait_until
from tests.telegram.conftest import ask, card_of, fixture


def deliveries(gate: Gate, request_id: str) -> list[Any]:
    view = gate.state.service.view(request_id, full=True)
    assert view is not None
    return view.deliveries


def standalone(gate: Gate, **overrides: Any) -> TelegramChannel:
    """A second TelegramChannel on the gate's settings, run from the test's own event loop."""
    table = {**gate.settings.channels.configured()["telegram"], **overrides}
    settings = validate_settings("telegram", table)
    assert isinstance(settings, TelegramSettings)
    return TelegramChannel(settings, ChannelGate(gate.state.service))


def view_of(gate: Gate, request_id: str) -> RequestView:
    view = gate.state.service.view(request_id)
    assert view is not None
    return view


def response(name: str, status: int) -> httpx.Response:
    return httpx.Response(status, content=json.dumps(fixture(name)).encode())


def test_what_each_captured_error_means() -> None:
    with pytest.raises(DeliveryError) as flood:
        result_or_raise(response("error_flood.json", 429), "sendMessage")
    assert flood.value.retry_after == 41 and not flood.value.permanent
    for name, status in [
        ("error_kicked.json", 403),
        ("error_migrated.json", 400),
        ("error_unauthorized.json", 401),
    ]:
        with pytest.raises(DeliveryError) as refused:
            result_or_raise(response(name, status), "sendMessage")
        assert refused.value.permanent, name
    with pytest.raises(DeliveryError) as same:
        result_or_raise(response("error_not_modified.json", 400), "editMessageText")
    assert NOT_MODIFIED in str(same.value)  # what edit_message takes as done
    with pytest.raises(DeliveryError) as proxy:
        result_or_raise(httpx.Response(502, text="<html>bad gateway</html>"), "sendMessage")
    assert not proxy.value.permanent
    ok = httpx.Response(200, json={"ok": True, "result": {"message_id": 7}})
    assert result_or_raise(ok, "sendMessage") == {"message_id": 7}


def test_a_migrated_group_says_where_it_went() -> None:
    with pytest.raises(DeliveryError) as moved:
        result_or_raise(response("error_migrated.json", 400), "sendMessage")
    assert "-1001234567890" in str(moved.value)


def test_flood_control_is_waited_out_by_the_outbox(tg_gate: Gate, fake: FakeTelegram) -> None:
    fake.flood("sendMessage", retry_after=1)
    request_id = ask(tg_gate)
    card_of(fake, request_id)
    wait_until(lambda: deliveries(tg_gate, request_id)[0].status == "sent")
    first, second = fake.calls_to("sendMessage")[:2]
    assert first.status == 429 and second.status == 200
    assert second.at - first.at >= 0.9  # the 1 s Telegram asked for (the outbox ticks 0.2 s)
    assert deliveries(tg_gate, request_id)[0].attempts == 2


def test_an_outage_is_retried(tg_gate: Gate, fake: FakeTelegram) -> None:
    fake.fail("sendMessage", times=2)
    request_id = ask(tg_gate)
    card_of(fake, request_id)
    wait_until(lambda: deliveries(tg_gate, request_id)[0].status == "sent")
    assert deliveries(tg_gate, request_id)[0].attempts == 3


def test_a_chat_the_bot_is_not_in_is_dead_at_once(tg_gate: Gate, fake: FakeTelegram) -> None:
    fake.chats = {-100999}
    request_id = ask(tg_gate)
    wait_until(lambda: deliveries(tg_gate, request_id)[0].status == "dead")
    (post,) = deliveries(tg_gate, request_id)
    assert post.attempts == 1 and "chat not found" in (post.last_error or "")


def test_the_token_goes_in_the_path_and_nowhere_else(tg_gate: Gate, fake: FakeTelegram) -> None:
    request_id = ask(tg_gate)
    card_of(fake, request_id)
    calls = fake.calls_to("sendMessage")
    assert calls and all(c.token == fake_telegram.TOKEN for c in calls)
    assert all(fake_telegram.TOKEN not in json.dumps(c.body) for c in fake.calls)
    view = view_of(tg_gate, request_id)

    async def wrong_token() -> None:
        ch = standalone(tg_gate, bot_token="7000000001:AAWrongTokenWrongTokenWrong")
        try:
            await ch.post(view, str(CHAT))
        finally:
            await ch.aclose()

    with pytest.raises(DeliveryError) as refused:
        asyncio.run(wrong_token())
    assert refused.value.permanent and "Unauthorized" in str(refused.value)


def test_an_unreachable_api_is_retried_without_leaking_the_token(tg_gate: Gate) -> None:
    request_id = ask(tg_gate)
    view = view_of(tg_gate, request_id)

    async def unreachable() -> None:
        ch = standalone(tg_gate, api_url="http://127.0.0.1:9")
        try:
            await ch.post(view, str(CHAT))
        finally:
            await ch.aclose()

    with pytest.raises(DeliveryError) as failed:
        asyncio.run(unreachable())
    assert not failed.value.permanent
    assert fake_telegram.TOKEN not in str(failed.value)
    assert "AAFake" not in repr(failed.value.__cause__) + repr(failed.value.__context__)


def test_edits_in_place_and_an_edit_that_changes_nothing(tg_gate: Gate, fake: FakeTelegram) -> None:
    request_id = ask(tg_gate)
    card = card_of(fake, request_id)
    view = view_of(tg_gate, request_id)

    async def edit_twice() -> None:
        ch = standalone(tg_gate)
        try:
            await ch.update(view, str(CHAT), str(card.message_id))
            await ch.update(view, str(CHAT), str(card.message_id))  # "not modified": fine
            with pytest.raises(DeliveryError) as gone:
                await ch.update(view, str(CHAT), "424242")
            assert gone.value.permanent
            with pytest.raises(DeliveryError) as odd:
                await ch.update(view, str(CHAT), "not-a-number")
            assert odd.value.permanent
        finally:
            await ch.aclose()

    asyncio.run(edit_twice())
    edits = fake.calls_to("editMessageText")
    # The second edit asked for what the card already showed: Telegram's 400, taken as done.
    assert edits[-2].response["description"].startswith("Bad Request: message is not modified")
    assert "message to edit not found" in edits[-1].response["description"]


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("bot_token", "not-a-token", "bot_token"),
        ("webhook_secret", "short", "webhook_secret"),
        ("webhook_secret", "has spaces in it, which setWebhook refuses", "webhook_secret"),
        ("callback_secret", "too-short", "callback_secret"),
        ("webhook-secret", "x" * 20, "webhook-secret"),
    ],
)
def test_bad_settings_stop_start_up_naming_the_key(key: str, value: str, says: str) -> None:
    table = {
        "bot_token": fake_telegram.TOKEN,
        "webhook_secret": "w" * 20,
        "callback_secret": "c" * 40,
        key: value,
    }
    with pytest.raises(ConfigError) as refused:
        validate_settings("telegram", table)
    assert says in str(refused.value) or says in (refused.value.key or "")


def test_the_token_stays_out_of_the_logs(
    tg_gate: Gate, fake: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    # httpx logs each request's URL at INFO; the Bot API's URL holds the token.
    with caplog.at_level(logging.INFO):
        request_id = ask(tg_gate)
        card_of(fake, request_id)
        wait_until(lambda: deliveries(tg_gate, request_id)[0].status == "sent")
    assert "sendMessage" in caplog.text and "<bot token>" in caplog.text
    assert fake_telegram.TOKEN not in caplog.text


def test_a_bot_removed_from_the_group_is_dead_at_once(tg_gate: Gate, fake: FakeTelegram) -> None:
    kicked = fixture("error_kicked.json")
    fake.fail("sendMessage", status=403, description=kicked["description"])
    request_id = ask(tg_gate)
    wait_until(lambda: deliveries(tg_gate, request_id)[0].status == "dead")
    (post,) = deliveries(tg_gate, request_id)
    assert post.attempts == 1 and "kicked" in (post.last_error or "")
