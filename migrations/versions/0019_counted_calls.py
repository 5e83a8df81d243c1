"""the calls history-aware conditions count, and their indexes

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import gate.store.tables

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "counted_call",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("caller", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("session_id", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
        sa.Column("tool_name", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("request_id", sqlmodel.sql.sqltypes.AutoString(length=26), nullable=True),
        sa.Column("numbers", sa.JSON(), nullable=True),
        sa.Column("at", gate.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("counted_call", schema=None) as batch_op:
        batch_op.create_index("ix_counted_call_caller_at", ["caller", "at"], unique=False)
        batch_op.create_index(
            "ix_counted_call_session_at", ["caller", "session_id", "at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("counted_call", schema=None) as batch_op:
        batch_op.drop_index("ix_counted_call_session_at")
        batch_op.drop_index("ix_counted_call_caller_at")
    op.drop_table("counted_call")
