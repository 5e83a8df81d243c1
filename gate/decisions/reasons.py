"""The reasons a transition records: what the audit trail keeps and the waiting model is
told about why a request ended as it did."""

from __future__ import annotations

from datetime import timedelta

from gate.base.surfaces import surface_name


def decision(verb: str, approver: str, via: str, comment: str | None) -> str:
    """ "Approved by alice in Slack: fine", "Rejected by bob in the web page (no reason
    given)": a person's decision, where they made it and what they said."""
    text = f"{verb} by {approver} in {surface_name(via)}"
    if comment:
        return f"{text}: {comment}"
    return text + (" (no reason given)" if verb == "Rejected" else "")


def humanise(delta: timedelta) -> str:
    """ "9m", "1h 30m", "8m 58s": how long a request waited (at least "1s")."""
    seconds = max(1, round(delta.total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n]
    return " ".join(parts)
