"""`POST /v1/gate` creating requests, per second, next to the same server's /healthz rate.

Goal: at least 40% of the /healthz rate, on SQLite and on PostgreSQL.

    .venv/bin/python -m bench.submit_throughput [--seconds 5] [--clients 16]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time

import httpx

from bench._common import database, machine, pg_admin_url, server
from tests.support import config as cfg


async def rate(url: str, seconds: float, clients: int, submit: bool) -> float:
    """Completed calls per second with `clients` concurrent keep-alive connections."""
    counter = itertools.count()
    done = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Authorization": f"Bearer {cfg.AGENT}"}
    async with httpx.AsyncClient(base_url=url, limits=limits, headers=headers) as client:
        stop = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < stop:
                if submit:
                    n = next(counter)
                    body = {"tool_name": "ask_throughput", "tool_args": {"n": n}}
                    r = await client.post("/v1/gate", json=body)
                    assert r.status_code == 200 and r.json()["decision"] == "ask", r.text
                else:
                    r = await client.get("/healthz")
                    assert r.status_code == 200, (r.status_code, r.text)
                done += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        return done / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    print(machine())
    kinds = ["sqlite"] + (["postgres"] if pg_admin_url() else [])
    for kind in kinds:
        with database(kind) as db_url, server(db_url) as proc:
            asyncio.run(rate(proc.url, 1, args.clients, False))  # warm up
            health = asyncio.run(rate(proc.url, args.seconds, args.clients, False))
            created = asyncio.run(rate(proc.url, args.seconds, args.clients, True))
        share = created / health * 100
        verdict = "meets" if share >= 40 else "misses"
        print(
            f"[{kind}] /healthz {health:7.0f}/s   POST /v1/gate (create) {created:6.0f}/s   "
            f"= {share:4.1f}% ({verdict} the 40% goal)"
        )


if __name__ == "__main__":
    main()
