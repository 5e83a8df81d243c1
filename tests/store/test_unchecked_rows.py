"""Rows stored before gate checked its input cannot break a listing.

An old row (or another writer's) may hold a lone surrogate in a JSON column, bytes that are
not UTF-8 (SQLite), JSON of the wrong shape or none at all, or text longer than its column.
Every read survives a lone surrogate (gate.store.db.stored_json), and migration 0010 mends the rest
in place. The bad rows are written with raw SQL, as an old gate or another tool left them.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import command

from gate.store.db import alembic_config, is_sqlite, normalise_url, upgrade
from tests.conftest import Gate
from tests.support import config as cfg

_LONE = '{"path": "/tmp/x\\ud800y", "n": 1}'  # JSON text: a lone surrogate's escape


def _ask(gate: Gate, tool: str = "ask_thing") -> str:
    answer = gate.submit(tool_name=tool, tool_args={"path": "/tmp/ok"})
    assert answer["decision"] == "ask", answer
    return str(answer["request"]["id"])


def _raw(url: str, sql: str, **params: Any) -> list[Any]:
    engine = sa.create_engine(normalise_url(url))
    try:
        with engine.begin() as conn:
            result = conn.execute(sa.text(sql), params)
            return list(result.mappings()) if result.returns_rows else []
    finally:
        engine.dispose()


def _json_param(url: str) -> str:
    return ":v" if is_sqlite(url) else "CAST(:v AS json)"


def test_a_lone_surrogate_in_an_old_row_does_not_break_the_listing(gate: Gate, db_url: str) -> None:
    good, bad = _ask(gate), _ask(gate)
    _raw(
        db_url,
        f"UPDATE confirmation_request SET tool_args = {_json_param(db_url)} WHERE id = :id",
        v=_LONE,
        id=bad,
    )
    with gate.client(cfg.ADMIN) as c:
        listed = c.get("/v1/requests")
        one = c.get(f"/v1/requests/{bad}")
        page = c.get(f"/v1/requests/{bad}/audit")
    assert listed.status_code == 200, listed.text
    items = {r["id"]: r for r in listed.json()["items"]}
    assert set(items) >= {good, bad}
    assert items[bad]["tool_args"] == {"path": "/tmp/x\ufffdy", "n": 1}
    assert one.status_code == 200 and one.json()["tool_args"]["path"] == "/tmp/x\ufffdy"
    assert page.status_code == 200
    # an approval of it binds the mended arguments: decided like any request
    decided = gate.decide(bad, cfg.ALICE, "approve")
    assert decided.status_code == 200, decided.text


def test_the_migration_mends_rows_stored_before_input_was_checked(gate: Gate, db_url: str) -> None:
    surrogate, listed_args, good = _ask(gate), _ask(gate), _ask(gate)
    jp = _json_param(db_url)
    _raw(
        db_url,
        f"UPDATE confirmation_request SET tool_args = {jp} WHERE id = :id",
        v=_LONE,
        id=surrogate,
    )
    _raw(
        db_url,
        f"UPDATE confirmation_request SET tool_args = {jp} WHERE id = :id",
        v="[1, 2]",
        id=listed_args,
    )
    broken: list[str] = []
    if is_sqlite(db_url):  # what only SQLite lets in: bad bytes, bad JSON, long text
        broken = [_ask(gate) for _ in range(3)]
        _raw(
            db_url,
            "UPDATE confirmation_request SET summary = CAST(X'61EDA08062' AS TEXT) WHERE id = :id",
            id=broken[0],
        )
        _raw(
            db_url,
            "UPDATE confirmation_request SET context = '{not json' WHERE id = :id",
            id=broken[1],
        )
        _raw(
            db_url,
            "UPDATE confirmation_request SET summary = :v WHERE id = :id",
            v="s" * 5000,
            id=broken[2],
        )
    gate.server.stop()
    command.downgrade(alembic_config(db_url), "0009")
    upgrade(db_url)

    engine = sa.create_engine(normalise_url(db_url))  # gate's own reading, now unneeded
    try:
        with engine.connect() as conn:
            rows = {
                r.id: r
                for r in conn.execute(sa.text("SELECT * FROM confirmation_request")).mappings()
            }
    finally:
        engine.dispose()

    def loaded(value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    assert loaded(rows[surrogate]["tool_args"]) == {"path": "/tmp/x\ufffdy", "n": 1}
    assert loaded(rows[surrogate]["context"])["mended_by_migration"] == ["tool_args"]
    assert loaded(rows[listed_args]["tool_args"]) == {"value": [1, 2]}
    assert loaded(rows[good]["tool_args"]) == {"path": "/tmp/ok"}
    assert "mended_by_migration" not in loaded(rows[good]["context"])
    if broken:
        assert rows[broken[0]]["summary"] == "a\ufffd\ufffd\ufffdb"
        assert loaded(rows[broken[1]]["context"])["unreadable"] == "{not json"
        assert len(rows[broken[2]]["summary"]) == 1000
        assert rows[broken[2]]["summary"].endswith("…")
