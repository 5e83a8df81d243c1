"""What the decision log costs per answer, in process: CPU of the call, and of its row.

.venv/bin/python -m bench.decision_log_cost [--db sqlite|postgres|both] [--calls 3000]

`POST /v1/gate`'s answer function (`gate.api.v1.gate_answer`, which both of its routes run)
is called `--calls` times for an un-gated call with the decision log off, then on; then the
log's writer writes the buffered answers as it does once a window. Printed: CPU per call
(process time, so the figures hold on a busy machine better than wall time) for the call
with and without the log, and the writer's CPU per row. No network, no uvicorn: what the
log adds and nothing else (`bench.call_cost` has the real server).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from bench._common import database, machine, pg_admin_url
from gate.api import v1
from gate.base.notify import Notifier
from gate.config.features import DecisionLogSettings
from gate.decisions.decision_log import DecisionLog
from gate.decisions.service import GateService
from gate.identity.auth import Principal
from gate.inputs.bodies import GateCall
from gate.policy.rules import Policy
from gate.store.db import Database
from tests.support import config as cfg

AGENT = Principal("billing-agent", "agent")


def cpu_per_call(service: GateService, calls: list[GateCall]) -> float:
    """Microseconds of process CPU per `gate_answer` call."""

    async def answer_all() -> None:
        for call in calls:
            await v1.gate_answer(service, call, AGENT)

    started = time.process_time()
    asyncio.run(answer_all())
    return (time.process_time() - started) * 1e6 / len(calls)


def run(kind: str, n: int) -> dict[str, Any]:
    """The three figures for one database, best of three rounds each."""
    with database(kind) as url:
        settings = cfg.make_settings(url)
        db = Database(url)
        service = GateService(
            settings=settings, db=db, policy=Policy(settings), notifier=Notifier()
        )
        log = DecisionLog(db=db, settings=DecisionLogSettings(), revision="bench")
        calls = [
            GateCall(tool_name="read_file", tool_args={"path": f"/srv/{i}.txt", "lines": 40})
            for i in range(n)
        ]
        off, on, write = [], [], []
        for _ in range(3):
            service.decision_log = None
            off.append(cpu_per_call(service, calls))
            service.decision_log = log
            on.append(cpu_per_call(service, calls))
            started = time.process_time()
            assert log.flush() == n
            write.append((time.process_time() - started) * 1e6 / n)
        db.dispose()
    return {"off": min(off), "on": min(on), "write": min(write)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    print(machine(), time.strftime("%Y-%m-%d %H:%M"))
    kinds = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    for kind in kinds:
        if kind == "postgres" and not pg_admin_url():
            print("[postgres] skipped: set GATE_BENCH_POSTGRES_URL")
            continue
        found = run(kind, args.calls)
        print(
            f"[{kind}] un-gated answer: {found['off']:.1f} us CPU with the log off, "
            f"{found['on']:.1f} us on; the writer: {found['write']:.1f} us per row "
            f"(a window's batch of {args.calls})"
        )


if __name__ == "__main__":
    main()
