"""outgoing webhooks' outbox: one row per signed message owed to a receiver

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27

`webhook_delivery` rows are written in the transaction of the change they report and sent
by every replica's pump under a lease, like card deliveries (`delivery`); `msg_id` is the
Standard Webhooks `webhook-id`, the same on every attempt.
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import gate.store.tables

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "webhook_delivery",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("msg_id", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column("webhook", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("event", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("request_id", sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column(
            "next_attempt_at", gate.store.tables.UTCDateTime(timezone=True), nullable=False
        ),
        sa.Column("claimed_until", gate.store.tables.UTCDateTime(timezone=True), nullable=True),
        sa.Column("last_error", sqlmodel.sql.sqltypes.AutoString(length=500), nullable=True),
        sa.Column("created_at", gate.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("sent_at", gate.store.tables.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("msg_id"),
    )
    with op.batch_alter_table("webhook_delivery", schema=None) as batch_op:
        batch_op.create_index(
            "ix_webhook_delivery_due", ["status", "next_attempt_at"], unique=False
        )
        batch_op.create_index("ix_webhook_delivery_request", ["request_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("webhook_delivery", schema=None) as batch_op:
        batch_op.drop_index("ix_webhook_delivery_request")
        batch_op.drop_index("ix_webhook_delivery_due")
    op.drop_table("webhook_delivery")
