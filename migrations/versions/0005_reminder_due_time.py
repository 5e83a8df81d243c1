"""when the reminder job next has work on a request (nudge_at), so a tick reads only what is due

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import gate.store.tables

revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('confirmation_request', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('nudge_at', gate.store.tables.UTCDateTime(timezone=True), nullable=True)
        )
        batch_op.create_index('ix_request_status_nudge', ['status', 'nudge_at'], unique=False)
    # Requests waiting from before: due at once, so the first tick looks at each one and
    # stores its real next time (or none); from then on ticks read only what is due.
    op.execute(
        "UPDATE confirmation_request SET nudge_at = created_at "
        "WHERE status = 'pending' AND (reminded_at IS NULL OR escalated_at IS NULL)"
    )


def downgrade() -> None:
    with op.batch_alter_table('confirmation_request', schema=None) as batch_op:
        batch_op.drop_index('ix_request_status_nudge')
        batch_op.drop_column('nudge_at')
