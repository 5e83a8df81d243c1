"""what a card's post row records of its updates' marks, so a mark is one statement

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import gate.store.tables

revision: str = '0006'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('delivery', schema=None) as batch_op:
        batch_op.add_column(sa.Column('newest_update_sent', sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column('update_marked_at', gate.store.tables.UTCDateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(
            sa.Column(
                'update_marked_before', gate.store.tables.UTCDateTime(timezone=True), nullable=True
            )
        )
    # Cards updated before: their post rows learn the updates already sent (not those
    # superseded), so the first mark after the upgrade still sees them.
    op.execute(
        "UPDATE delivery SET "
        "newest_update_sent = (SELECT max(u.id) FROM delivery u WHERE u.request_id = "
        "delivery.request_id AND u.channel = delivery.channel AND u.target = delivery.target "
        "AND u.kind = 'update' AND u.status = 'sent' AND u.last_error IS NULL), "
        "update_marked_at = (SELECT max(u.sent_at) FROM delivery u WHERE u.request_id = "
        "delivery.request_id AND u.channel = delivery.channel AND u.target = delivery.target "
        "AND u.kind = 'update' AND u.status = 'sent' AND u.last_error IS NULL) "
        "WHERE kind = 'post'"
    )


def downgrade() -> None:
    with op.batch_alter_table('delivery', schema=None) as batch_op:
        batch_op.drop_column('update_marked_before')
        batch_op.drop_column('update_marked_at')
        batch_op.drop_column('newest_update_sent')
