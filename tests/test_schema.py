"""Migrations are the only way the schema exists, and they equal the models."""

from __future__ import annotations

import re
from pathlib import Path

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlmodel import SQLModel

import gate.models  # noqa: F401  (registers the tables)
from gate.db import Database, normalise_url, upgrade
from gate.models import ConfirmationRequest, utcnow

ROOT = Path(__file__).resolve().parent.parent


def test_migrated_schema_equals_models(db_url: str) -> None:
    upgrade(db_url)
    engine = sa.create_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            diff = compare_metadata(ctx, SQLModel.metadata)
    finally:
        engine.dispose()
    assert diff == []


def test_upgrade_twice_is_a_no_op(db_url: str) -> None:
    upgrade(db_url)
    upgrade(db_url)


def test_times_come_back_utc_aware(db_url: str) -> None:
    upgrade(db_url)
    db = Database(db_url)
    try:
        now = utcnow()
        with db.write() as s:
            s.add(ConfirmationRequest(id="01TEST", tool_name="t", expires_at=now, created_at=now))
        with db.read() as s:
            row = s.get(ConfirmationRequest, "01TEST")
            assert row is not None
            assert row.expires_at.utcoffset() is not None
            assert row.expires_at == now
    finally:
        db.dispose()


def test_status_is_assigned_only_in_the_machine() -> None:
    """STYLE rule 2: a request's status changes in gate/machine.py and nowhere else."""
    pattern = re.compile(
        r"\.status\s*=[^=]|status\s*=\s*(RequestStatus|Status)\.|"
        r"values\([^)]*\bstatus="
    )
    offenders = []
    for path in [*ROOT.joinpath("gate").rglob("*.py"), *ROOT.joinpath("channels").rglob("*.py")]:
        if path.name in ("machine.py", "models.py", "outbox.py"):
            continue  # outbox.py changes *delivery* rows' status, never a request's
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line) and "ConfirmationRequest(" not in line:
                offenders.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert offenders == []
