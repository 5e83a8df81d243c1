"""Shared pieces of the benchmarks: a database, a real `gate serve`, a raw asyncio HTTP client.

Run from the repository root, e.g. `.venv/bin/python -m bench.decision_latency`. PostgreSQL
figures need GATE_BENCH_POSTGRES_URL (or GATE_TEST_POSTGRES_URL), e.g.
postgresql://postgres@127.0.0.1:5432/postgres; a scratch database is created and dropped.
"""

from __future__ import annotations

import asyncio
import os
import platform
import resource
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import sqlalchemy as sa

from gate.store.db import normalise_url, upgrade
from tests.support import config as cfg
from tests.support.servers import ServerProcess


def pg_admin_url() -> str | None:
    """The PostgreSQL server to benchmark against, if any."""
    return os.environ.get("GATE_BENCH_POSTGRES_URL") or os.environ.get("GATE_TEST_POSTGRES_URL")


@contextmanager
def database(kind: str, *, migrate: bool = True) -> Iterator[str]:
    """A fresh database URL of `kind` ("sqlite" or "postgres"), migrated unless `migrate` is
    False (a server of another checkout then migrates it with its own migrations)."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{tmp}/gate.db"
            if migrate:
                upgrade(url)
            yield url
        return
    admin_url = pg_admin_url()
    if not admin_url:
        raise SystemExit("set GATE_BENCH_POSTGRES_URL for the PostgreSQL figures")
    admin = sa.create_engine(normalise_url(admin_url), isolation_level="AUTOCOMMIT")
    name = f"gate_bench_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(normalise_url(admin_url)).set(database=name)
    rendered = url.render_as_string(hide_password=False)
    try:
        if migrate:
            upgrade(rendered)
        yield rendered
    finally:
        with admin.connect() as conn:
            conn.execute(
                sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname=:n"),
                {"n": name},
            )
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


def raise_fd_limit() -> int:
    """Lift the soft open-files limit to the hard one (inherited by servers we start)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


@contextmanager
def server(
    db_url: str,
    *,
    channels: dict[str, object] | None = None,
    rules: list[dict[str, object]] | None = None,
    env: dict[str, str] | None = None,
    **settings: object,
) -> Iterator[ServerProcess]:
    """A real `gate serve` on loopback, with the standard test policy and tokens (and its
    log channel, unless `channels` says otherwise; `rules` go before the standard ones),
    with `env` added to its environment."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gate.toml"
        data = cfg.settings_data(db_url, **settings)
        if channels is not None:
            data["channels"] = channels
        data["rules"] = [*(rules or []), *data["rules"]]
        path.write_text(cfg.to_toml(data))
        # one log per bench process: the port is read from it, and benches run side by side
        log_path = Path(tempfile.gettempdir()) / f"gate-bench-{os.getpid()}.log"
        proc = ServerProcess(path, env=env, log_path=log_path).start(timeout=60)
        try:
            yield proc
        finally:
            proc.stop()


def rss_mb(pid: int) -> float:
    """Resident memory of a process, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def healthz_round_trip_ms(url: str, n: int = 300) -> float:
    """Median of `n` sequential loopback round trips to /healthz on one kept-alive connection."""
    with httpx.Client(base_url=url) as c:
        c.get("/healthz")
        times = []
        for _ in range(n):
            t = time.perf_counter()
            c.get("/healthz")
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def update_commit_ms(db_url: str, n: int = 300) -> float:
    """Median of `n` committed single-row UPDATEs on the same database."""
    engine = sa.create_engine(normalise_url(db_url))
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text("CREATE TABLE IF NOT EXISTS bench_floor (id INT PRIMARY KEY, n INT)")
            )
            conn.execute(sa.text("DELETE FROM bench_floor"))
            conn.execute(sa.text("INSERT INTO bench_floor VALUES (1, 0)"))
        times = []
        with engine.connect() as conn:
            for _ in range(n):
                t = time.perf_counter()
                conn.execute(sa.text("UPDATE bench_floor SET n = n + 1 WHERE id = 1"))
                conn.commit()
                times.append(time.perf_counter() - t)
        return statistics.median(times) * 1000
    finally:
        engine.dispose()


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile (nearest rank)."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


def machine() -> str:
    """One line about where the figures come from."""
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return f"{platform.node()}: {os.cpu_count()} cpu ({cpu}), Python {platform.python_version()}"


async def raw_get(
    host: str, port: int, path: str, token: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Open a connection and send one GET (HTTP/1.1, close); the caller reads the answer."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        (
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
    )
    await writer.drain()
    return reader, writer


async def read_status(reader: asyncio.StreamReader) -> int:
    """Read a whole (Connection: close) response; return its status code."""
    data = await reader.read(-1)
    return int(data.split(b" ", 2)[1]) if data else 0
