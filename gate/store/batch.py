"""A change's trailing writes, sent to the database together.

A change ends with writes whose results nobody reads before the commit: the new request,
its audit event, its card rows, a vote, the NOTIFY that wakes the other replicas. On
PostgreSQL every statement costs gate ~75 us of CPU whatever it does (SQLAlchemy's
execution context and psycopg's, in Python) plus a round trip to a server process on the
same cores. Inside a batch (`GateService.changing` opens one on PostgreSQL) `write` holds
them, and `send` sends them as ONE statement, each write a data-modifying CTE, just before
the commit: an ask's four writes cost one statement, a decision's four after its
compare-and-set one. Without a batch (SQLite, which has no data-modifying CTEs and whose
statements cost ~20 us with no round trip; or any transaction that did not open one) `write`
executes at once, exactly as before.

All parts of one statement see the same snapshot and are applied together, so the rules for
code inside a batch are:

* `write` only statements whose results nobody reads before `send`: a compare-and-set whose
  row count decides what happens next is executed on the connection as always;
* a write's statement names each value as a bind parameter (`.values(col=bindparam(...))`),
  none taken implicitly from the keys of the parameters;
* a write that reads a table (`INSERT ... SELECT`) names it (`reads=`): parts still held that
  write that table are sent first, so it sees them as it would one by one; a read of a
  table through the connection does the same with `before_reading`;
* at most one part of a statement returns rows (a second one sends the first);
* at most one part of a statement writes a table (a second one sends the first): PostgreSQL
  runs a statement's parts in no set order, so two inserts into one table could take their
  ids in the other order, and the audit chain is ordered by id (a decision that made a
  grant wrote its `grant_created` event before its `approved` one, and `gate audit verify`
  reported the chain broken).

A database error in the statement (a unique key two asks raced for) is raised by `send`,
inside the transaction, and rolls all of it back: as one by one, nothing of it is kept.

A part can be `required`: an UPDATE returning one boolean column `ok` that must change a row
and return true, or the whole statement fails (`gate_require`, migration 0008) and `send`
raises `Unmet`. A decision made on a row read without its lock ends this way when another
change of the request got in first (`gate.store.rows.checked_cas_of`): none of its writes are kept,
and the decision is made again under the lock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.sql import visitors
from sqlalchemy.sql.dml import UpdateBase
from sqlmodel import Session

from gate.store import direct

#: in `Session.info` while a batch is open: the parts held so far
_KEY = "gate_batch"
#: the SQLSTATE `gate_require` raises (migration 0008)
_UNMET = "GTCAS"


class Unmet(Exception):
    """A `required` part found the row changed: nothing the statement wrote was kept."""


#: told the rows a part returns, once they are known
Returned = Callable[[Sequence[Any]], None]


@dataclass(frozen=True)
class _Part:
    statement: sa.Executable
    params: Mapping[str, Any]
    returned: Returned | None
    #: the table this part writes (None for a SELECT, e.g. NOTIFY)
    writes: sa.Table | None
    required: bool = False


@dataclass
class _Held:
    parts: list[_Part] = field(default_factory=list)


def begin(session: Session) -> None:
    """Hold the trailing writes of `session`'s transaction until `send` (PostgreSQL)."""
    session.info[_KEY] = _Held()


def write(
    session: Session,
    statement: sa.Executable,
    params: Mapping[str, Any],
    *,
    returned: Returned | None = None,
    reads: sa.Table | None = None,
    required: bool = False,
) -> None:
    """Execute `statement` with `params` in `session`'s transaction: now, or with the batch.

    `returned` is told the rows the statement returns; `reads` names a table the statement
    reads, so that writes to it held by the batch are sent first. `required`: see the
    module's docstring (only inside a batch).
    """
    held: _Held | None = session.info.get(_KEY)
    if required and held is None:
        raise TypeError("a required part needs a batch: gate_require runs in its statement")
    if held is None:
        result = direct.execute(session.connection(), statement, params)
        if returned is not None:
            returned(result.all())
        return
    if reads is not None:
        before_reading(session, reads)
    writes = _written(statement)
    if (returned is not None and any(p.returned is not None for p in held.parts)) or (
        writes is not None and any(p.writes is writes for p in held.parts)
    ):
        send(session)
    held.parts.append(_Part(statement, params, returned, writes, required))


def holding(session: Session) -> bool:
    """True while `session`'s transaction has a batch open (its writes wait for `send`)."""
    return _KEY in session.info


def before_reading(session: Session, table: sa.Table) -> None:
    """Send the held writes first if any of them writes `table` (the caller reads it)."""
    held: _Held | None = session.info.get(_KEY)
    if held is not None and any(p.writes is table for p in held.parts):
        send(session)


def send(session: Session, *, last: bool = False) -> None:
    """Execute the writes held so far, as one statement; the batch stays open.

    `last` says the transaction commits next: with nothing run in it before (an ask's
    usual case), that one statement is the whole transaction (see `direct.execute`).
    """
    held: _Held | None = session.info.get(_KEY)
    if held is None or not held.parts:
        return
    parts, held.parts = held.parts, []
    if len(parts) == 1 and not parts[0].required:
        (part,) = parts
        statement, params = part.statement, part.params
    else:
        statement = _fused(tuple((p.statement, p.required) for p in parts))
        params = {f"p{i}_{key}": v for i, p in enumerate(parts) for key, v in p.params.items()}
    # the ORM's own pending rows would be flushed after it, so they rule that out
    last = last and not (session.new or session.dirty or session.deleted)
    try:
        found = direct.execute(session.connection(), statement, params, last=last).all()
    except sa.exc.DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) == _UNMET:
            raise Unmet(str(exc.orig)) from exc
        raise
    for part in parts:
        if part.returned is not None:
            # the fused statement's outer join gives one row of NULLs when nothing was written
            part.returned([row for row in found if row[0] is not None])


def insert(table: sa.Table, columns: Sequence[str]) -> sa.Insert:
    """`INSERT INTO table (columns...)` naming each value as a bind parameter of the column's
    name and type (what a batch's parts need). Inline: a new row's id is not fetched back
    (no implicit `RETURNING id`)."""
    values = {name: sa.bindparam(name, type_=table.c[name].type) for name in columns}
    return sa.insert(table).values(values).inline()


def _written(statement: sa.Executable) -> sa.Table | None:
    if isinstance(statement, UpdateBase):
        table = statement.table
        assert isinstance(table, sa.Table)
        return table
    return None


#: fused statements built so far, by the identity of their parts (a handful of shapes; two
#: threads building the same one at once store equal statements, either serves)
_FUSED: dict[tuple[tuple[int, bool], ...], tuple[Any, sa.Select[Any]]] = {}


def _fused(shape: tuple[tuple[sa.Executable, bool], ...]) -> sa.Select[Any]:
    """One statement running each (statement, required) of `shape` (each as CTE `w<i>` with
    parameters `p<i>_...`).

    Built once per shape, so SQLAlchemy compiles it once and finds it in its cache after.
    """
    key = tuple((id(s), required) for s, required in shape)
    found = _FUSED.get(key)
    if found is not None:
        return found[1]
    statements = tuple(s for s, _ in shape)
    ctes = [_renamed(s, f"p{i}_").cte(f"w{i}") for i, s in enumerate(statements)]
    # SELECT parts (NOTIFY) run only when read: the anchor row reads each of them once
    selects = [c for c, s in zip(ctes, statements, strict=True) if isinstance(s, sa.Select)]
    modifying = [c for c, s in zip(ctes, statements, strict=True) if not isinstance(s, sa.Select)]
    # each required part is read by the anchor too, through gate_require: VOLATILE, so
    # PostgreSQL neither skips it nor pulls the anchor into the outer query
    checks = [
        sa.func.gate_require(sa.select(c.c.ok).scalar_subquery()).label(f"required{i}")
        for i, (c, (_, required)) in enumerate(zip(ctes, shape, strict=True))
        if required
    ]
    returning = [
        c
        for c, (s, required) in zip(ctes, shape, strict=True)
        if isinstance(s, UpdateBase) and len(s.exported_columns) > 0 and not required
    ]
    anchor = sa.select(*(c.c[0] for c in selects), *checks, sa.literal(1).label("anchor"))
    if selects:
        anchor = anchor.select_from(*selects)
    if returning:
        (rows,) = returning
        base = anchor.subquery("anchor")
        fused = sa.select(*rows.c).select_from(base.outerjoin(rows, sa.true()))
        modifying.remove(rows)
    else:
        fused = anchor
    fused = fused.add_cte(*modifying)
    # PRIVATE (SQLAlchemy): `_generate_cache_key` is how SQLAlchemy itself decides whether a
    # statement can be cached (None: compiled again on every execution). No public API says
    # so; the alternative measured is to drop the check, and a part that makes the fused
    # statement uncacheable (a multi-row VALUES) then costs a compile per decision on the
    # path through SQLAlchemy (~1 ms) with nothing to show it. Pinned in pyproject.toml;
    # tests/core/test_library_privates.py fails naming it if a release moves it.
    if fused._generate_cache_key() is None:  # e.g. a multi-row VALUES among the parts
        raise TypeError(
            "a fused statement SQLAlchemy cannot cache would be compiled on every call: "
            + ", ".join(type(s).__name__ for s in statements)
        )
    # kept with the statements, so their ids cannot be reused by other objects
    _FUSED[key] = (shape, fused)
    return fused


def _renamed(statement: sa.Executable, prefix: str) -> Any:
    """`statement` with each named bind parameter renamed `prefix + name` (anonymous ones,
    such as literals, stay: SQLAlchemy keeps those apart itself)."""

    def rename(element: Any, **_: Any) -> Any:
        if isinstance(element, sa.BindParameter) and not element.unique:
            assert element.value is None and element.callable is None, element.key
            return sa.bindparam(prefix + element.key, type_=element.type)
        return None

    options: dict[str, Any] = {}
    return visitors.replacement_traverse(
        cast(visitors.ExternallyTraversible, statement), options, rename
    )
