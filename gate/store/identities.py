"""The statements behind `gate.decisions.identities`: chat identities bound outside gate.toml
and the one-time codes that link them.

A binding is active while `unbound_at` is NULL; the partial unique index
`uq_chat_identity_active` keeps one active approver per platform id, whatever two replicas
do at once. Ended bindings stay, as the record of who bound and unbound what.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session

from gate.store.tables import ChatIdentity, IdentityLinkCode

IDENTITY: sa.Table = ChatIdentity.__table__  # type: ignore[attr-defined]
CODE: sa.Table = IdentityLinkCode.__table__  # type: ignore[attr-defined]
_ACTIVE = IDENTITY.c.unbound_at.is_(None)


@dataclass(frozen=True, slots=True)
class IdentityRow:
    """One binding of an approver's id on a platform (active while `unbound_at` is None)."""

    id: int
    approver: str
    platform: str
    user_id: str
    bound_by: str
    source: str | None
    bound_at: datetime
    unbound_at: datetime | None = None
    unbound_by: str | None = None


@dataclass(frozen=True, slots=True)
class LinkCodeRow:
    """A one-time link code as stored (its hash, never the code)."""

    approver: str
    platform: str
    expires_at: datetime
    used_at: datetime | None


def _row(found: Any) -> IdentityRow:
    return IdentityRow(**dict(found._mapping))


def active(session: Session, platform: str, user_id: str) -> IdentityRow | None:
    """The active binding of `user_id` on `platform`, if any."""
    found = session.execute(
        sa.select(IDENTITY).where(
            IDENTITY.c.platform == platform, IDENTITY.c.user_id == user_id, _ACTIVE
        )
    ).first()
    return _row(found) if found is not None else None


def of_approver(session: Session, approver: str) -> list[IdentityRow]:
    """The approver's active bindings, oldest first."""
    found = session.execute(
        sa.select(IDENTITY).where(IDENTITY.c.approver == approver, _ACTIVE).order_by(IDENTITY.c.id)
    )
    return [_row(r) for r in found]


def bind(
    session: Session,
    *,
    approver: str,
    platform: str,
    user_id: str,
    bound_by: str,
    source: str | None,
    now: datetime,
) -> None:
    """Add an active binding (the caller checked that the platform id is free)."""
    session.execute(
        sa.insert(IDENTITY).values(
            approver=approver,
            platform=platform,
            user_id=user_id,
            bound_by=bound_by,
            source=source,
            bound_at=now,
        )
    )


def unbind(
    session: Session, identity_id: int, *, approver: str, by: str, now: datetime
) -> IdentityRow | None:
    """End `approver`'s active binding `identity_id` and return it; None when it is not an
    active binding of theirs (ended already, someone else's, or unknown)."""
    found = session.execute(
        sa.select(IDENTITY).where(
            IDENTITY.c.id == identity_id, IDENTITY.c.approver == approver, _ACTIVE
        )
    ).first()
    if found is None:
        return None
    done = session.execute(
        sa.update(IDENTITY)
        .where(IDENTITY.c.id == identity_id, _ACTIVE)
        .values(unbound_at=now, unbound_by=by)
    )
    return _row(found) if done.rowcount else None  # type: ignore[attr-defined]


def add_code(
    session: Session,
    *,
    code_hash: str,
    approver: str,
    platform: str,
    now: datetime,
    expires_at: datetime,
) -> None:
    """Store a new link code's hash; codes past their time are cleared on the way."""
    session.execute(sa.delete(CODE).where(CODE.c.expires_at < now))
    session.execute(
        sa.insert(CODE).values(
            code_hash=code_hash,
            approver=approver,
            platform=platform,
            created_at=now,
            expires_at=expires_at,
        )
    )


def use_code(session: Session, code_hash: str, *, now: datetime) -> LinkCodeRow | None:
    """Mark an unused, unexpired code used and return it; None for any other code. One
    UPDATE with a row-count check, so two deliveries of one code use it once."""
    done = session.execute(
        sa.update(CODE)
        .where(CODE.c.code_hash == code_hash, CODE.c.used_at.is_(None), CODE.c.expires_at > now)
        .values(used_at=now)
    )
    if not done.rowcount:  # type: ignore[attr-defined]
        return None
    found = session.execute(
        sa.select(CODE.c.approver, CODE.c.platform, CODE.c.expires_at, CODE.c.used_at).where(
            CODE.c.code_hash == code_hash
        )
    ).one()
    return LinkCodeRow(*found)
