"""grants that pin chosen arguments and count their uses

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27

`approval_grant.pinned` holds the arguments a "pattern" grant pins (name -> approved value);
`approval_grant.max_uses` how many calls a grant may let through (None: any number until it
expires). A grant whose last use is taken ends as `used_up` (a plain string status, no
ALTER TYPE). `vote.grant_terms` keeps what an approver chose beyond scope and duration
(`{"uses": n, "pin": [...]}`), so a quorum's grant can take the narrowest of its votes.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("approval_grant", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pinned", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("max_uses", sa.Integer(), nullable=True))
    with op.batch_alter_table("vote", schema=None) as batch_op:
        batch_op.add_column(sa.Column("grant_terms", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("vote", schema=None) as batch_op:
        batch_op.drop_column("grant_terms")
    with op.batch_alter_table("approval_grant", schema=None) as batch_op:
        batch_op.drop_column("max_uses")
        batch_op.drop_column("pinned")
