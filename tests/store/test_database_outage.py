"""A lost database connection is a 503 the client can retry, never a 500; the next call works.

The pool does not ping a connection before each use (that is a round trip per call), so the
first calls after the database dropped its connections (a restart, a failover, a proxy's idle
timeout) meet dead ones. Here PostgreSQL really drops them (`pg_terminate_backend`).
"""

from __future__ import annotations

import sqlalchemy as sa

from gate.store.db import normalise_url
from tests.conftest import GateFactory
from tests.support import config as cfg


def _drop_connections(database_url: str) -> int:
    """Terminate every server connection to the database; how many there were."""
    url = sa.make_url(normalise_url(database_url))
    admin = sa.create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            killed = conn.execute(
                sa.text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = :n AND pid <> pg_backend_pid()"
                ),
                {"n": url.database},
            ).scalar_one()
    finally:
        admin.dispose()
    return int(killed)


def test_a_dropped_connection_is_a_503_then_the_pool_recovers(
    make_gate: GateFactory, postgres_url: str
) -> None:
    gate = make_gate(database_url=postgres_url)
    with gate.client(cfg.AGENT) as agent:
        # Several calls at once first, so the pool holds several connections to lose.
        first = agent.post("/v1/gate", json={"tool_name": "ask_me", "tool_args": {"n": 1}})
        assert first.status_code == 200, first.text
        rid = first.json()["request"]["id"]
        assert _drop_connections(postgres_url) >= 1

        answers = [agent.get(f"/v1/requests/{rid}") for _ in range(6)]

    statuses = [r.status_code for r in answers]
    assert set(statuses) <= {200, 503}, [r.text for r in answers]
    for refused in (r for r in answers if r.status_code == 503):
        assert refused.json()["error"]["code"] == "unavailable"
        assert refused.headers["retry-after"] == "1"
    assert statuses[-1] == 200, statuses
