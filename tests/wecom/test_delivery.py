"""Sending and updating WeCom cards: the access token cache, errcodes as DeliveryError, the
ResponseCodes a card update spends, and outages retried by the outbox."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from channels.wecom import WeComChannel, WeComSettings
from channels.wecom.api import RATE_LIMIT_WAIT_SECONDS
from channels.wecom.channel import RECORDING
from channels.wecom.codes import read_ref
from gate.decisions.readmodel import RequestView
from gate.delivery.channel import DeliveryError, validate_settings
from gate.server.state import ChannelGate
from tests.conftest import Gate
from tests.support import fake_wecom
from tests.support.fake_wecom import FakeWeCom
from tests.support.held import requests_locked
from tests.support.servers import wait_until
from tests.wecom.conftest import AES_KEY, TOKEN, ask, posted, press, user


def standalone(gate: Gate, **kwargs: Any) -> WeComChannel:
    """A second WeComChannel on the same settings, driven from the test's own event loop."""
    settings = validate_settings("wecom", gate.settings.channels.configured()["wecom"])
    assert isinstance(settings, WeComSettings)
    return WeComChannel(settings, ChannelGate(gate.state.service), **kwargs)


def a_view(gate: Gate, fake: FakeWeCom) -> RequestView:
    """A pending request whose card the gate itself has posted (so its outbox is idle)."""
    request_id = ask(gate, "ask_anything", {"q": 1})
    posted(fake, request_id)
    view = gate.state.service.view(request_id)
    assert view is not None
    return view


def token_calls(fake: FakeWeCom) -> int:
    return len(fake.recorded("/cgi-bin/gettoken"))


def test_the_token_is_cached_shared_and_refreshed_once(wecom_gate: Gate, fake: FakeWeCom) -> None:
    view = a_view(wecom_gate, fake)
    clock = [time.time()]

    async def run() -> tuple[int, int, int]:
        ch = standalone(wecom_gate, clock=lambda: clock[0])
        try:
            before = token_calls(fake)
            await asyncio.gather(*(ch.post(view, f"user{i}") for i in range(10)))
            first = token_calls(fake) - before
            fake.revoke_tokens()  # 40014 on the next call: one refresh, one retry
            await ch.post(view, "user-after-revoke")
            second = token_calls(fake) - before
            clock[0] += 7200  # our own clock passes the expiry
            await ch.post(view, "user-after-expiry")
            return first, second, token_calls(fake) - before
        finally:
            await ch.aclose()

    assert asyncio.run(run()) == (1, 2, 3)
    # Every API call carried a token the fake had issued (it answers 40014 otherwise).
    sends = fake.recorded("/cgi-bin/message/send")
    assert all(r.query.get("access_token", "").startswith("at-") for r in sends)


@pytest.mark.parametrize(
    ("errcode", "status", "permanent", "retry_after"),
    [
        (45009, 200, False, RATE_LIMIT_WAIT_SECONDS),
        (45033, 200, False, RATE_LIMIT_WAIT_SECONDS),
        (-1, 200, False, None),
        (-1, 502, False, None),
        (81013, 200, True, None),
        (60020, 200, True, None),
        (48002, 200, True, None),
        (99999, 200, False, None),
    ],
)
def test_errcodes_become_delivery_errors(
    wecom_gate: Gate, fake: FakeWeCom, errcode: int, status: int, permanent: bool, retry_after: Any
) -> None:
    view = a_view(wecom_gate, fake)

    async def run() -> DeliveryError:
        ch = standalone(wecom_gate)
        fake.fail("send", errcode=errcode, status=status)
        try:
            with pytest.raises(DeliveryError) as raised:
                await ch.post(view, "someone")
            return raised.value
        finally:
            await ch.aclose()

    error = asyncio.run(run())
    assert (error.permanent, error.retry_after) == (permanent, retry_after)


def test_a_bad_secret_is_permanent(wecom_gate: Gate, fake: FakeWeCom) -> None:
    view = a_view(wecom_gate, fake)

    async def run() -> list[DeliveryError]:
        ch = standalone(wecom_gate)
        ch.api.settings = ch.api.settings.model_copy(update={"secret": SecretStr("wrong")})
        errors = []
        for target in ("alice",):
            try:
                await ch.post(view, target)
            except DeliveryError as exc:
                errors.append(exc)
        await ch.aclose()
        return errors

    errors = asyncio.run(run())
    assert [e.permanent for e in errors] == [True] and "40001" in str(errors[0])


def test_updates_spend_click_codes_and_keep_the_posts_for_the_end(
    wecom_gate: Gate, fake: FakeWeCom
) -> None:
    request_id = ask(wecom_gate, "wire_funds", {"amount": 10})  # two approvals needed
    message = posted(fake, request_id)
    view = wecom_gate.state.service.view(request_id)
    assert view is not None
    # The fake has the card a moment before gate records the post (and its reference).
    ref: str = wait_until(
        lambda: next(d.message_ref for d in full(wecom_gate, request_id).deliveries)
    )
    task, post_code = read_ref(ref)
    assert task == message.task_id and post_code.startswith("rc-")

    async def refresh(ch: WeComChannel, v: RequestView) -> None:
        await ch.update(v, "alice|bob", ref)

    async def run() -> None:
        ch = standalone(wecom_gate)
        try:
            # A pending refresh with no click code leaves the card as it is...
            await refresh(ch, view)
            assert len(message.cards) == 1
            # ...and one with a click's code spends it.
            ch.codes.add(task, fake.issue_code(task))
            await refresh(ch, view)
            assert len(message.cards) == 2
            # A click code WeCom refuses (already used elsewhere) is skipped; the final state
            # spends the post's code, once; a second final update has none left.
            used = fake.issue_code(task)
            fake.codes[used] = (task, time.time(), True)
            ch.codes.add(task, used)
            done = replace(view, status="approved", decided_by="alice", decided_via="api")
            await refresh(ch, done)
            assert message.card["card_type"] == "text_notice"
            await refresh(ch, done)
            assert len(message.cards) == 3
        finally:
            await ch.aclose()

    asyncio.run(run())
    assert fake.card_problems == []


def full(gate: Gate, request_id: str) -> RequestView:
    view = gate.state.service.view(request_id, full=True)
    assert view is not None
    return view


def test_a_vote_refreshes_the_card_with_the_clicks_code(wecom_gate: Gate, fake: FakeWeCom) -> None:
    request_id = ask(wecom_gate, "wire_funds", {"amount": 10})
    message = posted(fake, request_id)
    press(wecom_gate, fake, request_id, "alice", "approve")
    wait_until(lambda: len(message.cards) == 2)
    assert "(1 of 2)" in message.card["sub_title_text"]
    press(wecom_gate, fake, request_id, "bob", "approve")
    wait_until(lambda: message.card["card_type"] == "text_notice")
    spent = [c for c, (t, _, used) in fake.codes.items() if t == message.task_id and used]
    assert len(spent) == 2  # the two clicks' codes; the post's is still unspent


def test_an_outage_is_retried_by_the_outbox(wecom_gate: Gate, fake: FakeWeCom) -> None:
    fake.fail("send", errcode=-1, status=503, times=2)
    request_id = ask(wecom_gate)
    posted(fake, request_id)
    post = wait_until(
        lambda: next(
            (d for d in full(wecom_gate, request_id).deliveries if d.status == "sent"), None
        )
    )
    assert post.attempts >= 3


def test_httpx_request_logs_do_not_show_the_secret_or_token(
    wecom_gate: Gate, fake: FakeWeCom, caplog: pytest.LogCaptureFixture
) -> None:
    view = a_view(wecom_gate, fake)

    async def run() -> None:
        ch = standalone(wecom_gate)
        try:
            await ch.post(view, "someone")
        finally:
            await ch.aclose()

    with caplog.at_level(logging.INFO, logger="httpx"):
        asyncio.run(run())
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "httpx")
    assert "corpsecret=[masked]" in logged and "access_token=[masked]" in logged
    assert "wecom-app-secret-for-tests" not in logged and "at-" not in logged


def test_transport_failures_are_retryable(wecom_gate: Gate, fake: FakeWeCom) -> None:
    view = a_view(wecom_gate, fake)

    class Down(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            raise httpx.ConnectError("connection refused", request=request)

    async def run() -> DeliveryError:
        ch = standalone(wecom_gate, transport=Down())
        try:
            with pytest.raises(DeliveryError) as raised:
                await ch.post(view, "someone")
            return raised.value
        finally:
            await ch.aclose()

    assert asyncio.run(run()).permanent is False


def test_a_slow_decision_is_answered_in_time_and_still_lands(
    wecom_gate: Gate, fake: FakeWeCom
) -> None:
    request_id = ask(wecom_gate)
    task = posted(fake, request_id).task_id
    plain = fake_wecom.card_event_xml(
        user=user("alice"), task_id=task, event_key="approve", response_code=fake.issue_code(task)
    )
    cb = fake_wecom.build_callback(plain, token=TOKEN, encoding_aes_key=AES_KEY)

    async def run() -> None:
        # No time at all to decide: the clicker hears "recording", the decision finishes.
        ch = standalone(wecom_gate, ack_budget=0.0)
        try:
            await ch.handle(cb.query, cb.body)
        finally:
            await ch.aclose()

    asyncio.run(run())
    assert fake.texts_to(user("alice")) == [RECORDING]
    assert wait_until(lambda: full(wecom_gate, request_id).status == "approved")


def test_a_group_chat_gets_text_cards_linking_to_gate(wecom_gate: Gate, fake: FakeWeCom) -> None:
    view = replace(a_view(wecom_gate, fake), summary="<div class=highlight>" + "字" * 300)

    async def run() -> list[str]:
        ch = standalone(wecom_gate)
        try:
            ref = await ch.post(view, "chat:wrApprovals")
            await ch.update(view, "chat:wrApprovals", ref)  # pending: nothing to add
            done = replace(view, status="rejected", decided_by="bob", decided_via="wecom")
            await ch.update(done, "chat:wrApprovals", ref)
            late = await ch.post(done, "chat:wrApprovals")  # posted already final
            await ch.update(done, "chat:wrApprovals", late)
            with pytest.raises(DeliveryError) as unknown:
                await ch.post(view, "chat:wrNotOurs")
            assert unknown.value.permanent and "86003" in str(unknown.value)
            return [ref, late]
        finally:
            await ch.aclose()

    refs = asyncio.run(run())
    assert refs == ["chat:wrApprovals", "chat:wrApprovals final"]
    cards = [c for chat, c in fake.chat_cards]
    assert [c["title"].split()[0] for c in cards] == ["Approve?", "Rejected", "Rejected"]
    assert all(c["url"] == view.url and "<" not in c["description"] + c["title"] for c in cards)
    assert "Rejected by bob in WeCom" in cards[1]["description"]


def test_recipients_outside_the_apps_range(
    wecom_gate: Gate, fake: FakeWeCom, caplog: pytest.LogCaptureFixture
) -> None:
    view = a_view(wecom_gate, fake)
    fake.visible = {"alice"}

    async def run() -> DeliveryError:
        ch = standalone(wecom_gate)
        try:
            await ch.post(view, "alice|ghost")  # sent to alice; ghost is named in the log
            with pytest.raises(DeliveryError) as nobody:
                await ch.post(view, "ghost")
            return nobody.value
        finally:
            await ch.aclose()

    with caplog.at_level(logging.WARNING, logger="gate.channels.wecom"):
        error = asyncio.run(run())
    assert error.permanent and "81013" in str(error)
    assert "'ghost'" in caplog.text and "visible range" in caplog.text


def test_a_refusal_that_lands_after_recording_is_told_privately(
    wecom_gate_db: Gate, fake: FakeWeCom
) -> None:
    # alice asked for the call, so she cannot approve it; her press waits behind another
    # writer past the 3 s budget: she hears "Recording...", then, privately, the refusal.
    request_id = ask(wecom_gate_db, user_id="alice")
    with requests_locked(wecom_gate_db.settings.server.database_url):
        assert press(wecom_gate_db, fake, request_id, "alice", "approve").status_code == 200
        assert fake.texts_to(user("alice")) == [RECORDING]
    refusal = "Not recorded: you asked for this call, so you cannot approve it yourself."
    wait_until(lambda: fake.texts_to(user("alice")) == [RECORDING, refusal])
    assert full(wecom_gate_db, request_id).status == "pending"
