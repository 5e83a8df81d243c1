"""Telegram on loopback: from a button press to its answer, and to the card edited in place.

A real gate (SQLite, the production outbox interval of 1 s: a decision kicks the outbox) and
`FakeTelegram` run as uvicorn threads in this process. For each of N requests the bench
pushes the Update of a press on Approve (or Extend) to the webhook, as Telegram would, and
reads from the fake's record when answerCallbackQuery arrived ("answer") and when the
editMessageText that showed the outcome arrived ("card"), both from the moment the webhook
POST started. Client, gate and fake share the process and its GIL, so these are upper
bounds of what gate adds; Telegram's own network hops are not in them.

    .venv/bin/python -m bench.telegram_clicks [--presses 50]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import httpx

from bench._common import machine, percentile
from gate.app import create_app
from gate.config.settings import Settings
from tests.support import config as cfg
from tests.support import fake_telegram, telegram_buttons
from tests.support.fake_telegram import CHAT, FakeTelegram, Message
from tests.support.servers import ThreadServer, wait_until

WEBHOOK_SECRET = "bench-telegram-webhook-secret-0001"
CALLBACK_SECRET = "bench-telegram-callback-secret-0123456789ab"
ALICE = 111001


def settings(db_url: str, fake: FakeTelegram) -> Settings:
    data = cfg.settings_data(db_url, outbox_interval_seconds=1.0, sweep_interval_seconds=1.0)
    data["approvers"][0]["telegram"] = str(ALICE)
    data["channels"] = {
        "telegram": {
            "bot_token": fake_telegram.TOKEN,
            "webhook_secret": WEBHOOK_SECRET,
            "callback_secret": CALLBACK_SECRET,
            "default_target": str(CHAT),
            "api_url": fake.url,
        }
    }
    return Settings(**data)


def card_for(fake: FakeTelegram, request_id: str) -> Message:
    def found() -> Message | None:
        for message in fake.bot_messages():
            if message.parse_mode == "HTML" and request_id in message.shown()[0]:
                return message
        return None

    message: Message = wait_until(found)
    return message


def one_press(
    gate: ThreadServer, fake: FakeTelegram, client: httpx.Client, kind: str
) -> tuple[float, float]:
    """(ms to the answer, ms to the edited card) of one press of `kind` on a new request."""
    with httpx.Client(base_url=gate.url, headers={"Authorization": f"Bearer {cfg.AGENT}"}) as c:
        body = {"tool_name": "pay_vendor", "tool_args": {"amount": 60000}, "user_id": "dave"}
        request_id = c.post("/v1/gate", json=body).json()["request"]["id"]
    card = card_for(fake, request_id)
    if kind == "extend":
        button = next(
            b for b in card.buttons
            if telegram_buttons.read(CALLBACK_SECRET, b["callback_data"])[1] == "extend"
        )  # fmt: skip
        data = button["callback_data"]
    else:
        data = telegram_buttons.mint(CALLBACK_SECRET, request_id, "approve")
    versions = len(card.versions)
    update = fake.press(CHAT, card.message_id, data, ALICE)
    delivery = fake_telegram.deliver(update, WEBHOOK_SECRET)
    start = time.monotonic()
    r = client.post("/channels/telegram/webhook", content=delivery.body, headers=delivery.headers)
    assert r.status_code == 200, r.text
    query_id = update["callback_query"]["id"]
    answered = next(
        c.at for c in fake.calls_to("answerCallbackQuery")
        if c.body.get("callback_query_id") == query_id
    )  # fmt: skip
    wait_until(lambda: len(card.versions) > versions, timeout=10)
    edited = [
        c.at for c in fake.calls_to("editMessageText", ok=True)
        if c.body.get("message_id") == card.message_id
    ]  # fmt: skip
    return (answered - start) * 1000, (edited[-1] - start) * 1000


def report(name: str, values: list[float]) -> str:
    return (
        f"| {name} | {statistics.median(values):.1f} | {percentile(values, 95):.1f} | "
        f"{max(values):.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--presses", type=int, default=50)
    args = parser.parse_args()
    fake = FakeTelegram().start()
    with tempfile.TemporaryDirectory() as tmp:
        gate = ThreadServer(create_app(settings(f"sqlite:///{tmp}/gate.db", fake))).start()
        try:
            with httpx.Client(base_url=gate.url, timeout=30) as client:
                results = {
                    kind: [one_press(gate, fake, client, kind) for _ in range(args.presses)]
                    for kind in ("approve", "extend")
                }
        finally:
            gate.stop()
            fake.stop()
    print(machine())
    print(f"{args.presses} presses each, ms from the webhook POST\n")
    print("| press | p50 | p95 | max |\n| --- | --- | --- | --- |")
    for kind, pairs in results.items():
        print(report(f"{kind}: click -> answer", [a for a, _ in pairs]))
        print(report(f"{kind}: click -> card updated", [c for _, c in pairs]))


if __name__ == "__main__":
    main()
