"""A press in Teams, on loopback: from the signed invoke sent to the invoke answered, and to
the card replaced for everybody (the PUT reaching the fake Bot Connector).

One gate (in-process uvicorn thread, SQLite or PostgreSQL) with only the Teams channel,
pointed at `tests.support.fake_teams.FakeTeams`; each round asks for a call, waits for its
card, then alice presses Approve (a JWT-signed `adaptiveCard/action` invoke). The outbox is
woken by the decision's commit; `outbox_interval_seconds` (0.2 s here) is its fallback poll.

    .venv/bin/python -m bench.teams_click [--db sqlite|postgres] [--rounds 50]
"""

from __future__ import annotations

import argparse
import json
import time

import httpx

from bench._common import database, machine, percentile
from gate.app import create_app
from tests.support.fake_teams import FakeTeams
from tests.support.servers import ThreadServer, wait_until
from tests.teams.conftest import object_id, teams_settings


def run(kind: str, rounds: int) -> None:
    """Print p50/p95/max of click -> answered and click -> PUT received."""
    fake = FakeTeams().start()
    answered: list[float] = []
    replaced: list[float] = []
    with database(kind) as url:
        settings = teams_settings(url, fake)
        gate = ThreadServer(create_app(settings)).start()
        agent = {"Authorization": "Bearer tok-agent-billing"}
        try:
            with httpx.Client(base_url=gate.url, timeout=30) as client:
                for _ in range(rounds):
                    body = {"tool_name": "pay_vendor", "tool_args": {"amount": 60000}}
                    request_id = client.post("/v1/gate", json=body, headers=agent).json()[
                        "request"
                    ]["id"]
                    message = wait_until(
                        lambda rid=request_id: next(
                            (m for m in fake.posted() if rid in json.dumps(m.cards[0])), None
                        )
                    )
                    activity = fake.invoke(
                        verb="approve", data={"request_id": request_id},
                        object_id=object_id("alice"), service_url=fake.url + "/",
                    )  # fmt: skip
                    token = fake.sign(service_url=activity["serviceUrl"])
                    raw = json.dumps(activity).encode()
                    headers = {
                        "Authorization": f"Bearer {token}",
                        "Content-Type": "application/json",
                    }
                    start = time.monotonic()
                    r = client.post("/channels/teams/messages", content=raw, headers=headers)
                    answered.append((time.monotonic() - start) * 1000)
                    assert r.status_code == 200, r.text
                    wait_until(lambda m=message: len(m.cards) > 1, interval=0.001)
                    put = [x for x in fake.recorded("PUT") if message.activity_id in x.path][0]
                    replaced.append((put.at - start) * 1000)
        finally:
            gate.stop()
            fake.stop()
    for name, values in (("click -> invoke answered", answered), ("click -> card PUT", replaced)):
        print(
            f"{kind:8} {name:26} p50 {percentile(values, 50):7.1f} ms  "
            f"p95 {percentile(values, 95):7.1f} ms  max {max(values):7.1f} ms  (n={len(values)})"
        )


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    print(machine())
    run(args.db, args.rounds)


if __name__ == "__main__":
    main()
