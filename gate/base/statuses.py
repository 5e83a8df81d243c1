"""Status names, ids and times every record shares (the tables are `gate.store.tables`)."""

from __future__ import annotations

import enum
from datetime import UTC, datetime

from ulid import ULID


def utcnow() -> datetime:
    """Now, timezone-aware UTC."""
    return datetime.now(UTC)


def new_id() -> str:
    """A new sortable id (ULID, 26 characters)."""
    return str(ULID())


class RequestStatus(enum.StrEnum):
    pending = "pending"
    approved = "approved"
    rejected = "rejected"
    expired = "expired"
    cancelled = "cancelled"

    @property
    def is_final(self) -> bool:
        return self is not RequestStatus.pending


class Verdict(enum.StrEnum):
    approve = "approve"
    reject = "reject"


class DeliveryKind(enum.StrEnum):
    post = "post"
    update = "update"


class DeliveryStatus(enum.StrEnum):
    pending = "pending"
    sent = "sent"
    dead = "dead"


class GrantStatus(enum.StrEnum):
    active = "active"
    expired = "expired"
    revoked = "revoked"
    #: a counted grant whose last use was taken
    used_up = "used_up"
