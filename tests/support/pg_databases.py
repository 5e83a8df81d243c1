"""PostgreSQL databases for tests: each test gets one of its own, already migrated.

Creating a database from the migrated template costs PostgreSQL about 0.2 s of CPU (it copies
and WAL-logs every page of the catalog), and dropping it more; some 350 tests a run want one.
So a test process keeps the databases its tests are done with and hands them out again, emptied:

* **Isolation is the same as a new database.** After a test, its servers are stopped and every
  connection to its database is ended; then the database's schema is compared with the
  template's (tables, columns, constraints, indexes, functions, triggers, sequences, the
  migration version, per-database settings, prepared transactions). Any difference, or a check
  that fails, and the database is dropped as before; otherwise every table but
  `alembic_version` is emptied and every sequence starts again, so the next test sees exactly
  what a copy of the template holds (the migrations write one row, the version).
* **A test's URL dies with it.** A database is renamed to a new unique name each time it is
  handed out: a server or engine a test left behind that tries its old URL finds no such
  database, as it did when the database was dropped, and cannot write into the next test's.
* Tests of the migrations themselves (the `fresh_database` mark) get an empty database,
  created and dropped as before.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import psycopg
import sqlalchemy as sa
from psycopg import sql

#: one row per schema object the migrations make, so any test that changed the schema (a
#: migration test, an ALTER) is caught and its database dropped instead of reused
_SCHEMA = """
SELECT md5(string_agg(item, E'\n' ORDER BY item)) FROM (
  SELECT format('rel %s %s %s %s %s %s', n.nspname, c.relname, c.relkind, c.relpersistence,
                c.relrowsecurity, coalesce(c.reloptions::text, ''))
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
     AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%'
  UNION ALL
  SELECT format('col %s %s %s %s %s', a.attrelid::regclass, a.attname,
                format_type(a.atttypid, a.atttypmod), a.attnotnull,
                coalesce(pg_get_expr(d.adbin, d.adrelid), ''))
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE n.nspname = 'public' AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT format('con %s %s %s', conrelid::regclass, conname, pg_get_constraintdef(oid))
    FROM pg_constraint WHERE connamespace = 'public'::regnamespace
  UNION ALL
  SELECT 'idx ' || pg_get_indexdef(i.indexrelid)
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
   WHERE c.relnamespace = 'public'::regnamespace
  UNION ALL
  SELECT 'fn ' || pg_get_functiondef(p.oid)
    FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace AND p.prokind = 'f'
  UNION ALL
  SELECT format('trg %s %s %s', tgrelid::regclass, tgname, tgenabled)
    FROM pg_trigger WHERE NOT tgisinternal
  UNION ALL
  SELECT format('seq %s %s %s %s', seqrelid::regclass, seqstart, seqincrement, seqcycle)
    FROM pg_sequence
  UNION ALL
  SELECT 'ext ' || extname FROM pg_extension
  UNION ALL
  SELECT 'version ' || version_num FROM alembic_version
  UNION ALL
  SELECT 'setting ' || array_to_string(s.setconfig, ',')
    FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase
   WHERE d.datname = current_database()
  UNION ALL
  SELECT 'prepared ' || gid FROM pg_prepared_xacts WHERE database = current_database()
) AS schema(item)
"""

#: the tables a test may have written to (all but the migrations' own), and the sequences
_TABLES = """
SELECT c.relname FROM pg_class c
 WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'
   AND c.relname <> 'alembic_version'
"""
_RESTART_SEQUENCES = """
SELECT setval(s.seqrelid, s.seqstart, false) FROM pg_sequence s
  JOIN pg_class c ON c.oid = s.seqrelid WHERE c.relnamespace = 'public'::regnamespace
"""


def _libpq(url: sa.URL) -> str:
    """`url` as libpq (psycopg) reads it."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def _test_name() -> str:
    return f"gate_test_{uuid.uuid4().hex[:12]}"


class PostgresDatabases:
    """The migrated databases of one test process on one server, reused between tests."""

    def __init__(self, admin_url: str, template: str) -> None:
        """`admin_url`: a SQLAlchemy URL of the server (`postgresql+psycopg://...`)."""
        self.admin_url = sa.make_url(admin_url)
        self.template = template
        self._admin = psycopg.connect(self._conninfo(self.admin_url.database), autocommit=True)
        self._free: list[str] = []
        #: made by `migrated`, so dropped by `close` (a pool on another's template keeps it)
        self._owns_template = False
        self._schema = self._fingerprint(template)
        #: how many databases were made, reused and dropped for a changed schema (for the docs'
        #: figures; a test reads them to see that reuse happens)
        self.created = self.reused = self.discarded = 0

    def url(self, name: str) -> str:
        """The SQLAlchemy URL of database `name` on this server."""
        return self.admin_url.set(database=name).render_as_string(hide_password=False)

    def _conninfo(self, name: str | None) -> str:
        return _libpq(self.admin_url.set(database=name))

    def _fingerprint(self, name: str) -> str | None:
        try:
            with psycopg.connect(self._conninfo(name), autocommit=True) as conn:
                row = conn.execute(_SCHEMA).fetchone()
        except psycopg.Error:
            return None  # alembic_version gone, or any other surprise: not reusable
        return str(row[0]) if row else None

    def lend(self) -> str:
        """A migrated database under a name no test has used; its name."""
        name = _test_name()
        while self._free:
            if self._rename(self._free.pop(), name):
                self.reused += 1
                return name
        self._admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(self.template)
            )
        )
        self.created += 1
        return name

    def _rename(self, pooled: str, name: str) -> bool:
        rename = sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
            sql.Identifier(pooled), sql.Identifier(name)
        )
        for _ in range(50):
            try:
                self._admin.execute(rename)
                return True
            except psycopg.errors.ObjectInUse:
                # the reset's own session, ended but not yet gone: a matter of milliseconds
                self._end_connections(pooled)
                time.sleep(0.01)
        self._drop(pooled)
        return False

    def give_back(self, name: str) -> None:
        """End every connection to `name`, then keep it emptied if its schema is the
        template's, or drop it."""
        self._end_connections(name)
        if self._fingerprint(name) == self._schema and self._empty(name):
            self._free.append(name)
            return
        self.discarded += 1
        self._drop(name)

    def _empty(self, name: str) -> bool:
        try:
            with psycopg.connect(self._conninfo(name), autocommit=True) as conn:
                tables = [row[0] for row in conn.execute(_TABLES)]
                with conn.transaction():
                    # foreign keys are checked by triggers, which this role skips: the
                    # tables empty in any order, and all of them do
                    conn.execute("SET LOCAL session_replication_role = replica")
                    for table in tables:
                        conn.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(table)))
                    conn.execute(_RESTART_SEQUENCES)
        except psycopg.Error:
            return False
        return True

    def _end_connections(self, name: str) -> None:
        self._admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )

    def _drop(self, name: str) -> None:
        self._admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )

    @classmethod
    def migrated(cls, admin_url: str) -> PostgresDatabases:
        """A new template on the server at `admin_url` (SQLAlchemy URL), migrated to head."""
        from gate.store.db import upgrade

        name = f"gate_template_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(_libpq(sa.make_url(admin_url)), autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        upgrade(sa.make_url(admin_url).set(database=name).render_as_string(False))
        databases = cls(admin_url, name)
        databases._owns_template = True
        return databases

    def close(self) -> None:
        """Drop the kept databases and the template (at the end of the test process)."""
        while self._free:
            self._drop(self._free.pop())
        if self._owns_template:
            self._drop(self.template)
        self._admin.close()


def temporary_database(
    databases: PostgresDatabases, stop_servers: Callable[[], None]
) -> Iterator[str]:
    """A migrated database of the test's own for the length of the generator; its URL."""
    name = databases.lend()
    try:
        yield databases.url(name)
    finally:
        # Servers of this test still hold pooled connections: stop them first, or their sweep
        # and pump would run against a database being emptied.
        stop_servers()
        databases.give_back(name)
