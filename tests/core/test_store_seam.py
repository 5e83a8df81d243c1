"""The store's seam: its rows are typed, and the channels never load it.

A misspelt field on a store row must be a type error (it used to pass mypy strict, the rows
being `SimpleNamespace`s), the rows must carry exactly the table's columns, and a channel,
which sees requests only as `RequestView`s, must import nothing under `gate/store/`.
"""

from __future__ import annotations

import ast
import os
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import channels
from gate.decisions.service import GateService
from gate.store import direct, rows
from gate.store.records import REQUEST_FIELDS, VOTE_FIELDS, RequestRow

ROOT = Path(__file__).resolve().parent.parent.parent

PROBE = """\
from gate.store.records import RequestRow, VoteRow


def deadline(row: RequestRow) -> object:
    return row.expires_at


def misspelt(row: RequestRow) -> object:
    return row.expires_att


def voter(vote: VoteRow) -> object:
    return vote.aprover
"""


def test_mypy_rejects_a_misspelt_field_on_a_store_row(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    env = {**os.environ, "MYPYPATH": str(ROOT)}  # this checkout's gate, not an installed one
    found = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent"]
        + ["--cache-dir", str(tmp_path / "cache"), str(probe)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    errors = [line for line in found.stdout.splitlines() if ": error:" in line]
    assert found.returncode == 1, found.stdout + found.stderr
    # the two misspellings, and nothing else (the correct spelling checks clean)
    assert len(errors) == 2, found.stdout
    assert 'RequestRow" has no attribute "expires_att"' in errors[0], errors
    assert 'VoteRow" has no attribute "aprover"' in errors[1], errors


def test_a_misspelt_field_is_refused_at_run_time_too() -> None:
    row = rows.new_request(id="r1", tool_name="t", created_at=None, expires_at=None)
    with pytest.raises(AttributeError):
        row.expires_att = 1  # type: ignore[attr-defined]


def test_the_rows_carry_the_tables_columns() -> None:
    assert REQUEST_FIELDS == rows.REQUEST_COLUMNS
    assert set(VOTE_FIELDS) == {c.name for c in rows.VOTE.columns} - {"request_id"}
    assert set(RequestRow.__dataclass_fields__) - set(REQUEST_FIELDS) == {
        "audit_head",
        "locked",
        "optimistic",
    }


def _channel_modules() -> list[str]:
    return sorted(f"channels.{info.name}" for info in pkgutil.iter_modules(channels.__path__))


@pytest.mark.parametrize("module", _channel_modules())
def test_a_channel_loads_nothing_of_the_store(module: str) -> None:
    code = textwrap.dedent(
        f"""
        import importlib, sys
        importlib.import_module({module!r})
        print(" ".join(sorted(m for m in sys.modules if m == "gate.store"
                              or m.startswith("gate.store."))))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.split() == [], f"{module} loaded {found.stdout.strip()}"


def test_the_state_machine_speaks_no_sql() -> None:
    # it decides; the store's verbs (gate.store.decisions) choose and run the statements
    tree = ast.parse((ROOT / "gate" / "decisions" / "machine.py").read_text(encoding="utf-8"))
    imported = {
        alias.name if isinstance(node, ast.Import) else f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    speaking = {
        name
        for name in imported
        if name.startswith(("sqlalchemy", "sqlmodel.col", "sqlmodel.select"))
        or name.startswith(("gate.store.rows", "gate.store.batch", "gate.store.direct"))
        or name in {"gate.store.rows", "gate.store.batch", "gate.store.direct"}
    }
    assert speaking == set(), speaking
    assert "gate.store.decisions" in imported


def test_the_driver_path_stays_on_under_a_sqlalchemy_listener(service: GateService) -> None:
    # what tracing instrumentation installs: it used to switch the driver path off, so a
    # traced server (and the statement-count tests) ran code production does not
    through_sqlalchemy: list[str] = []
    told: list[str] = []

    def on_cursor(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        through_sqlalchemy.append(statement)

    def on_statement(conn: Any, statement: str, params: Any) -> None:
        told.append(statement)

    sa.event.listen(service.db.engine, "before_cursor_execute", on_cursor)
    direct.listen(service.db.engine, on_statement)
    try:
        with service.db.write_conn() as conn:
            direct.execute(conn, rows.SELECT_REQUEST, {"id": "no-such-request"})
            conn.execute(sa.select(sa.literal(1)))  # SQLAlchemy's own path, told once too
    finally:
        direct.remove(service.db.engine, on_statement)
        sa.event.remove(service.db.engine, "before_cursor_execute", on_cursor)
    assert len(through_sqlalchemy) == 1, through_sqlalchemy  # only the second statement
    assert len(told) == 2 and "confirmation_request" in told[0], told


def test_a_checked_compare_and_set_returns_ok_after_its_plain_one_was_read() -> None:
    # SQLAlchemy memoizes RETURNING columns on first read and `.returning()` copied the memo:
    # a decision's checked compare-and-set built on a plain one the batch had read returned
    # no `ok` (a fused statement then failed to build, on PostgreSQL, in the second decision)
    written = ("status", "decided_at", "decided_by", "decided_via", "reason", "outcome")
    assert len(rows.cas_of(written, "before").exported_columns) == 0
    assert list(rows.checked_cas_of(written, "before").exported_columns.keys()) == ["ok"]
