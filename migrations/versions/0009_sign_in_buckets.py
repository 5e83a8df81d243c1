"""sign-in rate limits kept in the database, shared by every replica

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import gate.store.tables

revision: str = '0009'
down_revision: str | None = '0008'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('sign_in_bucket',
    sa.Column('key', sqlmodel.sql.sqltypes.AutoString(length=300), nullable=False),
    sa.Column('tokens', sa.Float(), nullable=False),
    sa.Column('at', gate.store.tables.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('key')
    )
    with op.batch_alter_table('sign_in_bucket', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_sign_in_bucket_at'), ['at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('sign_in_bucket', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_sign_in_bucket_at'))

    op.drop_table('sign_in_bucket')
