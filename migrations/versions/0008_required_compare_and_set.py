"""PostgreSQL: a function that fails the statement it runs in unless its argument is true

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27

A decision on PostgreSQL reads the request without locking it, then writes its vote, its
transition, its audit event and its card rows as one autocommitted statement whose
compare-and-set confirms, under the row's lock, that the request is still pending and its
audit chain's head is still the one read (`gate.store.rows.checked_cas_of`). The statement's
other parts write whether or not that holds, so the statement itself must fail when it does
not: `gate_require(false)` raises SQLSTATE GTCAS, the whole statement is undone, and the
decision is made again under the lock (`gate.store.batch.Unmet`). SQLite needs none of this.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        "CREATE OR REPLACE FUNCTION gate_require(ok boolean) RETURNS boolean "
        "LANGUAGE plpgsql VOLATILE AS $$ BEGIN "
        "IF ok IS NOT TRUE THEN "
        "RAISE EXCEPTION 'the request changed after it was read' USING ERRCODE = 'GTCAS'; "
        "END IF; RETURN true; END $$"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION IF EXISTS gate_require(boolean)")
