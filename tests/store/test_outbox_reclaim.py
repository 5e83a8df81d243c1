"""A replica killed mid-delivery: another sends its card within seconds, not after 60 s.

Two real `gate serve` processes on one database and a real SMTP server (aiosmtpd) that holds
the first one's mail unanswered; that process is SIGKILLed while it waits. Its claim's lease
(6 s, renewed every 2 s while a send is under way) is the only thing left of it, so the
second process, running all along, retakes the row once the lease runs out and mails the
card; while the first was alive and held, it kept its claim past the lease.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from gate.store import outbox
from tests.email.conftest import ADDRESSES, LINK_SECRET
from tests.support import config as cfg
from tests.support.databases import migrated_sqlite
from tests.support.fake_smtp import FakeSMTP
from tests.support.http import TLS
from tests.support.servers import ServerProcess, wait_until

#: the lease (6 s) plus a pump interval, with room for a slow host
RECLAIMED_WITHIN = 10.0


def _config(path: Path, database_url: str, smtp: FakeSMTP) -> Path:
    data = cfg.settings_data(database_url)
    for approver in data["approvers"]:
        approver["email"] = ADDRESSES[approver["name"]]
    data["channels"] = {
        "email": {
            "host": "127.0.0.1",
            "port": smtp.port,
            "security": "none",
            "sender": "gate <gate@example.com>",
            "link_secret": LINK_SECRET,
            "default_target": "approvers",
            "timeout": 60,  # the held mail must not time out before the kill
        }
    }
    path.write_text(cfg.to_toml(data))
    return path


def _mails(smtp: FakeSMTP, request_id: str) -> list[Any]:
    return smtp.about(request_id)


def test_a_killed_replicas_claimed_card_is_sent_by_another_within_seconds(
    tmp_path: Path,
) -> None:
    smtp = FakeSMTP().start()
    config = _config(tmp_path / "gate.toml", migrated_sqlite(tmp_path / "gate.db"), smtp)
    first = ServerProcess(config, log_path=tmp_path / "first.log").start()
    second = ServerProcess(config, log_path=tmp_path / "second.log").start()  # a live replica
    try:
        with smtp.stall() as stalled:
            with httpx.Client(base_url=first.url, timeout=10, verify=TLS) as c:
                asked = c.post(
                    "/v1/gate",
                    json={"tool_name": "pay_vendor", "tool_args": {"amount": 60000}},
                    headers={"Authorization": f"Bearer {cfg.AGENT}"},
                ).json()
            request_id = asked["request"]["id"]
            assert stalled.wait(20), "the first replica never got to sending the card"
            time.sleep(outbox.LEASE.total_seconds())  # a live sender keeps its claim
            assert _mails(smtp, request_id) == []
            first.kill()  # SIGKILL, mid-delivery: its claim's lease is all that is left
            killed = time.monotonic()
        wait_until(lambda: _mails(smtp, request_id), timeout=RECLAIMED_WITHIN + 15)
        reclaimed = time.monotonic() - killed
        print(f"\nreclaimed {reclaimed:.1f} s after the kill")  # noqa: T201
        assert reclaimed < RECLAIMED_WITHIN
        time.sleep(1)  # every recipient's mail, once each
        recipients = [m.to for m in _mails(smtp, request_id)]
        assert recipients and len(recipients) == len(set(recipients)), recipients
    finally:
        second.stop()
        first.stop()
        smtp.stop()
