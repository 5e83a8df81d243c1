"""Resident memory per parked long-poll on one `gate serve`, against uvicorn's own floor.

Goal (issue 17): a parked `GET /v1/requests/{id}/wait` costs <= 12 KB resident per waiter
(<= 225 MB at 10,000). The floor, measured in the same run, is what one parked connection
costs before any of gate's code runs: a raw ASGI app that parks on one future and one timer,
served by the same uvicorn configuration (`bench/_floor.py`). Each figure is the median of
`--repeat` fresh servers.

    .venv/bin/python -m bench.waiters_memory [--db sqlite|postgres] [--waiters 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

import httpx

from bench._common import database, machine, raise_fd_limit, raw_get, rss_mb, server
from bench._floor import floor_server
from bench.decision_latency import OPEN_BATCH, open_count
from tests.support import config as cfg

GOAL_KB = 12.0


async def hold(
    port: int, pid: int, path: str, n: int, count: Callable[[], Awaitable[int]]
) -> tuple[float, float]:
    """RSS (MB) before, and with `n` requests of `path` parked (`count` says how many are)."""
    await count()  # warm whatever answers the count before the idle reading
    idle = rss_mb(pid)
    writers = []
    for start in range(0, n, OPEN_BATCH):
        for _ in range(min(OPEN_BATCH, n - start)):
            _reader, writer = await raw_get("127.0.0.1", port, path, cfg.AGENT)
            writers.append(writer)
        await asyncio.sleep(0.05)
    deadline = time.monotonic() + 120
    while await count() < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {await count()} of {n} parked")
        await asyncio.sleep(0.2)
    await asyncio.sleep(1)
    held = rss_mb(pid)
    for writer in writers:
        writer.close()
    return idle, held


async def hold_gate(url: str, port: int, pid: int, n: int) -> tuple[float, float]:
    """`hold` on gate: `n` long-polls of one pending request."""
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        r = await client.post(
            "/v1/gate",
            json={"tool_name": "ask_memory", "tool_args": {}},
            headers={"Authorization": f"Bearer {cfg.AGENT}"},
        )
        request_id = r.json()["request"]["id"]
        path = f"/v1/requests/{request_id}/wait?timeout=110"
        return await hold(port, pid, path, n, lambda: open_count(client))


async def hold_floor(url: str, port: int, pid: int, n: int) -> tuple[float, float]:
    """`hold` on the floor server."""
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:

        async def parked() -> int:
            return int((await client.get("/count")).text)

        return await hold(port, pid, "/park", n, parked)


def per_waiter_kb(idle: float, held: float, n: int) -> float:
    return (held - idle) * 1024 / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--waiters", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    n = args.waiters
    print(machine(), f"| open files {raise_fd_limit()}")
    floors, gates, totals = [], [], []
    for _ in range(args.repeat):
        with floor_server(n + 100) as (url, port, pid):
            idle, held = asyncio.run(hold_floor(url, port, pid, n))
        floors.append(per_waiter_kb(idle, held, n))
        with (
            database(args.db) as db_url,
            server(db_url, max_wait_seconds=120, max_connections=n + 100) as proc,
        ):
            assert proc.proc is not None
            idle, held = asyncio.run(hold_gate(proc.url, proc.port, proc.proc.pid, n))
        gates.append(per_waiter_kb(idle, held, n))
        totals.append(held)
        print(
            f"  run: floor +{floors[-1]:.1f} KB; gate idle {idle:.0f} MB, "
            f"{held:.0f} MB with {n} waiting (+{gates[-1]:.1f} KB per waiter)"
        )
    floor, per, total = (statistics.median(x) for x in (floors, gates, totals))
    verdict = "meets" if per <= GOAL_KB else "misses"
    print(
        f"[{args.db}] {n} parked long-polls, median of {args.repeat}: +{per:.1f} KB per waiter "
        f"({total:.0f} MB resident); uvicorn's floor +{floor:.1f} KB per parked connection, "
        f"so gate adds {per - floor:.1f} KB; {verdict} the {GOAL_KB:g} KB goal"
    )


if __name__ == "__main__":
    main()
