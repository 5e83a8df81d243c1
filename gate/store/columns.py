"""Column types the tables share: UTC datetimes on every database, statuses as plain strings."""

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.types import TypeDecorator
from sqlmodel import Column


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every database.

    SQLite keeps no offset, so values read back are re-attached to UTC; values written are
    converted to UTC first, so an aware datetime in any zone is stored correctly.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; pass an aware UTC datetime")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def status_column(default: str) -> Any:
    # Plain strings in the database (no native ENUM type): migrations stay simple and a new
    # state is a code change, not an ALTER TYPE.
    return Column(sa.String(16), nullable=False, default=default)
