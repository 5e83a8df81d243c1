"""Resident memory of one `gate serve` holding 10,000 open long-polls. Goal: under 300 MB.

.venv/bin/python -m bench.waiters_memory [--db sqlite|postgres] [--waiters 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx

from bench._common import database, machine, raise_fd_limit, raw_get, rss_mb, server
from bench.decision_latency import OPEN_BATCH, open_count
from tests.support import config as cfg


async def hold(url: str, port: int, pid: int, n: int) -> tuple[float, float]:
    """RSS (MB) idle with one request pending, and with `n` long-polls open on it."""
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        r = await client.post(
            "/v1/gate",
            json={"tool_name": "ask_memory", "tool_args": {}},
            headers={"Authorization": f"Bearer {cfg.AGENT}"},
        )
        request_id = r.json()["request"]["id"]
        await open_count(client)  # warm the metrics path before the idle reading
        idle = rss_mb(pid)
        writers = []
        for start in range(0, n, OPEN_BATCH):
            for _ in range(min(OPEN_BATCH, n - start)):
                _reader, writer = await raw_get(
                    "127.0.0.1", port, f"/v1/requests/{request_id}/wait?timeout=110", cfg.AGENT
                )
                writers.append(writer)
            await asyncio.sleep(0.05)
        deadline = time.monotonic() + 120
        while await open_count(client) < n:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {await open_count(client)} of {n} registered")
            await asyncio.sleep(0.2)
        await asyncio.sleep(1)
        held = rss_mb(pid)
        for writer in writers:
            writer.close()
    return idle, held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--waiters", type=int, default=10_000)
    args = parser.parse_args()
    print(machine(), f"| open files {raise_fd_limit()}")
    with (
        database(args.db) as db_url,
        server(db_url, max_wait_seconds=120, max_connections=args.waiters + 100) as proc,
    ):
        assert proc.proc is not None
        idle, held = asyncio.run(hold(proc.url, proc.port, proc.proc.pid, args.waiters))
    per = (held - idle) * 1024 / args.waiters
    verdict = "meets" if held < 300 else "misses"
    print(
        f"[{args.db}] RSS idle {idle:.0f} MB; with {args.waiters} open long-polls {held:.0f} MB "
        f"(+{per:.1f} KB per waiter; {verdict} the 300 MB goal)"
    )


if __name__ == "__main__":
    main()
