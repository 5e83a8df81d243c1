"""PostgreSQL: a function that reads a request's audit chain head with a snapshot of its own

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26

A decision locks the request's row, then needs the newest event of its audit chain. A
statement's snapshot is taken when it starts, before it waits for the lock, so a head read
by the locking statement itself could miss an event the lock holder wrote: the head was read
by a second statement. A VOLATILE function takes a new snapshot for each query it runs, so
called on the locked row (`gate.store.rows.LOCK_WITH_HEAD`) it reads the head as of after the lock.
SQLite has one writer at a time and needs none of this.
"""

from collections.abc import Sequence

from alembic import op

revision: str = '0007'
down_revision: str | None = '0006'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name != 'postgresql':
        return
    op.execute(
        "CREATE OR REPLACE FUNCTION gate_audit_head(request text) RETURNS text "
        "LANGUAGE sql VOLATILE AS $$ "
        "SELECT chain_hash FROM audit_event WHERE request_id = request ORDER BY id DESC LIMIT 1 "
        "$$"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != 'postgresql':
        return
    op.execute("DROP FUNCTION IF EXISTS gate_audit_head(text)")
