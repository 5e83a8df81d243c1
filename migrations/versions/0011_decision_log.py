"""the decision log: every answer of POST /v1/gate; the policy revision on each request

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import gate.store.tables

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TEXT = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    op.create_table(
        "decision_log",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", gate.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("agent_id", _TEXT(length=200), nullable=True),
        sa.Column("session_id", _TEXT(length=200), nullable=True),
        sa.Column("user_id", _TEXT(length=200), nullable=True),
        sa.Column("submitted_by", _TEXT(length=200), nullable=True),
        sa.Column("tool_name", _TEXT(length=200), nullable=False),
        sa.Column("args_hash", _TEXT(length=64), nullable=False),
        sa.Column("masked_args", sa.JSON(), nullable=False),
        sa.Column("facts", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("rule", _TEXT(length=200), nullable=True),
        sa.Column("policy_revision", _TEXT(length=16), nullable=False),
        sa.Column("answer", _TEXT(length=16), nullable=False),
        sa.Column("request_id", _TEXT(length=26), nullable=True),
        sa.Column("shadow", sa.JSON(none_as_null=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("decision_log", schema=None) as batch_op:
        batch_op.create_index("ix_decision_log_at", ["at"], unique=False)
        batch_op.create_index("ix_decision_log_agent", ["agent_id", "id"], unique=False)
        batch_op.create_index("ix_decision_log_tool", ["tool_name", "id"], unique=False)
        batch_op.create_index("ix_decision_log_rule", ["rule", "id"], unique=False)
        batch_op.create_index("ix_decision_log_answer", ["answer", "id"], unique=False)
        batch_op.create_index(
            "ix_decision_log_facts",
            ["at"],
            unique=False,
            sqlite_where=sa.text("facts IS NOT NULL"),
            postgresql_where=sa.text("facts IS NOT NULL"),
        )
    with op.batch_alter_table("confirmation_request", schema=None) as batch_op:
        batch_op.add_column(sa.Column("policy_revision", _TEXT(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("confirmation_request", schema=None) as batch_op:
        batch_op.drop_column("policy_revision")
    op.drop_table("decision_log")
