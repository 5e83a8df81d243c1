"""The hot paths' statements, run straight on the database driver's cursor.

Every statement an ask, a decision or a card's mark runs costs SQLAlchemy's execution
context on top of the driver's own work: ~70 us of CPU on PostgreSQL (a cache-key walk of
the statement, the compiled-cache lookup, `construct_params`, the cursor result's metadata
and row wrappers), more than psycopg's execute and fetch together. The statements of the hot
paths are fixed `sa.Executable` objects built at import (`gate.store.rows`, `gate.store.marks`,
`gate.store.batch`'s fused ones), so here each is compiled once per database dialect, and each
execution hands the driver the compiled SQL with the parameters put through the same bind
processors SQLAlchemy would use, and puts the rows through the same result processors.

What stays SQLAlchemy's:
* the transaction: `execute` runs inside the caller's `sa.Connection` transaction (begun,
  committed and rolled back by SQLAlchemy, so SQLite's `BEGIN IMMEDIATE` hook still applies);
* errors: a driver error goes through the connection's own handling, so it is raised as the
  same `sa.exc.DBAPIError` subclass and a lost connection invalidates the pool's connection;
* nothing of SQLAlchemy's statement events: a listener on `before_cursor_execute` sees only
  the statements that still go through SQLAlchemy. Tracing, and the test suite's statement
  counter, listen through `listen` instead, which sees every statement the store sends on
  either path. (Until this was added, any SQLAlchemy event listener switched this path off,
  so a traced server ran slower code than an untraced one, and the statement counts were
  taken on the path production does not run.)

On PostgreSQL the compiled SQL's `%(name)s` placeholders become `$1`, `$2`... once, and the
statement runs on psycopg's raw cursor with the values in that order: psycopg then neither
parses the query for placeholders nor reorders a mapping on every execution (~10 us each).

A statement this module cannot run exactly as SQLAlchemy would (expanding `IN` parameters,
escaped bind names, a result column whose key is not an identifier) also takes SQLAlchemy's
path, decided once per statement.

SQLAlchemy API used here: the compiled statement's documented attributes (`string`, `binds`,
`bind_names`, `positiontup`, `params`, `post_compile_params`, `literal_execute_params`,
`escaped_bind_names`), the statement's `selected_columns` / `exported_columns`, and each
type's `dialect_impl(...).bind_processor` / `.result_processor`. One private remains,
`Connection._handle_dbapi_exception` (see `execute`); `tests/core/test_library_privates.py`
fails naming it if a SQLAlchemy release moves it, and pyproject.toml pins SQLAlchemy below
the next minor release.
"""

from __future__ import annotations

import re
import threading
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.dml import UpdateBase, ValuesBase
from sqlalchemy.sql.selectable import SelectBase

__all__ = ["Listener", "Rows", "execute", "listen", "remove"]


class Rows:
    """What a statement returned: its rows (read at once) and its row count, with the few
    methods of SQLAlchemy's result the hot paths use."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def all(self) -> list[Any]:
        """Every row."""
        return self._rows

    def first(self) -> Any:
        """The first row, or None."""
        return self._rows[0] if self._rows else None

    def one(self) -> Any:
        """The only row; `sa.exc.NoResultFound` or `MultipleResultsFound` otherwise."""
        if not self._rows:
            raise sa.exc.NoResultFound("No row was found when one was required")
        if len(self._rows) > 1:
            raise sa.exc.MultipleResultsFound("Multiple rows were found when one was required")
        return self._rows[0]

    def scalar(self) -> Any:
        """The first column of the first row, or None."""
        return self._rows[0][0] if self._rows else None

    def scalars(self) -> list[Any]:
        """The first column of every row."""
        return [row[0] for row in self._rows]


class _RowBase(tuple):  # type: ignore[type-arg]
    """A result row: a tuple whose columns are also attributes, and `_mapping` as on
    SQLAlchemy's rows."""

    __slots__ = ()
    #: the column names as the database gave them (`_fields` are the attribute names)
    _names: tuple[str, ...]

    @property
    def _mapping(self) -> dict[str, Any]:
        return dict(zip(self._names, self, strict=True))


@dataclass
class _Compiled:
    """One statement compiled for one dialect, with what its executions need."""

    sql: str
    #: the values of the parameters the statement itself holds (`.limit(1)`, literals)
    defaults: dict[str, Any]
    #: the parameters every execution must give
    required: frozenset[str]
    #: the parameters in the order the SQL takes them (SQLite's `?`, PostgreSQL's `$n`)
    order: tuple[str, ...] | None
    binds: dict[str, Callable[[Any], Any]]
    types: tuple[Any, ...]
    #: the class of its rows: a named tuple of the result's column names, as the database
    #: described them at the first execution (the labels in the SQL, `anon_1` for an
    #: unlabelled expression: what SQLAlchemy's rows are keyed by)
    row: type[Any] | None
    #: (column index, processor) of the result columns that have one; read at the first
    #: execution, from the driver's description of the columns
    results: list[tuple[int, Callable[[Any], Any]]] | None = field(default=None)


#: a statement the driver path cannot run exactly as SQLAlchemy would
_UNSUPPORTED: Any = object()

_cache: dict[tuple[int, str, frozenset[str] | None], tuple[sa.Executable, Any]] = {}
_cache_lock = threading.Lock()
#: statements are module constants or cached fused ones; this bounds a mistake
_MAX_CACHED = 2000
#: in a pooled connection's `info`: (its driver connection, the cursor made for it)
_CURSOR = "gate_direct_cursor"


def execute(
    conn: sa.Connection,
    statement: sa.Executable,
    params: Mapping[str, Any],
    *,
    last: bool = False,
    outside: bool = False,
) -> Rows:
    """Run `statement` with `params` in `conn`'s transaction and return its rows, as
    `conn.execute` would (see the module's docstring for when it is SQLAlchemy's path).

    `last` says nothing runs after it before the commit; `outside` says it need not run in
    the transaction at all (a read whose every use a later write confirms). On PostgreSQL
    either, when nothing ran in the transaction yet, goes in autocommit
    (`gate.store.postgres.autocommitted`): no `BEGIN` before it, and for `last` no `COMMIT`.
    """
    if not conn.in_transaction():
        return _through_sqlalchemy(conn, statement, params)
    dialect = conn.dialect
    compiled = _compiled(statement, dialect, params)
    if compiled is _UNSUPPORTED:
        return _through_sqlalchemy(conn, statement, params)
    missing = compiled.required.difference(params)
    if missing:
        raise sa.exc.InvalidRequestError(f"A value is required for bind parameter {min(missing)!r}")
    values = {**compiled.defaults, **params}
    for name, process in compiled.binds.items():
        values[name] = process(values[name])
    sent: Mapping[str, Any] | Sequence[Any] = (
        values if compiled.order is None else tuple(values[name] for name in compiled.order)
    )
    if _listeners:
        _tell(conn, compiled.sql, sent)
    cursor = _cursor(conn)
    try:
        if (last or outside) and dialect.name == "postgresql":
            from gate.store.postgres import autocommitted  # psycopg is there with PostgreSQL only

            with autocommitted(cursor.connection):
                cursor.execute(compiled.sql, sent)
        else:
            cursor.execute(compiled.sql, sent)
        found = cursor.fetchall() if cursor.description is not None else []
    except Exception as exc:  # the connection's own handling raises (see the docstring)
        conn.connection.info.pop(_CURSOR, None)  # that handling closes the cursor
        # PRIVATE (SQLAlchemy): what `conn.execute` does with a driver error (wrap it as the
        # matching `sa.exc.DBAPIError`, invalidate the pool on a lost connection). The
        # public alternative, running the statement through `conn.exec_driver_sql`, builds
        # the execution context this module exists to skip (~70 us a statement, measured
        # on PostgreSQL); errors are rare, so only this line leans on the private.
        conn._handle_dbapi_exception(exc, compiled.sql, sent, cursor, None)
    if found:
        found = _processed(compiled, dialect, cursor.description, found)
    return Rows(found, cursor.rowcount)


#: told (connection, SQL, parameters) of each statement the store sends, on either path
Listener = Callable[[sa.Connection, str, Any], None]
#: (engine, listener, its SQLAlchemy-side wrapper): empty unless something traces
_listeners: list[tuple[sa.Engine, Listener, Callable[..., None]]] = []


def listen(engine: sa.Engine, listener: Listener) -> None:
    """Tell `listener` of every statement sent on `engine`'s connections: the ones this
    module sends to the driver and the ones that go through SQLAlchemy (through its
    `before_cursor_execute` event), each once. What tracing should use."""

    def through_sqlalchemy(
        conn: sa.Connection, _cursor: Any, sql: str, params: Any, *_: Any
    ) -> None:
        listener(conn, sql, params)

    sa.event.listen(engine, "before_cursor_execute", through_sqlalchemy)
    _listeners.append((engine, listener, through_sqlalchemy))


def remove(engine: sa.Engine, listener: Listener) -> None:
    """Stop telling `listener` (added by `listen` for `engine`)."""
    for entry in list(_listeners):
        if entry[0] is engine and entry[1] is listener:
            _listeners.remove(entry)
            sa.event.remove(engine, "before_cursor_execute", entry[2])


def _tell(conn: sa.Connection, sql: str, params: Any) -> None:
    engine = conn.engine
    for listening, listener, _ in tuple(_listeners):
        if listening is engine:
            listener(conn, sql, params)


def _cursor(conn: sa.Connection) -> Any:
    """The driver connection's cursor for this module, made once per connection: a new
    cursor per statement costs psycopg ~8 us. It is used by one thread at a time (the one
    that holds the connection), and its result is read whole before it runs another."""
    pooled = conn.connection
    driver = pooled.driver_connection
    kept = pooled.info.get(_CURSOR)
    if kept is not None and kept[0] is driver:
        return kept[1]
    assert driver is not None
    if conn.dialect.name == "postgresql":
        from gate.store.postgres import RawCursor  # psycopg is there with PostgreSQL only

        cursor: Any = RawCursor(driver)
    else:
        cursor = driver.cursor()
    pooled.info[_CURSOR] = (driver, cursor)
    return cursor


def _through_sqlalchemy(
    conn: sa.Connection, statement: sa.Executable, params: Mapping[str, Any]
) -> Rows:
    result = conn.execute(statement, dict(params))
    found = list(result.all()) if result.returns_rows else []
    return Rows(found, result.rowcount)


def _compiled(statement: sa.Executable, dialect: Dialect, params: Mapping[str, Any]) -> Any:
    # An INSERT or UPDATE without explicit values sets the columns its parameters name.
    keys = frozenset(params) if isinstance(statement, ValuesBase) else None
    key = (id(statement), dialect.name, keys)
    cached = _cache.get(key)
    if cached is not None and cached[0] is statement:
        return cached[1]
    compiled = _compile(statement, dialect, keys)
    with _cache_lock:
        if len(_cache) >= _MAX_CACHED:
            _cache.clear()
        # the statement is kept with its entry: its id cannot be reused while cached
        _cache[key] = (statement, compiled)
    return compiled


def _compile(statement: sa.Executable, dialect: Dialect, keys: frozenset[str] | None) -> Any:
    compiled: Any = cast(Any, statement).compile(
        dialect=dialect, column_keys=sorted(keys) if keys is not None else None
    )
    if (
        compiled.post_compile_params
        or compiled.literal_execute_params
        or compiled.escaped_bind_names
        or dialect.paramstyle not in ("qmark", "pyformat")  # SQLite's and psycopg's
    ):
        return _UNSUPPORTED
    binds = compiled.binds
    required = frozenset(name for name, bind in binds.items() if bind.required)
    if any(binds[name].key != name for name in required):
        return _UNSUPPORTED  # the caller's key is not the name sent: SQLAlchemy maps it
    columns = _result_columns(statement)
    if columns is None:
        return _UNSUPPORTED
    positional = compiled.positiontup
    sql = compiled.string
    if dialect.name == "postgresql" and positional is None:
        sql, positional = numbered(sql)
    return _Compiled(
        sql=sql,
        defaults={name: value for name, value in compiled.params.items() if name not in required},
        required=required,
        order=tuple(positional) if positional is not None else None,
        binds={  # by the name each parameter has in the SQL (`bind_names`)
            name: process
            for bind, name in compiled.bind_names.items()
            if (process := bind.type.dialect_impl(dialect).bind_processor(dialect)) is not None
        },
        types=tuple(column.type for column in columns),
        row=None,
    )


def _result_columns(statement: sa.Executable) -> Sequence[Any] | None:
    """The columns `statement` returns, in order (None: not a statement known to say)."""
    if isinstance(statement, SelectBase):
        return list(statement.selected_columns)
    if isinstance(statement, UpdateBase):
        return list(statement.exported_columns)  # its RETURNING columns (none without)
    return None


#: a named placeholder of psycopg's paramstyle, or an escaped percent sign
_PYFORMAT = re.compile(r"%\((\w+)\)s|%%")


def numbered(sql: str) -> tuple[str, tuple[str, ...]]:
    """`sql` in psycopg's `%(name)s` style as PostgreSQL's own `$1, $2...` (a name used
    twice is one number), with the names in number order; `%%` becomes `%`."""
    numbers: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "%"
        return f"${numbers.setdefault(name, len(numbers) + 1)}"

    return _PYFORMAT.sub(number, sql), tuple(numbers)


def _processed(
    compiled: _Compiled, dialect: Dialect, description: Any, found: list[Any]
) -> list[Any]:
    processors = compiled.results
    if processors is None:
        processors = [
            (i, process)
            for i, (type_, column) in enumerate(zip(compiled.types, description, strict=True))
            if (process := type_.dialect_impl(dialect).result_processor(dialect, column[1]))
            is not None
        ]
        compiled.row = _row_class(tuple(str(column[0]) for column in description))
        compiled.results = processors
    assert compiled.row is not None
    make = compiled.row._make
    if not processors:
        return [make(values) for values in found]
    rows = []
    for values in found:
        processed = list(values)
        for i, process in processors:
            processed[i] = process(processed[i])
        rows.append(make(processed))
    return rows


def _row_class(names: tuple[str, ...]) -> type[Any]:
    """A tuple class whose columns are also attributes named `names` (a name that cannot be
    one, or a repeated one, is reachable through `_mapping` only, as on SQLAlchemy's rows)."""
    attributes = namedtuple("Row", names, rename=True)  # type: ignore[misc]
    return type("Row", (_RowBase, attributes), {"__slots__": (), "_names": names})
