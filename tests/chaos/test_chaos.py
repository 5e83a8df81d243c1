"""Chaos: real replicas SIGKILLed and restarted under load; nothing lost, nothing doubled."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gate.store.db import upgrade
from tests.chaos.harness import Chaos, make_plans
from tests.support import config as cfg
from tests.support.fake_slack import CHANNEL, TOKEN, FakeSlack
from tests.support.servers import ServerProcess

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

#: the seed is printed so a failing run can be replayed with GATE_CHAOS_SEED
SEED = int(os.environ.get("GATE_CHAOS_SEED", "0")) or int.from_bytes(os.urandom(4), "big")


@pytest.fixture
def fake_slack(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSlack]:
    # slack-sdk sends through HTTP(S)_PROXY when set, even to loopback; the servers inherit
    # this environment.
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    fake = FakeSlack().start()
    yield fake
    fake.stop()


def _config(path: Path, db_url: str, slack: FakeSlack) -> Path:
    data = cfg.settings_data(db_url, sweep_interval_seconds=0.2, outbox_interval_seconds=0.2)
    data["channels"]["slack"] = {
        "bot_token": TOKEN,
        "signing_secret": "chaos-signing-secret",
        "default_target": CHANNEL,
        "api_url": slack.api_url,
    }
    path.write_text(cfg.to_toml(data))
    return path


def _run(
    tmp_path: Path,
    db_url: str,
    slack: FakeSlack,
    *,
    replicas: int,
    requests: int,
    kill_every: tuple[float, float],
    capsys: pytest.CaptureFixture[str],
) -> dict[str, int]:
    started = time.monotonic()
    upgrade(db_url)  # once, before any replica starts (they would race to do it otherwise)
    config = _config(tmp_path / "gate.toml", db_url, slack)
    servers = [
        ServerProcess(config, log_path=tmp_path / f"replica{n}.log") for n in range(replicas)
    ]
    try:
        for server in servers:
            server.start()
        chaos = Chaos(servers, db_url, slack, seed=SEED, kill_every=kill_every)
        plans = make_plans(requests, chaos.rng)
        chaos.run(plans, submit_gap=(0.02, 0.12))
        # A replica killed holding outbox leases: those rows wait out the lease (60 s).
        ran = time.monotonic() - started
        chaos.settle(timeout=150)
        counts = chaos.check(plans, lambda: "".join(s.log() for s in servers))
        elapsed = time.monotonic() - started
    finally:
        for server in servers:
            server.stop()
    summary = ", ".join(f"{k}={v}" for k, v in counts.items())
    with capsys.disabled():  # the counts belong in CI's output, pass or fail
        took = f"{ran:.0f} s + {elapsed - ran:.0f} s settling"
        print(f"\nchaos seed={SEED} replicas={replicas} ({took}): {summary}")  # noqa: T201
    assert counts["kills"] >= 1
    return counts


def test_chaos_two_replicas_on_postgres(
    tmp_path: Path, postgres_url: str, fake_slack: FakeSlack, capsys: pytest.CaptureFixture[str]
) -> None:
    _run(
        tmp_path,
        postgres_url,
        fake_slack,
        replicas=2,
        requests=220,
        kill_every=(1.5, 3.5),
        capsys=capsys,
    )


def test_chaos_one_process_on_sqlite(
    tmp_path: Path, sqlite_url: str, fake_slack: FakeSlack, capsys: pytest.CaptureFixture[str]
) -> None:
    _run(
        tmp_path,
        sqlite_url,
        fake_slack,
        replicas=1,
        requests=80,
        kill_every=(2.0, 4.0),
        capsys=capsys,
    )
