"""The console's sign-ins (`web_sign_in`): recorded, looked up and revoked by the digest of the
cookie's session id (`gate.web.signin` owns the rules; this module only the statements)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import col

from gate.store.db import Database
from gate.store.tables import WebSignIn


def record(
    db: Database,
    *,
    digest: str,
    approver: str,
    now: datetime,
    expires_at: datetime,
    auth: dict[str, Any],
    nonce: str | None,
) -> None:
    """Insert one sign-in, dropping the rows past their age in the same transaction.

    Raises `sqlalchemy.exc.IntegrityError` when `nonce` (a digest, unique) was used before.
    """
    with db.write() as s:
        # Rows past their age can never be used again: drop them while here.
        s.execute(sa.delete(WebSignIn).where(col(WebSignIn.expires_at) < now))
        s.add(
            WebSignIn(
                id=digest,
                approver=approver,
                created_at=now,
                expires_at=expires_at,
                auth=auth,
                nonce=nonce,
            )
        )


def find(db: Database, digest: str) -> WebSignIn | None:
    """The sign-in row with this digest, revoked or expired included."""
    with db.read() as s:
        return s.get(WebSignIn, digest)


def revoke(db: Database, digest: str, now: datetime) -> None:
    """Mark the sign-in revoked (once: a second revoke keeps the first time)."""
    with db.write() as s:
        s.execute(
            sa.update(WebSignIn)
            .where(col(WebSignIn.id) == digest)
            .where(col(WebSignIn.revoked_at).is_(None))
            .values(revoked_at=now)
        )
