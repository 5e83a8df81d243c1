"""rows stored before input was checked are mended, so none can break a listing

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27

Requests and votes written before gate checked its input (or by another writer) can hold
what no surface can show: a lone surrogate in a JSON column (a "\\ud800" escape, which both
databases store), bytes that are not UTF-8 in a SQLite text column, a JSON column that does
not parse or has the wrong shape (`tool_args` a list), text longer than its column (SQLite
does not enforce lengths). Each is mended in place: lone surrogates and undecodable bytes
become U+FFFD, unparseable or misshapen JSON is kept as `{"unreadable": <its text>}` (or
`{"value": ...}`), long text is cut to its column with a trailing "…". A mended request's
`context` names the columns (`mended_by_migration`), and an approval of it binds the mended
arguments, which the agent's own call no longer hashes to: it is refused, never run
(fail closed). The audit trail is left as it was: its hashes cover what was written.

The code is this migration's own, so it mends what was there in 2026, whatever gate becomes.
"""

import json
import re
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LONE = re.compile("[\ud800-\udfff]")
#: (table, JSON columns and the shape each must have, text columns and their lengths)
_TABLES: dict[str, tuple[dict[str, type], dict[str, int]]] = {
    "confirmation_request": (
        {
            "tool_args": dict,
            "context": dict,
            "options": dict,
            "approvers": list,
            "approved_args": dict,
        },
        {
            "idempotency_key": 200,
            "tool_name": 200,
            "agent_id": 200,
            "user_id": 200,
            "session_id": 200,
            "org_id": 200,
            "summary": 1000,
            "rule": 200,
            "submitted_by": 200,
            "decided_by": 200,
            "decided_via": 50,
            "reason": 4000,
        },
    ),
    "vote": ({}, {"approver": 200, "comment": 4000, "via": 50}),
}


def _text(raw: Any) -> Any:
    if isinstance(raw, bytes | memoryview):
        raw = bytes(raw).decode("utf-8", "replace")
    return _LONE.sub("\ufffd", raw) if isinstance(raw, str) else raw


def _mended(value: Any) -> Any:
    if isinstance(value, str):
        return _LONE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_mended(v) for v in value]
    if isinstance(value, dict):
        return {_mended(k): _mended(v) for k, v in value.items()}
    return value


def _json(raw: Any, shape: type) -> tuple[Any, bool]:
    """(the column's value, mended or not) from its stored text."""
    text = _text(raw)
    if text is None:
        return None, False
    try:
        value = json.loads(text)
    except ValueError:
        return {"unreadable": text[:4000]} if shape is dict else [], True
    fixed = _mended(value)
    if fixed is not None and not isinstance(fixed, shape):  # JSON null: a nullable column
        fixed = {"value": fixed} if shape is dict else []
    return fixed, fixed != value or text != _text_of(raw)


def _text_of(raw: Any) -> Any:
    return (
        bytes(raw).decode("utf-8", "surrogateescape")
        if isinstance(raw, bytes | memoryview)
        else raw
    )


def upgrade() -> None:
    bind = op.get_bind()
    sqlite = bind.dialect.name == "sqlite"
    columns = sa.inspect(bind).get_columns
    for table, (json_columns, text_columns) in _TABLES.items():
        present = {c["name"] for c in columns(table)}
        jsons = {k: v for k, v in json_columns.items() if k in present}
        texts = {k: v for k, v in text_columns.items() if k in present}
        # SQLite hands text over as bytes (undecodable ones included); PostgreSQL's json
        # columns come as their text, never parsed by the driver here
        cast = "CAST({} AS BLOB)" if sqlite else "{}::text"
        listed = ", ".join(cast.format(c) + f" AS {c}" for c in [*jsons, *texts])
        rows = bind.exec_driver_sql(f"SELECT id, {listed} FROM {table}").mappings().all()
        for row in rows:
            changes: dict[str, Any] = {}
            for name, shape in jsons.items():
                value, mended = _json(row[name], shape)
                if mended:
                    changes[name] = value
            for name, length in texts.items():
                raw = row[name]
                value = _text(raw)
                if isinstance(value, str) and len(value) > length:
                    value = value[: length - 1] + "…"
                if value != _text_of(raw):
                    changes[name] = value
            if changes and table == "confirmation_request":
                context = changes.get("context") or _json(row["context"], dict)[0] or {}
                changes["context"] = {**context, "mended_by_migration": sorted(changes)}
            if changes:
                _write(bind, table, row["id"], changes, jsons, sqlite)


def _write(
    bind: sa.Connection,
    table: str,
    row_id: Any,
    changes: dict[str, Any],
    jsons: dict[str, type],
    sqlite: bool,
) -> None:
    params = {
        name: json.dumps(value) if name in jsons and value is not None else value
        for name, value in changes.items()
    }
    cast = "{}" if sqlite else "CAST({} AS json)"
    sets = ", ".join(
        f"{name} = " + (cast.format(f":{name}") if name in jsons else f":{name}") for name in params
    )
    statement = sa.text(f"UPDATE {table} SET {sets} WHERE id = :row_id")
    bind.execute(statement, {**params, "row_id": row_id})


def downgrade() -> None:
    # what was mended is not kept: the rows stay readable
    pass
