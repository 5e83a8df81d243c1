"""Resident memory per parked long-poll on one `gate serve`, against uvicorn's own floor.

Goal (issue 17): a parked `GET /v1/requests/{id}/wait` costs <= 12 KB resident per waiter
(<= 225 MB at 10,000). The floor, measured in the same run, is what one parked connection
costs before any of gate's code runs: a raw ASGI app that parks on one future and one timer,
served by the same uvicorn configuration (`gate.server.server_config`: httptools, the
connection guards). Each figure is the median of `--repeat` fresh servers.

    .venv/bin/python -m bench.waiters_memory [--db sqlite|postgres] [--waiters 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from bench._common import database, machine, raise_fd_limit, raw_get, rss_mb, server
from bench.decision_latency import OPEN_BATCH, open_count
from tests.support import config as cfg

GOAL_KB = 12.0
_FLOOR_READY = "floor listening on "


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


# -- the floor: uvicorn as gate runs it, with an app that only parks ---------------------------


def serve_floor(max_connections: int) -> None:
    """Run the floor server in this process (the benchmark starts it as a child)."""
    from gate.config import Settings
    from gate.server import GateServer, listen, server_config

    parked = 0

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal parked
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b"%d" % parked
        if scope["path"] == "/park":
            loop = asyncio.get_running_loop()
            waiter = loop.create_future()
            timer = loop.call_later(110, waiter.set_result, None)
            parked += 1
            try:
                await waiter
            finally:
                timer.cancel()
                parked -= 1
            body = b"{}"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    data = cfg.settings_data("sqlite://", port=0, max_connections=max_connections)
    sock = listen("127.0.0.1", 0)  # bound first: the port is known before serving
    print(_FLOOR_READY + str(sock.getsockname()[1]), flush=True)
    GateServer(server_config(app, Settings(**data))).run(sockets=[sock])


@contextmanager
def floor_server(max_connections: int) -> Iterator[tuple[str, int, int]]:
    """The floor server as a child process: (url, port, pid)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.waiters_memory", "--serve-floor", str(max_connections)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith(_FLOOR_READY):
            raise SystemExit(f"floor server did not start: {line!r}")
        port = int(line[len(_FLOOR_READY) :])
        yield f"http://127.0.0.1:{port}", port, proc.pid
    finally:
        proc.kill()  # at once: its parked connections would only delay a graceful stop
        proc.wait(timeout=15)


def per_waiter_kb(idle: float, held: float, n: int) -> float:
    return (held - idle) * 1024 / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--waiters", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--serve-floor", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_floor:
        serve_floor(args.serve_floor)
        return
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
