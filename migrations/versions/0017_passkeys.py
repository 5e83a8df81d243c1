"""passkeys: approvers' WebAuthn credentials and the challenges gate issues for them

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27

`passkey` holds each approver's registered credential (COSE public key, signature counter,
who added and removed it, kept after removal); `passkey_challenge` the challenges issued and
not yet used (single-use, short-lived), an approval's bound to the request and the hash of
its arguments.
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import gate.store.tables

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "passkey",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=26), nullable=False),
        sa.Column("credential_id", sqlmodel.sql.sqltypes.AutoString(length=1400), nullable=False),
        sa.Column("approver", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("label", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("public_key", sa.LargeBinary(), nullable=False),
        sa.Column("sign_count", sa.BigInteger(), nullable=False),
        sa.Column("transports", sa.JSON(), nullable=False),
        sa.Column("created_at", gate.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.Column("created_auth", sa.JSON(), nullable=True),
        sa.Column("last_used_at", gate.store.tables.UTCDateTime(timezone=True), nullable=True),
        sa.Column("removed_at", gate.store.tables.UTCDateTime(timezone=True), nullable=True),
        sa.Column("removed_by", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("credential_id"),
    )
    with op.batch_alter_table("passkey", schema=None) as batch_op:
        batch_op.create_index("ix_passkey_approver", ["approver", "removed_at"], unique=False)
    op.create_table(
        "passkey_challenge",
        sa.Column("nonce", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("approver", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("purpose", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("request_id", sqlmodel.sql.sqltypes.AutoString(length=26), nullable=True),
        sa.Column("args_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
        sa.Column("expires_at", gate.store.tables.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("nonce"),
    )
    with op.batch_alter_table("passkey_challenge", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_passkey_challenge_expires_at"), ["expires_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("passkey_challenge", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_passkey_challenge_expires_at"))
    op.drop_table("passkey_challenge")
    with op.batch_alter_table("passkey", schema=None) as batch_op:
        batch_op.drop_index("ix_passkey_approver")
    op.drop_table("passkey")
