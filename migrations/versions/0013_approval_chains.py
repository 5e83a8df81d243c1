"""approval chains: the waiting stage of a request (and when it began), the stage of each
vote, the agent's justification

Revision ID: 0013
Revises: 0010
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import gate.store.tables

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Every request and vote from before is in stage 0: a rule without stages has one.
    with op.batch_alter_table("confirmation_request", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("stage", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
        batch_op.add_column(
            sa.Column("stage_at", gate.store.tables.UTCDateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(
            sa.Column("justification", sqlmodel.sql.sqltypes.AutoString(length=4000), nullable=True)
        )
    with op.batch_alter_table("vote", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("stage", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )


def downgrade() -> None:
    with op.batch_alter_table("vote", schema=None) as batch_op:
        batch_op.drop_column("stage")
    with op.batch_alter_table("confirmation_request", schema=None) as batch_op:
        batch_op.drop_column("justification")
        batch_op.drop_column("stage_at")
        batch_op.drop_column("stage")
