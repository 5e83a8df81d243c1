"""WeCom click latency on loopback: click -> answer, click -> card updated for everyone.

Starts the fake WeCom server API (tests/support/fake_wecom.py) in this process and a real
`gate serve` whose only channel is WeCom, pointed at it. For each of `--n` requests it waits
for the card, then delivers a signed, encrypted `template_card_event` (Approve) and times:

* click -> answer: the callback's HTTP round trip (gate verified, decrypted, decided, and
  answered; WeCom wants this under 5 s);
* click -> card updated: until the fake holds the replaced card (the outbox's
  `update_template_card` with the click's ResponseCode), polled every 2 ms;
* click -> private answer: a Reject… press until the instructions text reaches the fake.

    .venv/bin/python -m bench.wecom_click --n 50                 # default outbox interval
    .venv/bin/python -m bench.wecom_click --n 50 --outbox-interval 0.05
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench._common import database, healthz_round_trip_ms
from tests.support import config as cfg
from tests.support import fake_wecom
from tests.support.servers import ServerProcess

TOKEN = "benchToken01"
AES_KEY = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFG"


@contextmanager
def gate_with_wecom(
    db_url: str, fake: fake_wecom.FakeWeCom, interval: float
) -> Iterator[ServerProcess]:
    with tempfile.TemporaryDirectory() as tmp:
        data = cfg.settings_data(db_url, outbox_interval_seconds=interval)
        for approver in data["approvers"]:
            approver["wecom"] = approver["name"]
        data["channels"] = {
            "wecom": {
                "corp_id": fake_wecom.CORP_ID,
                "agent_id": fake_wecom.AGENT_ID,
                "secret": fake_wecom.SECRET,
                "token": TOKEN,
                "encoding_aes_key": AES_KEY,
                "default_target": "alice|bob",
                "api_url": fake.url,
            }
        }
        path = Path(tmp) / "gate.toml"
        path.write_text(cfg.to_toml(data))
        proc = ServerProcess(path, log_path=Path(tmp) / "gate.log").start(timeout=60)
        try:
            yield proc
        finally:
            proc.stop()


def wait(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    end = time.monotonic() + timeout
    while not (found := predicate()):
        if time.monotonic() > end:
            raise TimeoutError("condition not met")
        time.sleep(0.002)
    return found


def press(http: httpx.Client, fake: fake_wecom.FakeWeCom, task: str, who: str, key: str) -> int:
    plain = fake_wecom.card_event_xml(
        user=who, task_id=task, event_key=key, response_code=fake.issue_code(task)
    )
    cb = fake_wecom.build_callback(plain, token=TOKEN, encoding_aes_key=AES_KEY)
    return http.post("/channels/wecom/callback", params=cb.query, content=cb.body).status_code


def card_of(fake: fake_wecom.FakeWeCom, request_id: str) -> fake_wecom.Message | None:
    return next((m for m in fake.posted() if m.task_id.startswith(f"gate-{request_id}-")), None)


def run(n: int, interval: float) -> None:
    fake = fake_wecom.FakeWeCom().start()
    answer, updated, private = [], [], []
    try:
        with database("sqlite") as url, gate_with_wecom(url, fake, interval) as proc:
            base = proc.url
            with httpx.Client(base_url=base, timeout=30) as http:
                agent = {"Authorization": f"Bearer {cfg.AGENT}"}
                for _ in range(n):
                    body = {"tool_name": "pay_vendor", "tool_args": {"amount": 60000}}
                    r = http.post("/v1/gate", json=body, headers=agent)
                    request_id = r.json()["request"]["id"]
                    message = wait(lambda rid=request_id: card_of(fake, rid))
                    seen = len(fake.texts_to("bob"))
                    t = time.perf_counter()
                    assert press(http, fake, message.task_id, "bob", "reject") == 200
                    wait(lambda s=seen: len(fake.texts_to("bob")) > s)
                    private.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    assert press(http, fake, message.task_id, "alice", "approve") == 200
                    answer.append(time.perf_counter() - t)
                    wait(lambda m=message: len(m.cards) > 1)
                    updated.append(time.perf_counter() - t)
            floor = healthz_round_trip_ms(base)
    finally:
        fake.stop()

    def row(name: str, times: list[float]) -> None:
        ms = sorted(x * 1000 for x in times)
        p95 = ms[int(len(ms) * 0.95) - 1] if len(ms) >= 20 else ms[-1]
        print(f"| {name} | {statistics.median(ms):.1f} | {p95:.1f} | {ms[-1]:.1f} |")

    print(f"{n} requests, SQLite, outbox_interval_seconds {interval}")
    print(f"/healthz round trip {floor:.2f} ms (the floor)")
    print("| click -> | median ms | p95 ms | max ms |\n| --- | --- | --- | --- |")
    row("answer (Approve callback round trip)", answer)
    row("card updated for everyone", updated)
    row("private answer (Reject… instructions)", private)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--outbox-interval", type=float, default=1.0)
    args = parser.parse_args()
    run(args.n, args.outbox_interval)


if __name__ == "__main__":
    main()
