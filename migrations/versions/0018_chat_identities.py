"""chat identities bound from the identity provider or a one-time link, and the link codes

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27

`chat_identity` holds an approver's id on a chat platform bound outside gate.toml (an
identity provider's claim at sign-in, or a link code sent from the platform); rows are kept
after they end, as the record. `identity_link_code` holds the SHA-256 of each one-time code
the console handed out.
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import gate.store.tables

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TEXT = sqlmodel.sql.sqltypes.AutoString
_WHEN = gate.store.tables.UTCDateTime


def upgrade() -> None:
    op.create_table(
        "chat_identity",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("approver", _TEXT(length=200), nullable=False),
        sa.Column("platform", _TEXT(length=50), nullable=False),
        sa.Column("user_id", _TEXT(length=200), nullable=False),
        sa.Column("bound_by", _TEXT(length=16), nullable=False),
        sa.Column("source", _TEXT(length=200), nullable=True),
        sa.Column("bound_at", _WHEN(timezone=True), nullable=False),
        sa.Column("unbound_at", _WHEN(timezone=True), nullable=True),
        sa.Column("unbound_by", _TEXT(length=200), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("chat_identity", schema=None) as batch_op:
        batch_op.create_index("ix_chat_identity_approver", ["approver", "id"], unique=False)
        batch_op.create_index(
            "uq_chat_identity_active",
            ["platform", "user_id"],
            unique=True,
            sqlite_where=sa.text("unbound_at IS NULL"),
            postgresql_where=sa.text("unbound_at IS NULL"),
        )
    op.create_table(
        "identity_link_code",
        sa.Column("code_hash", _TEXT(length=64), nullable=False),
        sa.Column("approver", _TEXT(length=200), nullable=False),
        sa.Column("platform", _TEXT(length=50), nullable=False),
        sa.Column("created_at", _WHEN(timezone=True), nullable=False),
        sa.Column("expires_at", _WHEN(timezone=True), nullable=False),
        sa.Column("used_at", _WHEN(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("code_hash"),
    )
    with op.batch_alter_table("identity_link_code", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_identity_link_code_expires_at"), ["expires_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("identity_link_code", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_identity_link_code_expires_at"))
    op.drop_table("identity_link_code")
    with op.batch_alter_table("chat_identity", schema=None) as batch_op:
        batch_op.drop_index("uq_chat_identity_active")
        batch_op.drop_index("ix_chat_identity_approver")
    op.drop_table("chat_identity")
