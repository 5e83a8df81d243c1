"""Migrations are the only way the schema exists, and they equal the models."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlmodel import SQLModel

import gate.store.tables  # noqa: F401  (registers the tables)
from gate.base.statuses import utcnow
from gate.store.db import Database, normalise_url, upgrade
from gate.store.tables import ConfirmationRequest

ROOT = Path(__file__).resolve().parents[2]
#: these tests run the migrations themselves, from an empty database
pytestmark = pytest.mark.fresh_database


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


def test_upgrading_teaches_each_cards_post_row_the_updates_already_sent(db_url: str) -> None:
    # PostgreSQL's mark of an update reads what the card's post row records of the marks
    # before it; cards updated before the upgrade must not look as if none was ever sent.
    upgrade(db_url, "0005")
    engine = sa.create_engine(normalise_url(db_url))
    now = utcnow()
    row = {"channel": "log", "target": "log", "attempts": 1, "next_attempt_at": now}
    try:
        with engine.begin() as conn:  # the columns of a request at 0005 (0011 and 0013 add some)
            conn.execute(
                sa.text(
                    "INSERT INTO confirmation_request (id, tool_name, tool_args, context, status, "
                    "approvers, approvals_required, created_at, expires_at, on_timeout, options) "
                    "VALUES ('01OLD', 't', '{}', '{}', 'pending', '[]', 1, :at, :at, 'reject', "
                    "'{}')"
                ),
                {"at": now},
            )
            insert = sa.text(
                "INSERT INTO delivery (id, request_id, channel, target, kind, status, attempts, "
                "next_attempt_at, created_at, sent_at, last_error) VALUES (:id, '01OLD', "
                ":channel, :target, :kind, :status, :attempts, :next_attempt_at, :at, :at, :error)"
            )
            earlier = now - timedelta(minutes=5)
            for id_, kind, at, error in [
                (1, "post", earlier, None),
                (2, "update", earlier, None),
                (3, "update", now, None),  # the newest really sent
                (4, "update", now + timedelta(seconds=1), "superseded by a later update"),
            ]:
                status = {"kind": kind, "status": "sent", "at": at, "error": error}
                conn.execute(insert, {**row, "id": id_, **status})
        upgrade(db_url)
        with engine.connect() as conn:
            marks = conn.execute(
                sa.text(
                    "SELECT kind, newest_update_sent, update_marked_at, update_marked_before "
                    "FROM delivery ORDER BY id"
                )
            ).all()
    finally:
        engine.dispose()
    post, *updates = marks
    assert post[:2] == ("post", 3) and post[3] is None
    assert _utc(post[2]) == now
    assert all(update[1:] == (None, None, None) for update in updates)


def _utc(value: datetime | str) -> datetime:
    """A time as a raw connection returns it (SQLite: text) as an aware datetime."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


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
    """STYLE rule 2: a request's status changes in gate/decisions/machine.py and nowhere else."""
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


def test_the_head_revision_gate_knows_is_the_migrations_head() -> None:
    from alembic.script import ScriptDirectory

    from gate.store.db import HEAD_REVISION, alembic_config

    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert script.get_heads() == [HEAD_REVISION], "a new migration: update HEAD_REVISION"


def test_a_database_already_migrated_is_not_handed_to_alembic(db_url: str) -> None:
    # A replica starting on a current database (every start but the first) skips Alembic: it
    # is not even imported. One that is behind, or new, is migrated as before.
    from gate.store.db import HEAD_REVISION, stored_revision

    assert stored_revision(db_url) is None
    upgrade(db_url)
    assert stored_revision(db_url) == HEAD_REVISION
    probe = (
        "import sys\nfrom gate.store.db import upgrade\n"
        f"upgrade({db_url!r})\nprint('alembic' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "False", done.stderr
