"""Whether a server bound beyond loopback could be used by anyone (`gate serve` asks)."""

from __future__ import annotations

from gate.config.settings import Settings


def exposure_problem(settings: Settings) -> str | None:
    """Why a server bound beyond loopback would be of no use to anyone, or None.

    Off loopback there is no token-less local mode: with no `[[tokens]]` no agent can call
    it, and with no `[[approvers]]` (nor an admin token) nobody can decide what it asks.
    """
    server = settings.server
    if server.is_loopback:
        return None
    missing: list[str] = []
    if not settings.tokens:
        missing.append(
            "no [[tokens]], so no agent could call it (add one: `gate tokens new my-agent` "
            "prints its lines)"
        )
    if not settings.approvers and not any(t.role == "admin" for t in settings.tokens):
        missing.append(
            "no [[approvers]], so nobody could decide what it asks (add one: "
            'name = "alice", with password_hash from `gate users hash-password`)'
        )
    if not missing:
        return None
    return (
        f"refusing to serve on {server.host}, which other machines can reach: there are "
        + ", and ".join(missing)
        + "; or bind 127.0.0.1 to try gate on this machine alone"
    )
