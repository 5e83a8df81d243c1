"""The private parts of libraries gate leans on, each checked where a new release could move it.

Each is named where it is used, with the public alternative that was measured, and its
library is pinned below the next minor release in pyproject.toml. When a release moves
one, the test here fails naming it (and the file that uses it), instead of a server that
misbehaves: raise the pin only once this file passes on the new release.
"""

from __future__ import annotations

import asyncio
import inspect
import sqlite3
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine.default import DefaultDialect

from gate.store import rows
from gate.store.db import Database, upgrade


def _moved(private: str, used_in: str) -> str:
    return f"a library moved {private}, which {used_in} uses: see the comment there"


def test_sqlalchemy_connection_handle_dbapi_exception() -> None:
    handle = getattr(sa.Connection, "_handle_dbapi_exception", None)
    private = "sqlalchemy Connection._handle_dbapi_exception"
    assert callable(handle), _moved(private, "gate/store/direct.py")
    names = list(inspect.signature(handle).parameters)[1:6]
    assert names == ["e", "statement", "parameters", "cursor", "context"], _moved(
        private, "gate/store/direct.py"
    )


def test_sqlalchemy_generate_cache_key() -> None:
    statement = rows.SELECT_REQUEST
    generate = getattr(statement, "_generate_cache_key", None)
    private = "sqlalchemy ClauseElement._generate_cache_key"
    assert callable(generate), _moved(private, "gate/store/batch.py")
    assert generate() is not None, _moved(private, "gate/store/batch.py")


def test_sqlalchemy_dialect_do_begin(tmp_path: Path) -> None:
    private = "sqlalchemy Dialect.do_begin"
    assert list(inspect.signature(DefaultDialect.do_begin).parameters) == [
        "self",
        "dbapi_connection",
    ], _moved(private, "gate/store/db.py")
    url = f"sqlite:///{tmp_path / 'begin.db'}"
    upgrade(url)
    db = Database(url)
    try:
        with db.write_conn() as conn:
            driver = conn.connection.driver_connection
            assert isinstance(driver, sqlite3.Connection)
            # the driver begins nothing by itself (isolation_level None): only gate's
            # do_begin, called by SQLAlchemy as the transaction begins, can have
            assert driver.in_transaction, _moved(private, "gate/store/db.py")
    finally:
        db.dispose()


def test_psycopg_cursor_description() -> None:
    psycopg = pytest.importorskip("psycopg")
    private = "psycopg Cursor.description (a property) and Cursor.pgresult"
    described = inspect.getattr_static(psycopg.Cursor, "description", None)
    assert isinstance(described, property), _moved(private, "gate/store/postgres.py")
    assert callable(described.fget), _moved(private, "gate/store/postgres.py")
    assert hasattr(psycopg.Cursor, "pgresult"), _moved(private, "gate/store/postgres.py")
    assert hasattr(psycopg, "RawCursor"), _moved("psycopg RawCursor", "gate/store/postgres.py")


def test_fastapi_call_is_a_coroutine_function() -> None:
    from fastapi import FastAPI

    # GateAPI.__call__ overrides it without `async`, returning the coroutine it returns
    private = "FastAPI.__call__ (an async def returning the coroutine that answers)"
    assert inspect.iscoroutinefunction(FastAPI.__call__), _moved(private, "gate/api/lean.py")
    if sys.version_info < (3, 12):  # the marker lean.py sets on 3.11
        assert hasattr(asyncio.coroutines, "_is_coroutine"), _moved(
            "asyncio.coroutines._is_coroutine", "gate/api/lean.py"
        )


def test_uvicorn_protocol_internals() -> None:
    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from uvicorn.server import ServerState

    private = "uvicorn H11Protocol's attributes and methods"
    for method in ("connection_made", "data_received", "send_400_response"):
        assert callable(getattr(H11Protocol, method, None)), _moved(
            f"{private} ({method})", "gate/server/serve.py"
        )

    async def app(scope: object, receive: object, send: object) -> None:
        return None

    config = uvicorn.Config(app, log_config=None)
    loop = asyncio.new_event_loop()
    try:
        protocol = H11Protocol(config, ServerState(), {}, _loop=loop)
    finally:
        loop.close()
    for attribute in ("config", "connections", "cycle", "loop", "conn"):
        assert hasattr(protocol, attribute), _moved(
            f"{private} ({attribute})", "gate/server/serve.py"
        )
    assert callable(protocol.conn.next_event), _moved(
        f"{private} (conn.next_event)", "gate/server/serve.py"
    )
    httptools = pytest.importorskip("httptools")
    assert httptools is not None
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    for method in ("on_message_begin", "on_url", "on_header", "send_400_response"):
        assert callable(getattr(HttpToolsProtocol, method, None)), _moved(
            f"uvicorn HttpToolsProtocol.{method}", "gate/server/serve.py"
        )


def test_cel_extension_module() -> None:
    # gate.policy.cel_engine loads `cel.cel` without running the package's __init__
    from gate.policy import cel_engine

    private = "the cel package's extension module cel.cel"
    extension = sys.modules.get(cel_engine.EXTENSION)
    assert extension is not None, _moved(private, "gate/policy/cel_engine.py")
    assert callable(getattr(extension, "compile", None)), _moved(
        private, "gate/policy/cel_engine.py"
    )
