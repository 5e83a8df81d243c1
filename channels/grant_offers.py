"""The grants a chat card offers ("approve, and allow the same for a while"), the same choices
on every chat channel, and reading a clicked choice back. `channels.decisions` re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass

from gate.decisions.readmodel import RequestView

#: the grant length offered first ("approve, and allow the same for 30 minutes")
GRANT_DEFAULT_SECONDS = 1800
SCOPE_WORDS = {
    "call": "this exact call",
    #: completed by the pinned argument names (`grant_choices`)
    "pattern": "calls with the same",
    "session": "this tool in this session",
    "agent": "this tool for this agent",
}


@dataclass(frozen=True)
class GrantChoice:
    """One "approve, and allow the same for a while" choice the rule offers."""

    scope: str
    duration: str
    label: str


def _human(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def grant_choices(view: RequestView) -> list[GrantChoice]:
    """The grants offered for this request: each scope the rule allows, for 30 min and for the
    rule's longest (max_grant)."""
    if view.status != "pending":
        return []
    cap = int(view.offers.max_grant.total_seconds())
    lengths = sorted({min(GRANT_DEFAULT_SECONDS, cap), cap})
    choices = []
    for scope in view.offers.grant_scopes:
        if scope not in SCOPE_WORDS:
            continue
        if (scope == "session" and not view.session_id) or (scope == "agent" and not view.agent_id):
            continue  # nothing to tie the grant to
        pinned = view.offers.grant_pin
        if scope == "pattern" and not all(name in view.tool_args for name in pinned):
            continue  # an argument the rule pins is missing: nothing to pin it to
        words = SCOPE_WORDS[scope] + (f" {', '.join(pinned)}" if scope == "pattern" else "")
        for seconds in lengths:
            label = f"Approve + allow {words} for {_human(seconds)}{_counted(view)}"
            choices.append(GrantChoice(scope, f"{seconds}s", label))
    return choices


def _counted(view: RequestView) -> str:
    # a chat choice takes the rule's most uses (`max_grant_uses`); the console picks fewer
    uses = view.offers.max_grant_uses
    if uses is None:
        return ""
    return ", once" if uses == 1 else f", {uses} uses"


def parse_grant(value: str) -> tuple[str, str]:
    """A grant choice's `scope:duration` value; ValueError when it is not one."""
    scope, _, duration = value.partition(":")
    if scope not in SCOPE_WORDS or not duration:
        raise ValueError(f"not a grant choice: {value[:40]!r}")
    return scope, duration
