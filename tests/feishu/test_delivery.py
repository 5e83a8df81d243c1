"""Sending and updating cards: the tenant token cache, rate limits, outages, dead letters."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from channels.feishu import FeishuChannel, FeishuSettings, receive_id_type
from gate.decisions.readmodel import RequestView
from gate.delivery.channel import DeliveryError, validate_settings
from gate.server.state import ChannelGate
from tests.conftest import Gate
from tests.feishu.conftest import CHAT, ENCRYPT_KEY, VERIFICATION_TOKEN, channel
from tests.feishu.test_callbacks import submit_and_card
from tests.support import config as cfg
from tests.support.fake_feishu import FakeFeishu, build_callback
from tests.support.servers import wait_until


def deliveries(gate: Gate, request_id: str) -> list[Any]:
    view = gate.state.service.view(request_id, full=True)
    assert view is not None
    return view.deliveries


def standalone(gate: Gate, **kwargs: Any) -> FeishuChannel:
    """A second FeishuChannel on the same settings, driven from the test's own event loop."""
    settings = validate_settings("feishu", gate.settings.channels.configured()["feishu"])
    assert isinstance(settings, FeishuSettings)
    return FeishuChannel(settings, ChannelGate(gate.state.service), **kwargs)


def a_view(gate: Gate) -> RequestView:
    answer = gate.submit(tool_name="ask_anything", tool_args={"q": 1})
    view = gate.state.service.view(answer["request"]["id"])
    assert view is not None
    return view


def test_receive_id_types() -> None:
    assert receive_id_type("oc_abc") == "chat_id"
    assert receive_id_type("ou_abc") == "open_id"
    assert receive_id_type("on_abc") == "union_id"
    assert receive_id_type("ops@example.com") == "email"


def test_concurrent_sends_share_one_token_fetch(feishu_gate: Gate, fake_feishu: FakeFeishu) -> None:
    view = a_view(feishu_gate)
    wait_until(lambda: fake_feishu.token_requests == 1)  # the app's own channel, for the card
    fake_feishu.token_delay = 0.2  # the fetch is slow, so all sends really wait on it together
    clock = [time.time()]

    async def run() -> tuple[list[str], int, int]:
        ch = standalone(feishu_gate, clock=lambda: clock[0])
        try:
            refs = await asyncio.gather(*(ch.post(view, f"oc_chat{i}") for i in range(20)))
            first = fake_feishu.token_requests
            # The app already posted this request to CHAT: Feishu's uuid dedup gives it back.
            (app_card,) = [m for m in fake_feishu.posted() if m.receive_id == CHAT]
            assert await ch.post(view, CHAT) == app_card.message_id
            # The platform revokes every token: the next wave of sends refreshes once.
            fake_feishu.revoke_tokens()
            await asyncio.gather(*(ch.update(view, CHAT, ref) for ref in refs))
            second = fake_feishu.token_requests
            # Our own clock passes the expiry: one fetch, then the cache again.
            clock[0] += 7200
            await asyncio.gather(*(ch.update(view, CHAT, refs[0]) for _ in range(5)))
            return list(refs), first, second
        finally:
            await ch.aclose()

    refs, first, second = asyncio.run(run())
    assert len(set(refs)) == 20
    assert first == 2  # one for the app's channel, one shared by the 20 concurrent posts
    assert second == 3  # exactly one refresh after the revocation
    assert fake_feishu.token_requests == 4
    assert len(fake_feishu.posted()) == 21


def test_token_revoked_mid_run_refreshes_once_through_the_outbox(
    feishu_gate: Gate, fake_feishu: FakeFeishu
) -> None:
    request_id, message = submit_and_card(feishu_gate, fake_feishu)
    assert fake_feishu.token_requests == 1
    fake_feishu.revoke_tokens()
    assert feishu_gate.decide(request_id, cfg.ALICE).status_code == 200
    wait_until(lambda: len(message.cards) == 2)
    assert message.card["header"]["template"] == "green"
    assert fake_feishu.token_requests == 2
    patches = fake_feishu.recorded("PATCH")
    assert len(patches) == 2  # refused with the old token, then accepted with the new one
    assert patches[0].headers["authorization"] != patches[1].headers["authorization"]
    wait_until(lambda: all(d.status == "sent" for d in deliveries(feishu_gate, request_id)))


def test_rate_limited_sends_are_retried_and_arrive(
    feishu_gate: Gate, fake_feishu: FakeFeishu
) -> None:
    fake_feishu.rate_limit("create", times=2, reset=0)
    request_id, message = submit_and_card(feishu_gate, fake_feishu)
    assert len(fake_feishu.recorded("POST", "/open-apis/im/v1/messages")) == 3
    wait_until(lambda: deliveries(feishu_gate, request_id)[0].status == "sent")
    (post,) = deliveries(feishu_gate, request_id)
    assert post.attempts == 3 and post.message_ref == message.message_id


def test_server_errors_are_retried(feishu_gate: Gate, fake_feishu: FakeFeishu) -> None:
    fake_feishu.fail("create", code=1, status=503, msg="upstream unavailable")
    request_id, message = submit_and_card(feishu_gate, fake_feishu)
    wait_until(lambda: deliveries(feishu_gate, request_id)[0].status == "sent")
    assert deliveries(feishu_gate, request_id)[0].attempts == 2


def test_bot_not_in_chat_is_dead_and_visible(feishu_gate: Gate, fake_feishu: FakeFeishu) -> None:
    fake_feishu.chats = {"oc_somewhere_else"}
    answer = feishu_gate.submit(tool_name="pay_vendor", tool_args={"amount": 60000})
    request_id = answer["request"]["id"]
    wait_until(lambda: deliveries(feishu_gate, request_id)[0].status == "dead")
    (post,) = deliveries(feishu_gate, request_id)
    assert post.attempts == 1
    assert "230002" in (post.last_error or "")
    # Chat trouble never blocks the request: the API still decides it.
    assert feishu_gate.decide(request_id, cfg.ALICE).status_code == 200


def test_expiry_updates_the_card_through_the_outbox(
    feishu_gate: Gate, fake_feishu: FakeFeishu
) -> None:
    request_id, message = submit_and_card(feishu_gate, fake_feishu, "ephemeral_job", n=1)
    wait_until(lambda: len(message.cards) == 2)
    assert message.card["header"]["template"] == "grey"
    assert '"tag": "form"' not in json.dumps(message.card)


@pytest.mark.parametrize(
    ("code", "status", "permanent", "retry_after"),
    [
        (99991400, 429, False, 3.0),
        (230020, 400, False, 3.0),
        (230002, 400, True, None),
        (99991672, 400, True, None),
        (230031, 400, True, None),
        (1, 500, False, None),
        (123456, 400, True, None),
    ],
)
def test_error_mapping(
    feishu_gate: Gate,
    fake_feishu: FakeFeishu,
    code: int,
    status: int,
    permanent: bool,
    retry_after: float | None,
) -> None:
    view = a_view(feishu_gate)
    fake_feishu.fail(
        "update", code=code, status=status, headers={"x-ogw-ratelimit-reset": "3"}, times=1
    )

    async def run() -> DeliveryError:
        ch = standalone(feishu_gate)
        try:
            ref = await ch.post(view, CHAT)
            with pytest.raises(DeliveryError) as caught:
                await ch.update(view, CHAT, ref)
            return caught.value
        finally:
            await ch.aclose()

    error = asyncio.run(run())
    assert error.permanent is permanent
    assert error.retry_after == retry_after
    assert str(code) in str(error)


def test_unreachable_platform_is_a_retry(feishu_gate: Gate, fake_feishu: FakeFeishu) -> None:
    view = a_view(feishu_gate)
    fake_feishu.stop()

    async def run() -> DeliveryError:
        ch = standalone(feishu_gate)
        try:
            with pytest.raises(DeliveryError) as caught:
                await ch.post(view, CHAT)
            return caught.value
        finally:
            await ch.aclose()

    error = asyncio.run(run())
    assert not error.permanent and "unreachable" in str(error)


def test_injection_args_reach_feishu_as_a_valid_inert_card(
    feishu_gate: Gate, fake_feishu: FakeFeishu
) -> None:
    args = {"memo": "<at id=all></at> [approve](https://evil.example) ```", "password": "p4ss"}
    _, message = submit_and_card(feishu_gate, fake_feishu, "ask_pay", **args)
    content = str(message.cards[0])
    assert fake_feishu.card_problems == []
    assert "<at" not in content and "p4ss" not in content
    assert channel(feishu_gate).name == "feishu"


def test_a_slow_decision_still_answers_in_time(feishu_gate: Gate, fake_feishu: FakeFeishu) -> None:
    """Past the ack budget the click gets an interim toast; the decision lands anyway."""
    request_id, message = submit_and_card(feishu_gate, fake_feishu)
    payload = fake_feishu.click(
        message.message_id, "approve", open_id="ou_alice", verification_token=VERIFICATION_TOKEN
    )
    cb = build_callback(payload, encrypt_key=ENCRYPT_KEY)

    async def run() -> dict[str, Any]:
        ch = standalone(feishu_gate, ack_budget=0)  # no decision lands in no time at all
        try:
            return await ch.handle({k.lower(): v for k, v in cb.headers.items()}, cb.body)
        finally:
            await ch.aclose()  # waits for the decision still in flight

    answer = asyncio.run(run())
    assert answer == {
        "toast": {
            "type": "info",
            "content": "Recording your decision; the card updates in a moment.",
        }
    }
    view = feishu_gate.state.service.view(request_id)
    assert view is not None and view.status == "approved"
    wait_until(lambda: len(message.cards) == 2)
