"""The statements behind passkeys (`gate.web.passkeys`): approvers' WebAuthn credentials and
the challenges gate issues for them.

A challenge is single-use: `spend` takes it with a DELETE that must find it unexpired, in
the same transaction that moves the credential's signature counter forward with a
compare-and-set on the value the assertion was checked against. Two posts of one assertion
(a replay, or two replicas at once) cannot both find the challenge; a counter another
approval moved meanwhile fails the compare-and-set. Removing a credential keeps its row
(`removed_at`, `removed_by`): a vote names the credential it was signed with.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa

from gate.store.db import Database
from gate.store.records import ChallengeRow, PasskeyRow
from gate.store.tables import Passkey, PasskeyChallenge

KEY: sa.Table = Passkey.__table__  # type: ignore[attr-defined]
CHALLENGE: sa.Table = PasskeyChallenge.__table__  # type: ignore[attr-defined]
_FIELDS = (
    KEY.c.id,
    KEY.c.credential_id,
    KEY.c.approver,
    KEY.c.label,
    KEY.c.public_key,
    KEY.c.sign_count,
    KEY.c.transports,
    KEY.c.created_at,
    KEY.c.last_used_at,
    KEY.c.removed_at,
    KEY.c.removed_by,
)
Spent = Literal["spent", "challenge_used", "counter_moved"]


def _row(found: Any) -> PasskeyRow:
    return PasskeyRow(
        id=found.id,
        credential_id=found.credential_id,
        approver=found.approver,
        label=found.label,
        public_key=bytes(found.public_key),
        sign_count=int(found.sign_count),
        transports=tuple(str(t) for t in found.transports or ()),
        created_at=found.created_at,
        last_used_at=found.last_used_at,
        removed_at=found.removed_at,
        removed_by=found.removed_by,
    )


def of_approver(db: Database, approver: str) -> list[PasskeyRow]:
    """The approver's passkeys in use, oldest first."""
    statement = (
        sa.select(*_FIELDS)
        .where(KEY.c.approver == approver, KEY.c.removed_at.is_(None))
        .order_by(KEY.c.created_at, KEY.c.id)
    )
    with db.read_conn() as conn:
        return [_row(r) for r in conn.execute(statement).all()]


def by_credential(db: Database, credential_id: str) -> PasskeyRow | None:
    """The passkey with this credential id, removed or not (None: never registered)."""
    statement = sa.select(*_FIELDS).where(KEY.c.credential_id == credential_id)
    with db.read_conn() as conn:
        found = conn.execute(statement).first()
    return _row(found) if found is not None else None


def add(
    db: Database, row: PasskeyRow, *, nonce: str, now: datetime, auth: dict[str, Any] | None
) -> Literal["added", "challenge_used", "known"]:
    """Store a new passkey, using up its registration challenge, in one transaction: "known"
    when the credential id is registered already (to anyone: an authenticator's credential is
    one person's), "challenge_used" when the challenge was used or expired (nothing written
    then)."""
    with db.write_conn() as conn:
        if not _take(conn, nonce, now):
            return "challenge_used"
        known = conn.execute(
            sa.select(KEY.c.id).where(KEY.c.credential_id == row.credential_id)
        ).first()
        if known is not None:
            return "known"
        conn.execute(
            sa.insert(KEY).values(
                id=row.id,
                credential_id=row.credential_id,
                approver=row.approver,
                label=row.label,
                public_key=row.public_key,
                sign_count=row.sign_count,
                transports=list(row.transports),
                created_at=row.created_at,
                created_auth=auth,
            )
        )
    return "added"


def remove(db: Database, *, approver: str, key_id: str, now: datetime) -> PasskeyRow | None:
    """Take the approver's passkey out of use (one transaction); the passkey, or None when
    they have no such passkey in use."""
    statement = (
        sa.update(KEY)
        .where(KEY.c.id == key_id, KEY.c.approver == approver, KEY.c.removed_at.is_(None))
        .values(removed_at=now, removed_by=approver)
        .returning(*_FIELDS)
    )
    with db.write_conn() as conn:
        found = conn.execute(statement).first()
    return _row(found) if found is not None else None


def issue(db: Database, challenge: ChallengeRow, *, now: datetime) -> None:
    """Record a challenge gate is about to send (and forget the expired ones)."""
    with db.write_conn() as conn:
        conn.execute(sa.delete(CHALLENGE).where(CHALLENGE.c.expires_at < now))
        conn.execute(
            sa.insert(CHALLENGE).values(
                nonce=challenge.nonce,
                approver=challenge.approver,
                purpose=challenge.purpose,
                request_id=challenge.request_id,
                args_hash=challenge.args_hash,
                expires_at=challenge.expires_at,
            )
        )


def challenge(db: Database, nonce: str) -> ChallengeRow | None:
    """A challenge gate issued and nobody has used yet (expired or not: the caller says)."""
    statement = sa.select(
        CHALLENGE.c.nonce,
        CHALLENGE.c.approver,
        CHALLENGE.c.purpose,
        CHALLENGE.c.request_id,
        CHALLENGE.c.args_hash,
        CHALLENGE.c.expires_at,
    ).where(CHALLENGE.c.nonce == nonce)
    with db.read_conn() as conn:
        found = conn.execute(statement).first()
    if found is None:
        return None
    return ChallengeRow(
        nonce=found.nonce,
        approver=found.approver,
        purpose=found.purpose,
        request_id=found.request_id,
        args_hash=found.args_hash,
        expires_at=found.expires_at,
    )


def spend(
    db: Database,
    *,
    nonce: str,
    credential_id: str,
    seen_count: int,
    new_count: int,
    now: datetime,
) -> Spent:
    """Use up an approval's challenge and move its passkey's counter from `seen_count` (what
    the assertion was checked against) to `new_count`, in one transaction; what stopped it
    otherwise."""
    with db.write_conn() as conn:
        if not _take(conn, nonce, now):
            return "challenge_used"
        moved = conn.execute(
            sa.update(KEY)
            .where(
                KEY.c.credential_id == credential_id,
                KEY.c.sign_count == seen_count,
                KEY.c.removed_at.is_(None),
            )
            .values(sign_count=new_count, last_used_at=now)
        )
    # the challenge stays used either way: a counter that moved meanwhile means another
    # approval with this passkey (or a copy of it) got in first; ask again from the start
    return "spent" if moved.rowcount == 1 else "counter_moved"


def _take(conn: sa.Connection, nonce: str, now: datetime) -> bool:
    gone = conn.execute(
        sa.delete(CHALLENGE).where(CHALLENGE.c.nonce == nonce, CHALLENGE.c.expires_at >= now)
    )
    return gone.rowcount == 1


__all__ = [
    "CHALLENGE",
    "KEY",
    "add",
    "by_credential",
    "challenge",
    "issue",
    "of_approver",
    "remove",
    "spend",
]
