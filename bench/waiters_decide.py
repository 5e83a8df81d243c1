"""Deciding and asking while 10,000 agents wait, on one `gate serve` with default settings.

Goal (issue 28, item 7): with 10,000 parked long-polls on one replica and the default
connection settings (the cap follows the open-file limit, a reserve kept for everything but
waiting), an approver's decision is answered in under a second. Each of the waiters is an
agent waiting on its own pending request the way `gate hook` does: it long-polls in slices
of `gate.asking.askflow.WAIT_SLICE` (the server ends each at its own `max_wait_seconds`) on a
kept-alive connection and polls again as soon as a slice ends. Asks and decisions are timed
for `--seconds` (by default the server's cap and half a minute more: every waiter renews its
long-poll at least once meanwhile, the first wave of renewals included); the baseline, from
the same run on the same server, is the same asks and decisions before anyone waits.

    .venv/bin/python -m bench.waiters_decide [--db sqlite|postgres|both] [--waiters 10000]
        [--requests N] [--slice SECONDS] [--seconds SECONDS]

The client (10,000 sockets in one asyncio process) shares the machine's cores with the
server, so its own work is inside every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Callable

import httpx

from bench._common import database, machine, percentile, raise_fd_limit, server
from bench.decision_latency import OPEN_BATCH, open_count
from gate.asking.askflow import WAIT_SLICE
from gate.config.settings import ServerSettings
from tests.support import config as cfg

GOAL_MS = 1000.0
#: decisions and asks timed before anyone waits
SAMPLES = 40
#: pause between two (ask, decision) pairs while the agents wait
PAIR_EVERY = 0.5
#: how long Linux keeps a closed socket's port (TCP_TIMEWAIT_LEN)
TIME_WAIT_SECONDS = 60
#: asks and decisions slower than this are listed with when they came (ms)
SLOW_MS = 250.0
#: gate's own defaults for the background jobs (the test config runs them faster)
DEFAULTS = {"sweep_interval_seconds": 1.0, "outbox_interval_seconds": 1.0}


class Waiters:
    """`n` agents long-polling their own requests until stopped; counts what they got."""

    def __init__(self, port: int, request_ids: list[str], slice_: float) -> None:
        self.port = port
        self.slice = slice_
        self.request_ids = request_ids
        self.stop = asyncio.Event()
        self.statuses: dict[int, int] = {}
        self.tasks: list[asyncio.Task[None]] = []
        #: agents whose connection is open
        self.connected = 0

    async def start(self) -> None:
        """Open the waiters at the pace the server accepts them.

        A burst of 10,000 connects overflows the listen queue (somaxconn) while the server is
        busy, and a dropped SYN is retried only after 1, 3, 7 s...: the next batch waits
        until most of the last one is connected.
        """
        step = OPEN_BATCH // 2
        for start in range(0, len(self.request_ids), step):
            batch = self.request_ids[start : start + step]
            self.tasks += [asyncio.create_task(self._agent(rid)) for rid in batch]
            for _ in range(100):  # at most 10 s
                if self.connected >= 0.9 * len(self.tasks):
                    break
                await asyncio.sleep(0.1)

    async def close(self) -> None:
        self.stop.set()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _agent(self, request_id: str) -> None:
        request = (
            f"GET /v1/requests/{request_id}/wait?timeout={self.slice:g} HTTP/1.1\r\n"
            f"Host: 127.0.0.1\r\nAuthorization: Bearer {cfg.AGENT}\r\n\r\n"
        ).encode()
        writer = None
        while not self.stop.is_set():
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
                    self.connected += 1
                writer.write(request)
                status, close = await _read_answer(reader)
            except (OSError, asyncio.IncompleteReadError):
                status, close = 0, True  # as the hook: reconnect after a pause
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if close and writer is not None:
                writer.close()
                writer = None
                self.connected -= 1
            if status in (0, 503):
                await asyncio.sleep(1)
        if writer is not None:
            writer.close()


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bool]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    await reader.readexactly(int(headers.get("content-length", "0")))
    return int(lines[0].split()[1]), headers.get("connection", "") == "close"


async def ask(client: httpx.AsyncClient, tool: str) -> tuple[str, float]:
    """One ask that creates a pending request: its id and latency (ms)."""
    started = time.perf_counter()
    r = await client.post(
        "/v1/gate",
        json={"tool_name": tool, "tool_args": {"n": os.urandom(4).hex()}},
        headers={"Authorization": f"Bearer {cfg.AGENT}"},
    )
    took = (time.perf_counter() - started) * 1000
    r.raise_for_status()
    return str(r.json()["request"]["id"]), took


async def create(client: httpx.AsyncClient, n: int, concurrency: int = 32) -> list[str]:
    """`n` pending requests, asked `concurrency` at a time."""
    ids: list[str] = []
    for start in range(0, n, concurrency):
        batch = [ask(client, "ask_wait") for _ in range(min(concurrency, n - start))]
        ids += [rid for rid, _ in await asyncio.gather(*batch)]
    return ids


async def decide(client: httpx.AsyncClient, request_id: str) -> float:
    """One approver's decision: its latency (ms)."""
    started = time.perf_counter()
    r = await client.post(
        f"/v1/requests/{request_id}/decision",
        json={"verdict": "approve"},
        headers={"Authorization": f"Bearer {cfg.ALICE}"},
    )
    took = (time.perf_counter() - started) * 1000
    assert r.status_code == 200, r.text
    return took


async def phase(
    client: httpx.AsyncClient,
    *,
    pairs: int = 0,
    seconds: float = 0.0,
    renewals: Callable[[], int] = lambda: 0,
) -> tuple[list[float], list[float]]:
    """Ask, then decide what was asked, `pairs` times or for `seconds`, a little apart.

    Each slow one is printed with its time into the phase, the load, and how many
    long-polls the agents had renewed by then (the renewal wave shows there).
    """
    decisions, asks = [], []
    started = time.monotonic()
    while len(asks) < pairs or time.monotonic() < started + seconds:
        request_id, took = await ask(client, "ask_decide")
        asks.append(took)
        decisions.append(await decide(client, request_id))
        for kind, ms in (("ask", took), ("decision", decisions[-1])):
            if ms > SLOW_MS:
                at, load = time.monotonic() - started, os.getloadavg()[0]
                where = f"at {at:.0f} s, load {load:.1f}, {renewals()} renewed"
                print(f"    slow {kind} {ms:.0f} ms {where}")
        await asyncio.sleep(PAIR_EVERY)
    return decisions, asks


def line(name: str, values: list[float], base: list[float] | None = None) -> str:
    p50, p95, top = statistics.median(values), percentile(values, 95), max(values)
    text = f"{name}: p50 {p50:.1f} ms, p95 {p95:.1f} ms, max {top:.1f} ms"
    if base is not None:
        text += f" ({p50 / statistics.median(base):.1f}x / {p95 / percentile(base, 95):.1f}x)"
    return text


async def run(url: str, port: int, n: int, requests: int, slice_: float, seconds: float) -> None:
    # Kept-alive connections are dropped after 2 s idle: gate closes them after 5 s, and a
    # client reusing one at that moment sees "disconnected without a response".
    limits = httpx.Limits(keepalive_expiry=2.0)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        base_decisions, base_asks = await phase(client, pairs=SAMPLES)
        print("  " + line("baseline decision (no waiters)", base_decisions))
        print("  " + line("baseline ask (no waiters)", base_asks))
        started = time.perf_counter()
        waited = await create(client, requests)
        print(f"  {requests} pending requests created in {time.perf_counter() - started:.1f} s")
        waiters = Waiters(port, [waited[i % requests] for i in range(n)], slice_)
        started = time.perf_counter()
        await waiters.start()
        deadline = time.monotonic() + 300
        while (parked := await open_count(client)) < n:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {parked} of {n} parked ({waiters.statuses})")
            await asyncio.sleep(2)  # a scrape reads the database too: not too often
        print(f"  {n} waiters parked in {time.perf_counter() - started:.1f} s")
        load = os.getloadavg()[0]
        answered = dict(waiters.statuses)
        done = sum(answered.values())
        decisions, asks = await phase(
            client, seconds=seconds, renewals=lambda: sum(waiters.statuses.values()) - done
        )
        renewed = {k: v - answered.get(k, 0) for k, v in waiters.statuses.items()}
        parked = await open_count(client)
        await waiters.close()
    verdict = "meets" if max(decisions) < GOAL_MS else "misses"
    after = os.getloadavg()[0]
    print(f"  {len(decisions)} decisions over {seconds:g} s, load {load:.2f} -> {after:.2f}")
    print("  " + line(f"decision with {n} waiting", decisions, base_decisions))
    print("  " + line(f"ask with {n} waiting", asks, base_asks))
    print(
        f"  long-polls answered meanwhile (renewed): {renewed}; still parked at the end: {parked}"
    )
    print(f"  slowest decision {max(decisions):.0f} ms: {verdict} the {GOAL_MS:g} ms goal")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--waiters", type=int, default=10_000)
    parser.add_argument(
        "--requests", type=int, default=0, help="pending requests they wait on (default: one each)"
    )
    parser.add_argument("--slice", type=float, default=WAIT_SLICE, help="each long-poll's timeout")
    cap = ServerSettings().max_wait_seconds
    parser.add_argument(
        "--seconds", type=float, default=cap + 30, help="how long decisions are timed, waiting"
    )
    args = parser.parse_args()
    print(machine(), f"| open files {raise_fd_limit()} | load {os.getloadavg()}")
    for number, kind in enumerate(["sqlite", "postgres"] if args.db == "both" else [args.db]):
        if number:
            # The agents' 10,000 sockets, closed by this side, sit in TIME_WAIT for 60 s and
            # hold as many of the host's ~28,000 ephemeral ports: the next run's connects
            # would fail with "All connection attempts failed" (it happened).
            time.sleep(TIME_WAIT_SECONDS)
        print(f"[{kind}]")
        with database(kind) as db_url, server(db_url, **DEFAULTS) as proc:
            assert "long-polls may hold" in proc.log(), "not the default connection settings"
            requests = args.requests or args.waiters
            asyncio.run(run(proc.url, proc.port, args.waiters, requests, args.slice, args.seconds))
        print(f"  load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
