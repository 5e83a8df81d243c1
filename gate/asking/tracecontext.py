"""The W3C `traceparent` an agent-side caller sends gate, so gate's spans join its trace.

From the caller's OpenTelemetry context when its process already uses OpenTelemetry (looked
up in `sys.modules`, never imported: importing it would cost every hook run), else from the
`TRACEPARENT` environment variable (the convention for passing a trace to a child process,
which is what `gate hook` is to its agent). A malformed value is not sent.
"""

from __future__ import annotations

import os
import sys

_HEX = frozenset("0123456789abcdef")


def traceparent() -> str | None:
    """The caller's current `traceparent`, or None when it has none."""
    propagate = sys.modules.get("opentelemetry.propagate")
    if propagate is not None:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)  # the active span's, through the process's propagators
        found = carrier.get("traceparent")
        if found and well_formed(found):
            return found
    given = os.environ.get("TRACEPARENT", "").strip().lower()
    return given if well_formed(given) else None


def headers() -> dict[str, str]:
    """`{"traceparent": ...}` when there is one, else empty: for a request's headers."""
    found = traceparent()
    return {"traceparent": found} if found is not None else {}


def well_formed(value: str) -> bool:
    """True for a version-00 `traceparent` with non-zero ids (W3C Trace Context)."""
    parts = value.split("-")
    if len(parts) != 4 or [len(p) for p in parts] != [2, 32, 16, 2]:
        return False
    if not all(set(p) <= _HEX for p in parts) or parts[0] == "ff":
        return False
    return parts[1] != "0" * 32 and parts[2] != "0" * 16
