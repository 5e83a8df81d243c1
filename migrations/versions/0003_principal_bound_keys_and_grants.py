"""idempotency keys and grants bound to the submitting principal; quorum grant votes

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = '0003'
down_revision: str | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# SQLite keeps the old unique constraint unnamed: this convention names it on reflection so
# batch mode can drop it. PostgreSQL named it itself.
_NAMING = {"uq": "uq_%(table_name)s_%(column_0_name)s"}


def _old_key_constraint() -> str:
    if op.get_bind().dialect.name == "postgresql":
        return "confirmation_request_idempotency_key_key"
    return "uq_confirmation_request_idempotency_key"


def upgrade() -> None:
    with op.batch_alter_table(
        'confirmation_request', schema=None, naming_convention=_NAMING
    ) as batch_op:
        batch_op.drop_constraint(_old_key_constraint(), type_='unique')
        batch_op.create_unique_constraint(
            'uq_request_submitter_key', ['submitted_by', 'idempotency_key']
        )
    with op.batch_alter_table('vote', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('grant_scope', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=True)
        )
        batch_op.add_column(sa.Column('grant_seconds', sa.Integer(), nullable=True))
    with op.batch_alter_table('approval_grant', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('submitted_by', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True)
        )
        batch_op.add_column(
            sa.Column('approvers', sa.JSON(), nullable=False, server_default='[]')
        )
        batch_op.add_column(
            sa.Column('approvals_required', sa.Integer(), nullable=False, server_default='1')
        )
    # Grants made before this revision name no principal or approvers, so they can no longer
    # be matched safely: end them rather than let them cover calls of any caller.
    op.execute(
        "UPDATE approval_grant SET status = 'revoked', ended_by = 'gate upgrade' "
        "WHERE status = 'active'"
    )
    with op.batch_alter_table('approval_grant', schema=None) as batch_op:
        batch_op.alter_column('approvers', server_default=None)
        batch_op.alter_column('approvals_required', server_default=None)


def downgrade() -> None:
    with op.batch_alter_table('approval_grant', schema=None) as batch_op:
        batch_op.drop_column('approvals_required')
        batch_op.drop_column('approvers')
        batch_op.drop_column('submitted_by')
    with op.batch_alter_table('vote', schema=None) as batch_op:
        batch_op.drop_column('grant_seconds')
        batch_op.drop_column('grant_scope')
    with op.batch_alter_table('confirmation_request', schema=None) as batch_op:
        batch_op.drop_constraint('uq_request_submitter_key', type_='unique')
        batch_op.create_unique_constraint(
            'uq_confirmation_request_idempotency_key', ['idempotency_key']
        )
