"""Migrated SQLite files for tests, copied from one template per test process.

Migrating a new database costs about a quarter of a second of CPU, and nearly every test wants
one: the first call migrates a template once per process, and each call after that copies it
(a file copy is about a millisecond). A server started on the copy finds its schema current.
Tests of the migrations themselves start from an empty file instead (the `fresh_database`
mark of the `sqlite_url` and `db_url` fixtures).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

_template: list[Path] = []


def migrated_sqlite(path: Path) -> str:
    """Put a migrated gate database at `path` (replacing any file there); its SQLite URL."""
    shutil.copyfile(_template_file(), path)
    return f"sqlite:///{path}"


def _template_file() -> Path:
    if not _template:
        from gate.store.db import upgrade

        folder = Path(tempfile.mkdtemp(prefix="gate-test-template-"))
        atexit.register(shutil.rmtree, folder, True)
        path = folder / "gate.db"
        upgrade(f"sqlite:///{path}")
        _template.append(path)
    return _template[0]
