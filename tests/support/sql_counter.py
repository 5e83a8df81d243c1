"""Count the SQL statements and transactions a piece of code runs against a real engine.

The counts are deterministic (unlike timings), so each hot path has a test that fails when a
change adds a round trip. Statements are counted from SQLAlchemy's cursor events (what is
sent to the database); transactions from the connection's begin events, so a SQLite
`BEGIN IMMEDIATE` (sent by gate.db itself) and a PostgreSQL implicit BEGIN both count once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from gate.store import direct

#: transaction control (counted as transactions) and SQLite connection set-up
_IGNORED = ("BEGIN", "PRAGMA", "COMMIT", "ROLLBACK")


@dataclass
class Tally:
    """What ran while a `counting` block was open."""

    statements: list[str] = field(default_factory=list)
    transactions: int = 0

    @property
    def count(self) -> int:
        return len(self.statements)

    def __str__(self) -> str:
        lines = "\n".join(f"  {s[:160]}" for s in self.statements)
        return f"{self.count} statements in {self.transactions} transactions:\n{lines}"


@contextmanager
def counting(engine: sa.Engine) -> Iterator[Tally]:
    """Record statements and transactions on `engine` until the block ends."""
    tally = Tally()

    def on_execute(conn: Any, statement: str, params: Any) -> None:
        text = " ".join(statement.split())
        if not text.upper().startswith(_IGNORED):
            tally.statements.append(text)

    def on_begin(conn: Any) -> None:
        tally.transactions += 1

    direct.listen(engine, on_execute)
    sa.event.listen(engine, "begin", on_begin)
    try:
        yield tally
    finally:
        direct.remove(engine, on_execute)
        sa.event.remove(engine, "begin", on_begin)


def per_database(engine: sa.Engine, *, sqlite: int, postgres: int) -> int:
    """The statements expected on `engine`'s database: on PostgreSQL a change's trailing
    writes (request, audit event, cards, vote, NOTIFY) are one statement (`gate.store.batch`)."""
    return sqlite if engine.dialect.name == "sqlite" else postgres
