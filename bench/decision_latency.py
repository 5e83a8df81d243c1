"""From a decision POST returning to every waiter's answer, with N waiters on one replica.

N hooks long-poll one request on one `gate serve`; a decision is posted; each waiter's time
is from the moment the POST returned to the moment its response was complete. Baseline in
the same run: one loopback HTTP round trip to /healthz plus one committed single-row UPDATE
on the same database. Goal: p99 within 3x that floor at 1,000 waiters. For scale, the same
fan-out is measured first from two floors (`bench/_floor.py`): a bare ASGI app under the same
server (what answering N parked connections costs before any of gate's code runs), and one
asyncio process writing ready-made answers straight to its sockets (what answering N
connections costs in Python at all, with this client reading them on the same cores). The
server's CPU time from the POST's sending to the last answer is printed with each.

    .venv/bin/python -m bench.decision_latency [--db sqlite|postgres|both] [--waiters 1000 10000]
        [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench._common import (
    database,
    healthz_round_trip_ms,
    machine,
    percentile,
    pg_admin_url,
    raise_fd_limit,
    raw_get,
    read_status,
    server,
    update_commit_ms,
)
from bench._floor import floor_server
from tests.support import config as cfg

#: connections opened at once; uvicorn's listen backlog is 2048
OPEN_BATCH = 500


async def open_waiters(port: int, path: str, n: int) -> list[asyncio.Task[tuple[int, float]]]:
    """Open `n` long-polls of `path` and return tasks that finish with (status, arrival time)."""

    async def one() -> tuple[int, float]:
        reader, writer = await raw_get("127.0.0.1", port, path, cfg.AGENT)
        status = await read_status(reader)
        arrived = time.perf_counter()
        writer.close()
        return status, arrived

    tasks = []
    for start in range(0, n, OPEN_BATCH):
        tasks += [asyncio.create_task(one()) for _ in range(min(OPEN_BATCH, n - start))]
        await asyncio.sleep(0.05)
    return tasks


async def open_count(client: httpx.AsyncClient) -> int:
    """The server's open long-polls, from /metrics."""
    text = (await client.get("/metrics")).text
    for line in text.splitlines():
        if line.startswith("gate_open_waiters "):
            return int(float(line.split()[1]))
    return -1


@dataclass(frozen=True, order=True)
class Figures:
    """One run: p50 and p99 from the POST's return, p99 from its sending (ms), and the
    server's CPU time from the POST's sending to the last answer (ms, user + system)."""

    p50: float
    p99: float
    sent99: float
    server_cpu: float


def cpu_ms(pid: int) -> float:
    """User + system CPU time a process has used so far, in ms (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


async def fan_out(
    port: int,
    pid: int,
    path: str,
    n: int,
    count: Callable[[], Awaitable[int]],
    trigger: Callable[[], Awaitable[None]],
) -> Figures:
    """Park `n` requests of `path` (`count` says how many are), `trigger` their answer (the
    POST that answers them, awaited to its return), and time every answer."""
    tasks = await open_waiters(port, path, n)
    deadline = time.monotonic() + 120
    while await count() < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {await count()} of {n} waiters registered")
        await asyncio.sleep(0.2)
    await asyncio.sleep(0.5)  # let the registration reads finish
    cpu_before = cpu_ms(pid)
    sent = time.perf_counter()
    await trigger()
    returned = time.perf_counter()
    results = await asyncio.gather(*tasks)
    server_cpu = cpu_ms(pid) - cpu_before
    bad = [s for s, _ in results if s != 200]
    if bad:
        raise SystemExit(f"{len(bad)} waiters failed: {bad[:5]}")
    # Waiters can be answered before the POST itself returns: those count as 0 from the
    # POST's return; the from-send p99 is printed alongside.
    latencies = [max(0.0, arrived - returned) * 1000 for _, arrived in results]
    from_sent = [(arrived - sent) * 1000 for _, arrived in results]
    return Figures(
        percentile(latencies, 50), percentile(latencies, 99), percentile(from_sent, 99), server_cpu
    )


async def measure(url: str, port: int, pid: int, n: int) -> Figures:
    """`n` waiters on one request of gate, answered by its decision."""
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        r = await client.post(
            "/v1/gate",
            json={"tool_name": "ask_bench", "tool_args": {"n": n}},
            headers={"Authorization": f"Bearer {cfg.AGENT}"},
        )
        request_id = r.json()["request"]["id"]

        async def decide() -> None:
            r = await client.post(
                f"/v1/requests/{request_id}/decision",
                json={"verdict": "approve"},
                headers={"Authorization": f"Bearer {cfg.ALICE}"},
            )
            assert r.status_code == 200, r.text

        path = f"/v1/requests/{request_id}/wait?timeout=60"
        return await fan_out(port, pid, path, n, lambda: open_count(client), decide)


async def measure_floor(url: str, port: int, pid: int, n: int) -> Figures:
    """`n` parked requests of a bare app under the same server, answered by one POST."""
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:

        async def parked() -> int:
            return int((await client.get("/count")).text)

        async def release() -> None:
            await client.post("/release")

        return await fan_out(port, pid, "/park", n, parked, release)


def report(label: str, n: int, runs: list[Figures], floor: float | None) -> None:
    """Each run when there are several, then the medians (against the 3x goal with `floor`)."""
    for one in runs if len(runs) > 1 else ():
        print(
            f"[{label}] {n:>6} waiters, one run: p50 {one.p50:.1f}  p99 {one.p99:.1f}"
            f"  from sent {one.sent99:.1f} ms; server CPU {one.server_cpu:.0f} ms"
        )
    p50, p99, sent99, cpu = (
        statistics.median(getattr(r, f) for r in runs)
        for f in ("p50", "p99", "sent99", "server_cpu")
    )
    goal = ""
    if floor is not None:
        verdict = "meets" if p99 <= 3 * floor else "misses"
        goal = f"  p99/floor {p99 / floor:.1f}x"
        goal += f" ({verdict} the 3x goal)" if n == 1000 else ""
    print(
        f"[{label}] {n:>6} waiters: p50 {p50:7.1f} ms  p99 {p99:7.1f} ms"
        f"  (p99 from POST sent {sent99:7.1f} ms){goal}; server CPU {cpu:.0f} ms"
        f" ({cpu * 1000 / n:.0f} us per waiter)"
        + (f"  (medians of {len(runs)})" if len(runs) > 1 else "")
    )


def run_floor(sizes: list[int], repeat: int) -> None:
    """The same fan-out from the floors: what answering costs alone."""
    for label, raw in (("raw asyncio", True), ("bare uvicorn app", False)):
        with floor_server(max(sizes) + 100, raw=raw) as (url, port, pid):
            for n in sizes:
                runs = [asyncio.run(measure_floor(url, port, pid, n)) for _ in range(repeat)]
                report(label, n, runs, None)


def run(kind: str, sizes: list[int], repeat: int) -> None:
    """Each size `repeat` times on one server; each figure is the median of the runs."""
    with (
        database(kind) as db_url,
        server(db_url, max_wait_seconds=120, max_connections=max(sizes) + 100) as proc,
    ):
        assert proc.proc is not None
        floor_http = healthz_round_trip_ms(proc.url)
        floor_db = update_commit_ms(db_url)
        floor = floor_http + floor_db
        print(
            f"[{kind}] floor: /healthz round trip {floor_http:.2f} ms + committed UPDATE "
            f"{floor_db:.2f} ms = {floor:.2f} ms"
        )
        for n in sizes:
            runs = [
                asyncio.run(measure(proc.url, proc.port, proc.proc.pid, n)) for _ in range(repeat)
            ]
            report(kind, n, runs, floor)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--waiters", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=1, help="runs per size; medians printed")
    args = parser.parse_args()
    limit = raise_fd_limit()
    print(machine(), f"| open files {limit}")
    kinds = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    if "postgres" in kinds and not pg_admin_url():
        print("(no GATE_BENCH_POSTGRES_URL: PostgreSQL skipped)")
        kinds.remove("postgres")
    run_floor(args.waiters, args.repeat)
    for kind in kinds:
        run(kind, args.waiters, args.repeat)


if __name__ == "__main__":
    main()
