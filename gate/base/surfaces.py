"""The surfaces a decision can come from: the installed channels, and how a sentence names
one."""

from __future__ import annotations

from functools import cache
from importlib.metadata import EntryPoint, entry_points

ENTRY_POINT_GROUP = "gate.channels"


#: surfaces that are part of gate itself, by the `via` they record
CORE_SURFACES = {
    "web": "the web console",
    "api": "the API",
    "cli": "the CLI",
    "timeout": "gate (deadline passed)",
    "agent": "the agent",
    "grant": "a time-boxed grant",
}


@cache
def available() -> dict[str, EntryPoint]:
    """Entry points of every installed channel, by name (read once per process)."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def surface_name(via: str | None) -> str:
    """How a decision's `via` reads in a sentence: "slack" -> "Slack", "api" -> "the API"."""
    if not via:
        return ""
    if via in CORE_SURFACES:
        return CORE_SURFACES[via]
    entry_point = available().get(via)
    try:
        found = entry_point.load() if entry_point is not None else None
    except Exception:  # a broken plugin must not break every sentence that names it
        found = None
    return str(getattr(found, "display_name", via)) if found is not None else via
