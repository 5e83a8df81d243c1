"""What a history-aware rule costs a call: server CPU and latency of `POST /v1/gate` under one.

.venv/bin/python -m bench.history_cost [--db sqlite|postgres] [--calls 600] [--history 2000]

Runs a real `gate serve` with the standard test policy plus a daily budget placed first
(`history.sum("pay_*", "amount", "24h") + args.amount > 1000000000`: the sum is read, the
call is allowed and written), with `--history` earlier calls of the same token already in the
window. Rows, taking turns in rounds as `bench.call_cost` does:

* `/healthz`: the yardstick;
* an un-gated call no history term touches (`read_file`): what every other call pays;
* a call under the budget rule (`pay_card`): one SELECT over the window, one INSERT.

Prints ms of server CPU per call, the ratio to /healthz, and the median and p95 latency.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import httpx

from bench._common import database, machine, percentile
from bench.call_cost import AGENT, ROUNDS, cpu_of_block
from tests.support import config as cfg
from tests.support.servers import ServerProcess

BUDGET = {
    "name": "daily-budget",
    "tools": ["pay_*"],
    "when": 'history.sum("pay_*", "amount", "24h") + args.amount > 1000000000',
    "approvers": ["group:finance"],
}
PAYMENTS = {"name": "payments", "tools": ["pay_*"], "action": "allow"}


def _seed(db_url: str, rows: int) -> None:
    """`rows` earlier payments of the bench's token within the window, spread over 20 h."""
    from gate.base.statuses import utcnow
    from gate.store import counted
    from gate.store.db import Database

    db = Database(db_url)
    now = utcnow()
    try:
        with db.write_conn() as conn:
            for i in range(rows):
                counted.record(
                    conn,
                    caller="billing-agent",
                    session_id=None,
                    tool_name="pay_card" if i % 2 else "pay_wire",
                    args={"amount": i},
                    request_id=None,
                    at=now - timedelta(seconds=i * 72_000 / max(rows, 1)),
                )
    finally:
        db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--calls", type=int, default=600)
    parser.add_argument("--history", type=int, default=2000)
    args = parser.parse_args()
    print(machine())
    with database(args.db) as db_url, tempfile.TemporaryDirectory() as tmp:
        _seed(db_url, args.history)
        data = cfg.settings_data(db_url, sweep_interval_seconds=5)
        data["rules"] = [BUDGET, PAYMENTS, *data["rules"]]
        path = Path(tmp) / "gate.toml"
        path.write_text(cfg.to_toml(data))
        proc = ServerProcess(path, log_path=Path(tmp) / "serve.log").start(timeout=60)
        try:
            assert proc.proc is not None
            cpu, latency = _measure(proc.url, proc.proc.pid, args.calls)
        finally:
            proc.stop()
    for row, ms in cpu.items():
        waits = latency[row]
        print(
            f"[{args.db}, {args.history} rows in the window] {row}: {ms:.3f} ms CPU, "
            f"{ms / cpu['GET /healthz']:.2f}x /healthz; latency median "
            f"{statistics.median(waits):.2f} ms, p95 {percentile(waits, 95):.2f} ms"
        )


def _measure(url: str, pid: int, calls: int) -> tuple[dict[str, float], dict[str, list[float]]]:
    latency: dict[str, list[float]] = {}
    with httpx.Client(base_url=url, timeout=30) as c:

        def timed(row: str, send: Callable[[], httpx.Response]) -> httpx.Response:
            start = time.perf_counter()
            answer = send()
            latency.setdefault(row, []).append((time.perf_counter() - start) * 1000)
            return answer

        def healthz(_: int) -> None:
            timed("GET /healthz", lambda: c.get("/healthz")).raise_for_status()

        def ungated(i: int) -> None:
            body = {"tool_name": "read_file", "tool_args": {"i": i}}
            sent = timed(UNGATED, lambda: c.post("/v1/gate", json=body, headers=AGENT))
            assert sent.json()["decision"] == "allow"

        def budgeted(i: int) -> None:
            body = {"tool_name": "pay_card", "tool_args": {"amount": 1}}
            sent = timed(BUDGETED, lambda: c.post("/v1/gate", json=body, headers=AGENT))
            assert sent.json()["decision"] == "allow", sent.text

        rows: dict[str, Callable[[int], None]] = {
            "GET /healthz": healthz,
            UNGATED: ungated,
            BUDGETED: budgeted,
        }
        for one in rows.values():  # warm each route
            one(0)
        latency.clear()
        spent = dict.fromkeys(rows, 0.0)
        per_round = max(1, calls // ROUNDS)
        for n in range(ROUNDS):
            block = range(n * per_round, (n + 1) * per_round)
            for row, one in rows.items():
                spent[row] += cpu_of_block(pid, block, one)
    return {row: s * 1000 / (per_round * ROUNDS) for row, s in spent.items()}, latency


UNGATED = "POST /v1/gate, no history rule"
BUDGETED = "POST /v1/gate under a history.sum rule"


if __name__ == "__main__":
    main()
