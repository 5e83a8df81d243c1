"""acknowledgements: an approver's "I'm on it" on a pending request

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27

`confirmation_request.acknowledged_by` / `acknowledged_at`: who said they are on a pending
request, and when (`gate.decisions.acknowledging`). Reminders and escalation skip a request
once it is acknowledged; its status does not change. Rows from before are unacknowledged.
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import gate.store.tables

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("confirmation_request", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "acknowledged_by", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True
            )
        )
        batch_op.add_column(
            sa.Column(
                "acknowledged_at", gate.store.tables.UTCDateTime(timezone=True), nullable=True
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("confirmation_request", schema=None) as batch_op:
        batch_op.drop_column("acknowledged_at")
        batch_op.drop_column("acknowledged_by")
