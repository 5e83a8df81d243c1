"""The `[server]` keys that size and time connections (a part of `gate.config.settings`'s settings).

`gate.config.settings.ServerSettings` inherits them, so they are written under `[server]` like the
rest; they live here to keep `gate.config.settings` within its size. `gate.server.capacity` turns
them into numbers at start-up.
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
