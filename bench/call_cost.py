"""What each call costs gate: server CPU against /healthz, SQL per call, memory per waiter.

.venv/bin/python -m bench.call_cost [--db sqlite|postgres|both] [--calls 1000] [--waiters 2000]
    [--seconds 5] [--clients 32] [--servers 3] [--decision-log on|off] [--tracing]

For each database, against one real `gate serve` (calls one at a time on a kept-alive
connection, in blocks that take turns with the other rows' blocks, the server's CPU read
from /proc before and after each block), it prints each row of the table in issue 17 next
to its goal:

* server CPU per call as a ratio to `GET /healthz` on the same server in the same run, the
  median over `--servers` server processes (with its range);
* SQL statements and transactions per call (counted with `tests.support.sql_counter` on the
  same kind of database, through the same use cases the routes call);
* asks per second at concurrency 32 (`bench.submit_throughput.rate`), as a share of the
  same server's `/healthz` rate at the same concurrency;
* resident memory per parked `GET .../wait`, from /proc with that many long-polls open;
* for context, ask and decision CPU on a second server with no channel configured (a new
  user's default, cards on the web page only): the goal rows above include the log
  channel's card for every change;
* for context, what a server with the default settings costs doing nothing (its expiry
  sweep and outbox pump each run every second, on every replica), in ms of CPU per second.

With `--tracing` it prints instead the CPU rows on servers with tracing off and on, taking
turns (`--servers` of each): on, each server exports every span over OTLP/HTTP to a loopback
receiver in this process (`OTEL_EXPORTER_OTLP_ENDPOINT`, the batch processor's defaults), so
the figure includes building, batching, encoding and sending the spans (docs/tracing.md).

Figures, not pass/fail: the test suite counts statements; timings and memory belong here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from bench._common import database, machine, pg_admin_url, raise_fd_limit, raw_get, rss_mb, server
from bench.submit_throughput import rate
from tests.support import config as cfg

TICKS = os.sysconf("SC_CLK_TCK")
AGENT = {"Authorization": f"Bearer {cfg.AGENT}"}
ALICE = {"Authorization": f"Bearer {cfg.ALICE}"}

#: (row, goal as a ratio to /healthz, goal for statements, goal for transactions)
GOALS = {
    "POST /v1/gate, no rule": (3.0, 0, 0),
    "POST /v1/gate that asks": (6.0, 8, 1),
    "POST .../decision": (8.0, 8, 1),
}
#: a three-stage chain (issue 32): alice, then bob, then carol, one approval each; measured
#: as one row of three decisions (no goal yet: a figure to report)
CHAIN_RULE: dict[str, object] = {
    "name": "chain-of-three",
    "tools": ["chain3_*"],
    "timeout": "10m",
    "stages": [{"approvers": ["alice"]}, {"approvers": ["bob"]}, {"approvers": ["carol"]}],
}
CHAIN_ROW = "3-stage decision (3 POSTs)"
CHAIN_TOKENS = [
    ALICE,
    {"Authorization": f"Bearer {cfg.BOB}"},
    {"Authorization": f"Bearer {cfg.CAROL}"},
]
KB_PER_WAITER_GOAL = 12.0
#: asks at concurrency 32, as a share of /healthz at the same concurrency
THROUGHPUT_GOAL = 0.60


#: the calls of each row are made in this many blocks, interleaved with the other rows
ROUNDS = 10
#: the decision log's window in these runs (`--decision-log on`): short, so the batch of a
#: block's answers is written before the block's CPU is read (`SETTLE`)
LOG_WINDOW = 0.1
#: after a block, before its CPU is read: a card sent after the last answer, and the decision
#: log's batch of the block's answers, belong to this block
SETTLE = 2 * LOG_WINDOW


def cpu_seconds(pid: int) -> float:
    """CPU time of a process so far (all its threads): from each thread's schedstat in
    nanoseconds where the kernel keeps it, else from /proc/<pid>/stat in clock ticks."""
    tasks = Path(f"/proc/{pid}/task")
    try:
        return sum(int((t / "schedstat").read_text().split()[0]) for t in tasks.iterdir()) / 1e9
    except (FileNotFoundError, ProcessLookupError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS


def cpu_of_block(pid: int, calls: range, one: Callable[[int], None]) -> float:
    """Server CPU seconds spent on `one(i)` for each i in `calls`."""
    before = cpu_seconds(pid)
    for i in calls:
        one(i)
    time.sleep(SETTLE)
    return cpu_seconds(pid) - before


def measure_cpu(url: str, pid: int, calls: int, *, chains: bool = True) -> dict[str, float]:
    """ms of server CPU per call for each row (without the three-stage row when `chains` is
    false: a server of a checkout from before approval chains has no such rule).

    The rows take turns: `ROUNDS` rounds, each a block of every row's calls, so a machine
    that drifts during the run (another tenant, a frequency change) moves /healthz with the
    calls it divides instead of favouring whichever row ran in a quiet minute.
    """
    with httpx.Client(base_url=url, timeout=30) as c:

        def healthz(_: int) -> None:
            c.get("/healthz").raise_for_status()

        def ungated(i: int) -> None:
            body = {"tool_name": "read_file", "tool_args": {"i": i}}
            assert c.post("/v1/gate", json=body, headers=AGENT).json()["decision"] == "allow"

        def asking(i: int) -> None:
            body = {"tool_name": "ask_cost", "tool_args": {"i": i}}
            assert c.post("/v1/gate", json=body, headers=AGENT).json()["decision"] == "ask"

        pending = [
            c.post(
                "/v1/gate", json={"tool_name": "ask_decide", "tool_args": {"i": i}}, headers=AGENT
            ).json()["request"]["id"]
            for i in range(calls + 1)
        ]

        def decide(i: int) -> None:
            r = c.post(
                f"/v1/requests/{pending[i]}/decision", json={"verdict": "approve"}, headers=ALICE
            )
            assert r.status_code == 200, r.text

        def chained(i: int) -> str:
            body = {"tool_name": "chain3_pay", "tool_args": {"i": i}}
            answer = c.post("/v1/gate", json=body, headers=AGENT).json()
            assert answer.get("request") is not None, answer
            return str(answer["request"]["id"])

        chain_ids = [chained(i) for i in range(calls + 1)] if chains else []

        def decide_chain(i: int) -> None:
            for token in CHAIN_TOKENS:
                r = c.post(
                    f"/v1/requests/{chain_ids[i]}/decision",
                    json={"verdict": "approve"},
                    headers=token,
                )
                assert r.status_code == 200, r.text
            assert r.json()["status"] == "approved"

        rows: dict[str, Callable[[int], None]] = {
            "GET /healthz": healthz,
            "POST /v1/gate, no rule": ungated,
            "POST /v1/gate that asks": asking,
            "POST .../decision": decide,
        }
        if chains:
            rows[CHAIN_ROW] = decide_chain
        for one in rows.values():  # warm each route
            one(calls)
        spent = dict.fromkeys(rows, 0.0)
        per_round = max(1, calls // ROUNDS)
        for n in range(ROUNDS):
            block = range(n * per_round, (n + 1) * per_round)
            for row, one in rows.items():
                spent[row] += cpu_of_block(pid, block, one)
        return {row: seconds * 1000 / (per_round * ROUNDS) for row, seconds in spent.items()}


def measure_sql(db_url: str) -> dict[str, tuple[int, int]]:
    """(statements, transactions) per call, through the use cases the routes run."""
    from gate.base.notify import Notifier
    from gate.base.statuses import Verdict
    from gate.config.settings import Settings
    from gate.decisions import deciding
    from gate.decisions.acting import Actor
    from gate.decisions.service import GateService
    from gate.identity.auth import Principal
    from gate.inputs.bodies import GateCall
    from gate.policy.rules import Policy
    from gate.store.db import Database
    from tests.support.sql_counter import counting

    data = cfg.settings_data(db_url)
    data["rules"] = [CHAIN_RULE, *data["rules"]]
    settings = Settings(**data)
    db = Database(db_url)
    service = GateService(settings=settings, db=db, policy=Policy(settings), notifier=Notifier())
    service.configured_channels = settings.channels.configured()
    agent = Principal("billing-agent", "agent")
    alice = settings.approver("alice")
    assert alice is not None
    try:
        with counting(db.engine) as ungated:
            service.submit(GateCall(tool_name="read_file", tool_args={}), agent)
        with counting(db.engine) as ask:
            view = service.submit(GateCall(tool_name="ask_sql", tool_args={}), agent).view
        assert view is not None
        with counting(db.engine) as decide:
            deciding.decide(service, view.id, Actor.of_approver(alice, "api"), Verdict.approve)
        chained = service.submit(GateCall(tool_name="chain3_pay", tool_args={}), agent).view
        assert chained is not None
        with counting(db.engine) as chain:
            for name in ("alice", "bob", "carol"):
                person = settings.approver(name)
                assert person is not None
                result = deciding.decide(
                    service, chained.id, Actor.of_approver(person, "api"), Verdict.approve
                )
                assert result.changed, result.message()
    finally:
        db.dispose()
    return {
        "POST /v1/gate, no rule": (ungated.count, ungated.transactions),
        "POST /v1/gate that asks": (ask.count, ask.transactions),
        "POST .../decision": (decide.count, decide.transactions),
        CHAIN_ROW: (chain.count, chain.transactions),
    }


async def kb_per_waiter(url: str, port: int, pid: int, waiters: int) -> float:
    """Resident KB each parked long-poll adds, with `waiters` open on one request."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        r = await client.post(
            "/v1/gate", json={"tool_name": "ask_wait", "tool_args": {}}, headers=AGENT
        )
        request_id = r.json()["request"]["id"]
        await asyncio.sleep(0.5)
        idle = rss_mb(pid)
        writers = []
        for _ in range(waiters):
            _reader, writer = await raw_get(
                "127.0.0.1", port, f"/v1/requests/{request_id}/wait?timeout=50", cfg.AGENT
            )
            writers.append(writer)
        await asyncio.sleep(3)  # let the server read every request and park it
        held = rss_mb(pid)
        for writer in writers:
            writer.close()
    return (held - idle) * 1024 / waiters


def throughput(url: str, seconds: float, clients: int) -> tuple[float, float]:
    """(/healthz per second, asks per second) with `clients` concurrent connections, each
    measured over `seconds` in one-second windows that take turns (as the CPU rows do)."""
    asyncio.run(rate(url, 1, clients, False))  # warm up
    windows = max(1, round(seconds))
    health = asks = 0.0
    for _ in range(windows):
        health += asyncio.run(rate(url, seconds / windows, clients, False))
        asks += asyncio.run(rate(url, seconds / windows, clients, True))
    return health / windows, asks / windows


#: how long `idle_cpu` watches a server doing nothing, after it settles for a second
IDLE_SECONDS = 5.0


def idle_cpu(db_url: str) -> float:
    """ms of CPU per second a server with the default settings spends with no calls."""
    with server(db_url, channels={}) as proc:
        assert proc.proc is not None
        time.sleep(1.0)
        before = cpu_seconds(proc.proc.pid)
        time.sleep(IDLE_SECONDS)
        return (cpu_seconds(proc.proc.pid) - before) * 1000 / IDLE_SECONDS


def print_goal_rows(cpu_runs: list[dict[str, float]], sql: dict[str, tuple[int, int]]) -> None:
    """The goal rows: per row the median over `cpu_runs` of its ms and of its ratio to
    /healthz in the same run, with that ratio's range."""
    health = statistics.median(run["GET /healthz"] for run in cpu_runs)
    print(f"  {'call':<26} {'CPU ms':>7} {'x healthz':>10} {'goal':>6} {'SQL':>5} {'txn':>4}")
    print(f"  {'GET /healthz':<26} {health:>7.2f} {1.0:>10.1f}")
    for row, (goal, goal_sql, goal_txn) in GOALS.items():
        statements, transactions = sql[row]
        ratios = [run[row] / run["GET /healthz"] for run in cpu_runs]
        ratio = statistics.median(ratios)
        verdict = "ok" if ratio <= goal and statements <= goal_sql else "MISS"
        ms = statistics.median(run[row] for run in cpu_runs)
        print(
            f"  {row:<26} {ms:>7.2f} {ratio:>10.1f} {f'<={goal:g}x':>6} "
            f"{statements:>5} {transactions:>4}  (goal <= {goal_sql} in {goal_txn}) {verdict}"
            f"  [{min(ratios):.1f}-{max(ratios):.1f}x]"
        )


def run(kind: str, calls: int, waiters: int, seconds: float, clients: int, servers: int) -> None:
    """Print every row for one database."""
    with database(kind) as db_url:
        sql = measure_sql(db_url)
        with server(
            db_url,
            rules=[CHAIN_RULE],
            max_wait_seconds=60,
            max_connections=waiters + 100,
            sweep_interval_seconds=5,
        ) as proc:
            assert proc.proc is not None
            pid = proc.proc.pid
            cpu_runs = [measure_cpu(proc.url, pid, calls)]
            health_rate, ask_rate = throughput(proc.url, seconds, clients)
            per_waiter = asyncio.run(kb_per_waiter(proc.url, proc.port, pid, waiters))
        # The same calls on more server processes: one process's figures move with where its
        # threads and the database's land on the cores, and with the minute it ran in
        # (pyperf spreads its runs over worker processes for the same reason).
        for _ in range(servers - 1):
            with server(
                db_url, rules=[CHAIN_RULE], max_wait_seconds=60, sweep_interval_seconds=5
            ) as again:
                assert again.proc is not None
                cpu_runs.append(measure_cpu(again.url, again.proc.pid, calls))
        # Context, not a goal row: the same calls on a server with no chat channel (a new
        # user's default: cards on the web page only), so no card is sent per change.
        with server(
            db_url, channels={}, rules=[CHAIN_RULE], max_wait_seconds=60, sweep_interval_seconds=5
        ) as bare:
            assert bare.proc is not None
            quiet = measure_cpu(bare.url, bare.proc.pid, calls)
        idle = idle_cpu(db_url)
    print(
        f"\n[{kind}] {calls} calls each, one at a time, on {len(cpu_runs)} server processes; "
        "server CPU per call (medians, the ratio's range in brackets)"
    )
    print_goal_rows(cpu_runs, sql)
    chain_ms = statistics.median(run[CHAIN_ROW] for run in cpu_runs)
    chain_ratio = statistics.median(run[CHAIN_ROW] / run["GET /healthz"] for run in cpu_runs)
    statements, transactions = sql[CHAIN_ROW]
    print(
        f"  {CHAIN_ROW:<26} {chain_ms:>7.2f} {chain_ratio:>10.1f} {'-':>6} "
        f"{statements:>5} {transactions:>4}  (no goal: three decisions, one per stage)"
    )
    quiet_base = quiet["GET /healthz"]
    print(
        "  with no channel (cards on the web page only): "
        + ", ".join(
            f"{row.split()[-1]} {quiet[row]:.2f} ms ({quiet[row] / quiet_base:.1f}x)"
            for row in ("POST /v1/gate that asks", "POST .../decision")
        )
    )
    print(f"  idle, default settings: {idle:.1f} ms of CPU per second ({idle / 10:.1f}% of a core)")
    share = ask_rate / health_rate if health_rate else float("nan")
    verdict = "ok" if share >= THROUGHPUT_GOAL else "MISS"
    print(
        f"  asks at concurrency {clients}: {ask_rate:.0f}/s = {share:.0%} of /healthz "
        f"{health_rate:.0f}/s (goal >= {THROUGHPUT_GOAL:.0%}) {verdict}"
    )
    verdict = "ok" if per_waiter <= KB_PER_WAITER_GOAL else "MISS"
    print(
        f"  parked GET .../wait: +{per_waiter:.1f} KB resident each at {waiters} "
        f"(goal <= {KB_PER_WAITER_GOAL:g} KB) {verdict}"
    )


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver that reads each export and answers 200, keeping nothing."""

    received = 0  # bytes of spans, over every export

    def do_POST(self) -> None:
        size = int(self.headers.get("Content-Length", "0"))
        _Collector.received += len(self.rfile.read(size))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@contextmanager
def collector() -> Iterator[str]:
    """A loopback OTLP/HTTP receiver's base URL, for as long as the block runs."""
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{receiver.server_address[1]}"
    finally:
        receiver.shutdown()
        receiver.server_close()


def run_tracing(kind: str, calls: int, servers: int) -> None:
    """The CPU rows with tracing off and on, on servers taking turns."""
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    with database(kind) as db_url, collector() as endpoint:
        traced = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
        for _ in range(servers):
            for on in (False, True):
                with server(
                    db_url,
                    env=traced if on else None,
                    max_wait_seconds=60,
                    sweep_interval_seconds=5,
                ) as proc:
                    assert proc.proc is not None
                    runs[on].append(measure_cpu(proc.url, proc.proc.pid, calls))
    print(
        f"\n[{kind}] tracing off and on, {calls} calls each on {servers}+{servers} servers "
        f"(server CPU per call, medians; {_Collector.received / 1e6:.1f} MB of spans exported)"
    )
    health = statistics.median(run["GET /healthz"] for run in runs[False])
    print(f"  {'call':<26} {'off ms':>7} {'on ms':>7} {'+ms':>6} {'+%':>5} {'on x healthz':>13}")
    for row in ("GET /healthz", *GOALS):
        off = statistics.median(run[row] for run in runs[False])
        on = statistics.median(run[row] for run in runs[True])
        print(
            f"  {row:<26} {off:>7.2f} {on:>7.2f} {on - off:>6.2f} {(on / off - 1):>5.0%} "
            f"{on / health:>13.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--waiters", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=5, help="per throughput run")
    parser.add_argument("--clients", type=int, default=32, help="for the throughput row")
    parser.add_argument(
        "--servers", type=int, default=3, help="server processes the CPU rows are measured on"
    )
    parser.add_argument(
        "--decision-log",
        choices=["on", "off"],
        default="on",
        help="record every answer (the default) or not ([decision_log] enabled)",
    )
    parser.add_argument(
        "--tracing", action="store_true", help="the CPU rows with tracing off and on, only"
    )
    args = parser.parse_args()
    # the servers are child processes: they read these as their settings
    os.environ["GATE_DECISION_LOG__ENABLED"] = "true" if args.decision_log == "on" else "false"
    os.environ["GATE_DECISION_LOG__FLUSH_SECONDS"] = str(LOG_WINDOW)
    print(machine(), f"| open files {raise_fd_limit()}", time.strftime("%Y-%m-%d %H:%M"))
    kinds = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    for kind in kinds:
        if kind == "postgres" and not pg_admin_url():
            print("\n[postgres] skipped: set GATE_BENCH_POSTGRES_URL")
            continue
        if args.tracing:
            run_tracing(kind, args.calls, args.servers)
        else:
            run(kind, args.calls, args.waiters, args.seconds, args.clients, args.servers)


if __name__ == "__main__":
    main()
