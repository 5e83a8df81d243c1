"""PostgreSQL specifics of gate's engine (imported only for a PostgreSQL URL: psycopg is an
optional dependency).

SQLAlchemy reads a cursor's `description` after every statement, but for a statement it has
run before it only checks that the description is there: the result's columns come from the
metadata it cached on the first run. psycopg builds one `Column` object per result column on
every read of `description` (a request row has ~30), so each row-returning statement paid
for a description nobody looked at. `Cursor` here hands out a `Description` that builds
psycopg's columns only when something reads them.

PRIVATE (psycopg): the cursor subclasses override psycopg's `description` property and build
its columns through `psycopg.Cursor.description.fget` on a `pgresult` they hold. The public
alternative is the plain cursor (no `cursor_factory`): measured on this machine, a 38-column
statement whose description is read as SQLAlchemy reads it cost 107 us with it and 51 us
with these. Pinned below the next minor release in pyproject.toml;
`tests/core/test_library_privates.py` fails naming `Cursor.description` if a release moves it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, overload

import psycopg
from psycopg import pq
from psycopg.rows import TupleRow

#: result statuses that carry columns even with none (psycopg's own rule, e.g. `SELECT ;`)
_WITH_ROWS = frozenset(
    {pq.ExecStatus.TUPLES_OK, pq.ExecStatus.SINGLE_TUPLE, pq.ExecStatus.TUPLES_CHUNK}
)


class Description(Sequence[psycopg.Column]):
    """A cursor's description for one result, psycopg's columns built on first use.

    Its length is known at once (SQLAlchemy's "did rows come back" needs no more); indexing
    or iterating builds psycopg's own `Column` list, which must happen while the cursor still
    holds this result (SQLAlchemy reads it, when it does, right after the execute).
    """

    __slots__ = ("_columns", "_cursor", "_result")

    def __init__(self, cursor: Cursor, result: pq.abc.PGresult) -> None:
        self._cursor = cursor
        self._result = result
        self._columns: list[psycopg.Column] | None = None

    def _built(self) -> list[psycopg.Column]:
        if self._columns is None:
            if self._cursor.pgresult is not self._result:
                raise psycopg.InterfaceError("description read after the cursor moved on")
            self._columns = psycopg.Cursor.description.fget(self._cursor) or []  # type: ignore[attr-defined]
        return self._columns

    def __len__(self) -> int:
        return self._result.nfields

    @overload
    def __getitem__(self, index: int) -> psycopg.Column: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[psycopg.Column]: ...
    def __getitem__(self, index: int | slice) -> psycopg.Column | Sequence[psycopg.Column]:
        return self._built()[index]

    def __iter__(self) -> Iterator[psycopg.Column]:
        return iter(self._built())


class Cursor(psycopg.Cursor[TupleRow]):
    """psycopg's cursor, with a `Description` that costs nothing until it is read."""

    @property
    def description(self) -> Description | None:  # type: ignore[override]
        result = self.pgresult
        if result is None or not (result.nfields or result.status in _WITH_ROWS):
            return None
        return Description(self, result)


class RawCursor(psycopg.RawCursor[TupleRow]):
    """psycopg's cursor for `$1`-style SQL (`gate.store.direct`), with the same `Description`."""

    description = Cursor.description  # type: ignore[assignment]


def connect_args() -> dict[str, Any]:
    """psycopg connection arguments for gate's engine."""
    return {"cursor_factory": Cursor}


@contextmanager
def autocommitted(driver: psycopg.Connection[Any]) -> Iterator[None]:
    """Around a transaction's one statement: when nothing ran in the transaction yet, the
    statement is sent in autocommit, so it commits by itself and psycopg sends no BEGIN
    before it and no COMMIT after it (its `commit` of an idle connection sends nothing):
    two round trips fewer, ~30 us of gate's CPU each time. A statement that is one
    statement is atomic by itself; anything sent after it would be a transaction of its
    own, so callers use this only for the last statement before the commit, or for a read
    whose every use a later statement confirms (a decision's unlocked read)."""
    if driver.info.transaction_status != pq.TransactionStatus.IDLE:
        yield
        return
    driver.autocommit = True
    try:
        yield
    finally:
        with suppress(psycopg.Error):  # a broken connection is thrown away anyway
            driver.autocommit = False
