"""The `[server]` keys that size and time connections, and which database URLs gate opens.

`gate.config.settings.ServerSettings` inherits them, so they are written under `[server]`
like the rest; they live here to keep `gate.config.settings` within its size.
`gate.server.capacity` turns them into numbers at start-up.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ConnectionSettings(BaseModel):
    """How long a request may take to arrive, and how many connections gate holds."""

    model_config = ConfigDict(extra="forbid")

    #: a request's headers and body must arrive within this of the connection opening (or of
    #: its first byte on a kept-alive one), or the socket is closed: slow senders hold nothing
    request_read_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    #: an idle kept-alive connection is closed after this; clients reconnect transparently
    keep_alive_timeout_seconds: int = Field(default=5, ge=1, le=300)
    #: open sockets held at once; None (the default) follows the open-file limit (raised to
    #: its hard limit at start), minus what the database and logs need, up to 65,536
    max_connections: int | None = Field(default=None, ge=16)
    #: the longest one long-poll (`GET /v1/requests/{id}/wait`) is held; clients poll again.
    #: Long, so 10,000 waiting agents renew a few dozen long-polls a second, not hundreds; one
    #: held to it ends at a random point of its last fifth, so renewals do not come in bursts.
    #: Behind a proxy that cuts a quiet response sooner (nginx's `proxy_read_timeout` and AWS
    #: ALB's idle timeout are 60 s, Cloudflare's 100 s), set it under that proxy's limit:
    #: otherwise each long-poll ends in the proxy's 504 and `gate hook` and the SDK, which
    #: poll again after it, shorten their own slices to fit under it.
    max_wait_seconds: float = Field(default=300.0, gt=0, le=3600)
    #: connections long-polls may never take, kept for asks, decisions and the console;
    #: None (the default): a tenth of the connection cap, at least 32 (at most half of it)
    reserved_connections: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _reserve_leaves_room(self) -> ConnectionSettings:
        reserved, cap = self.reserved_connections, self.max_connections
        if reserved is not None and cap is not None and reserved >= cap:
            raise ValueError(
                f"reserved_connections ({reserved}) must be below max_connections ({cap}): "
                "long-polls need some of the connections"
            )
        return self


#: the name gate is installed under (`pip install gate-approvals`); the command is `gate`
DISTRIBUTION = "gate-approvals"
#: database URL schemes gate ships drivers for (psycopg 3 for PostgreSQL, stdlib sqlite3)
DATABASE_SCHEMES = ("sqlite", "sqlite+pysqlite", "postgresql", "postgres", "postgresql+psycopg")


def check_database_url(url: str) -> str:
    """`url` when gate can open that kind of database; ValueError naming the ones it can."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in DATABASE_SCHEMES:
        # Only the scheme is quoted back: the rest of a URL may hold a password.
        what = f"scheme {scheme[:30]!r}" if scheme else "URL (no scheme://)"
        hint = "use sqlite:///path/to/gate.db or postgresql://user:password@host/dbname"
        raise ValueError(f"unsupported database {what}: {hint}")
    if scheme.startswith("postgres"):
        _check_postgres_driver()
    return url


def _check_postgres_driver() -> None:
    """ValueError naming the extra to install when psycopg (the `postgres` extra) is missing."""
    try:
        import psycopg  # noqa: F401  (imported here, the driver SQLAlchemy will load)
    except ImportError as exc:
        raise ValueError(
            f"PostgreSQL needs the psycopg driver, which cannot be imported ({exc}): install "
            f"the postgres extra, pip install '{DISTRIBUTION}[postgres]' (from a clone: "
            "pip install '.[postgres]')"
        ) from None
