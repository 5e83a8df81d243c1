"""how each vote and web sign-in was authenticated; single sign-on's used nonces

Revision ID: 0014
Revises: 0010
Create Date: 2026-11-27

`vote.auth` and `web_sign_in.auth` hold a `gate.identity.authmethod.AuthMethod` as JSON (password,
proxy, OIDC with issuer, subject, auth_time and acr, chat with platform, user id and
binding, token). Rows from before have none: they show as "not recorded", never guessed.
`web_sign_in.nonce` is the SHA-256 of the OIDC nonce a sign-in consumed, unique: an ID token
replayed with a nonce already used signs nobody in.
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("vote", schema=None) as batch_op:
        batch_op.add_column(sa.Column("auth", sa.JSON(), nullable=True))
    with op.batch_alter_table("web_sign_in", schema=None) as batch_op:
        batch_op.add_column(sa.Column("auth", sa.JSON(), nullable=True))
        batch_op.add_column(
            sa.Column("nonce", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True)
        )
        batch_op.create_index(batch_op.f("ix_web_sign_in_nonce"), ["nonce"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("web_sign_in", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_web_sign_in_nonce"))
        batch_op.drop_column("nonce")
        batch_op.drop_column("auth")
    with op.batch_alter_table("vote", schema=None) as batch_op:
        batch_op.drop_column("auth")
