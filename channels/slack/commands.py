"""Slack's slash command `/gate link <code>`: how an approver binds their Slack id to gate.

The console's Identities page gives a signed-in approver a one-time code; they type
`/gate link ABCDE-23456` in Slack. Slack signs the command like an interaction (the same
signing secret), and its `user_id` is who typed it, so gate learns the Slack id from Slack
and the person from the console: the two are bound (`gate.decisions.identities`).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs

from gate.text import untrusted

#: what the answer says when the text is not a link command
USAGE = "Usage: /gate link <code>, with the code from the Identities page in gate."
# RE2 (linear whatever the text): a slash command's text is whatever the person typed
_USER = untrusted.compile(r"^[A-Z0-9]{1,32}$")
_LINK = untrusted.compile(r"(?i)^\s*link\s+([A-Za-z0-9][A-Za-z0-9 \-]{0,40})\s*$")


@dataclass(frozen=True)
class Command:
    """A verified slash command: who typed it and, for `link`, the code (None otherwise)."""

    user_id: str
    code: str | None


def parse_command(body: bytes) -> Command:
    """A verified slash command body (form-encoded) as a `Command`; ValueError when it has
    no usable user id."""
    fields = parse_qs(body.decode("utf-8"), keep_blank_values=True)
    user_id = (fields.get("user_id") or [""])[0]
    if not _USER.fullmatch(user_id):
        raise ValueError("the command names no Slack user")
    found = _LINK.fullmatch((fields.get("text") or [""])[0])
    code = found.group(1) if found else None  # the group always takes part in a match
    return Command(user_id, code.strip() if code is not None else None)
