"""web sign-ins, revocable server-side

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import gate.store.tables

revision: str = '0004'
down_revision: str | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('web_sign_in',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('approver', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('created_at', gate.store.tables.UTCDateTime(timezone=True), nullable=False),
    sa.Column('expires_at', gate.store.tables.UTCDateTime(timezone=True), nullable=False),
    sa.Column('revoked_at', gate.store.tables.UTCDateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('web_sign_in', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_web_sign_in_approver'), ['approver'], unique=False)
        batch_op.create_index(batch_op.f('ix_web_sign_in_expires_at'), ['expires_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('web_sign_in', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_web_sign_in_expires_at'))
        batch_op.drop_index(batch_op.f('ix_web_sign_in_approver'))

    op.drop_table('web_sign_in')
