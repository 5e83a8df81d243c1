"""Expiry sweep time with 100 due requests, on an empty table and with 1,000,000 finished rows;
and the reminder job's tick with 10,000 requests waiting and nothing to remind.

The sweep's query is `status = 'pending' AND expires_at <= now` on the (status, expires_at)
index, so finished rows must not make it slower. The reminder tick's is `status = 'pending'
AND nudge_at <= now` on (status, nudge_at), so waiting requests whose rules remind nobody
must cost it nothing. Rows are inserted in bulk with SQL.

    .venv/bin/python -m bench.sweep_cost [--rows 1000000] [--waiting 10000]
"""

from __future__ import annotations

import argparse
import time
from datetime import timedelta

import sqlalchemy as sa

from bench._common import database, machine, pg_admin_url
from gate.app import create_app
from gate.base.statuses import utcnow
from gate.delivery import reminders
from tests.support import config as cfg

DUE = 100
COLUMNS = (
    "id, tool_name, tool_args, context, rule, status, approvers, approvals_required, "
    "created_at, expires_at, decided_at, on_timeout"
)


def fill(engine: sa.Engine, rows: int, status: str, expires: str, prefix: str) -> None:
    """Insert `rows` requests in one statement (ids: prefix + zero-padded counter)."""
    pg = engine.dialect.name == "postgresql"
    series = (
        f"SELECT n FROM generate_series(1, {rows}) AS n"
        if pg
        else f"WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {rows}) "
        "SELECT n FROM s"
    )
    pad = "lpad(n::text, 20, '0')" if pg else "printf('%020d', n)"
    decided = "NULL" if status == "pending" else "CURRENT_TIMESTAMP"
    empty = "'{}'::json" if pg else "'{}'"
    empty_list = "'[]'::json" if pg else "'[]'"
    ts = "CAST(:expires AS TIMESTAMPTZ)" if pg else ":expires"
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                f"INSERT INTO confirmation_request ({COLUMNS}) "
                f"SELECT '{prefix}' || {pad}, 'ask_sweep', {empty}, {empty}, 'anyone', "
                f"'{status}', {empty_list}, 1, {ts}, {ts}, {decided}, 'reject' "
                f"FROM ({series}) AS series"
            ),
            {"expires": expires},
        )
        if pg:
            conn.execute(sa.text("ANALYZE confirmation_request"))


def sweep_ms(db_url: str, rows: int) -> tuple[float, float]:
    """(time to expire 100 due, time of a sweep with nothing due) in ms, with `rows` finished."""
    app = create_app(cfg.make_settings(db_url, migrate_on_start=False))
    service = app.state.gate.service
    engine = app.state.gate.db.engine
    past = (utcnow() - timedelta(hours=1)).isoformat(sep=" ")
    if rows:
        fill(engine, rows, "expired", past, "F")
    fill(engine, DUE, "pending", past, "D")
    started = time.perf_counter()
    done = service.expire_due(utcnow())
    due = (time.perf_counter() - started) * 1000
    assert done == DUE, done
    started = time.perf_counter()
    service.expire_due(utcnow())
    idle = (time.perf_counter() - started) * 1000
    app.state.gate.db.dispose()
    return due, idle


def remind_tick_ms(db_url: str, waiting: int) -> tuple[float, float]:
    """(wall ms, CPU ms) of one reminder tick with `waiting` pending requests, none due."""
    app = create_app(cfg.make_settings(db_url, migrate_on_start=False))
    service = app.state.gate.service
    fill(
        app.state.gate.db.engine,
        waiting,
        "pending",
        (utcnow() + timedelta(hours=1)).isoformat(sep=" "),
        "W",
    )
    reminders.remind_and_escalate(service, utcnow())  # warm
    started, cpu = time.perf_counter(), time.process_time()
    reminders.remind_and_escalate(service, utcnow())
    wall, cpu = (time.perf_counter() - started) * 1000, (time.process_time() - cpu) * 1000
    app.state.gate.db.dispose()
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--waiting", type=int, default=10_000)
    args = parser.parse_args()
    print(machine())
    for kind in ["sqlite"] + (["postgres"] if pg_admin_url() else []):
        results = []
        for rows in (0, args.rows):
            with database(kind) as db_url:
                results.append(sweep_ms(db_url, rows))
        (small_due, small_idle), (big_due, big_idle) = results
        print(
            f"[{kind}] {DUE} due: {small_due:7.1f} ms on an empty table, {big_due:7.1f} ms with "
            f"{args.rows:,} finished rows (x{big_due / small_due:.2f}); nothing due: "
            f"{small_idle:.2f} ms vs {big_idle:.2f} ms"
        )
        with database(kind) as db_url:
            wall, cpu = remind_tick_ms(db_url, args.waiting)
        print(
            f"[{kind}] reminder tick, {args.waiting:,} waiting, none due: "
            f"{wall:.2f} ms ({cpu:.2f} ms CPU)"
        )


if __name__ == "__main__":
    main()
