"""agents tripped by their rejections, and the index that counts an agent's decisions

Revision ID: 0012
Revises: 0010
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import gate.store.tables

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "agent_trip",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("agent", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("reason", sqlmodel.sql.sqltypes.AutoString(length=500), nullable=False),
        sa.Column("request_id", sqlmodel.sql.sqltypes.AutoString(length=26), nullable=True),
        sa.Column("tripped_at", gate.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("reset_at", gate.store.tables.UTCDateTime(timezone=True), nullable=True),
        sa.Column("reset_by", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("agent_trip", schema=None) as batch_op:
        batch_op.create_index("ix_agent_trip_agent", ["agent", "id"], unique=False)
        batch_op.create_index(
            "uq_agent_trip_active",
            ["agent"],
            unique=True,
            sqlite_where=sa.text("reset_at IS NULL"),
            postgresql_where=sa.text("reset_at IS NULL"),
        )
    with op.batch_alter_table("confirmation_request", schema=None) as batch_op:
        batch_op.create_index("ix_request_agent_decided", ["agent_id", "decided_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("confirmation_request", schema=None) as batch_op:
        batch_op.drop_index("ix_request_agent_decided")
    with op.batch_alter_table("agent_trip", schema=None) as batch_op:
        batch_op.drop_index("uq_agent_trip_active")
        batch_op.drop_index("ix_agent_trip_agent")
    op.drop_table("agent_trip")
