"""A click on a card, in gate's neutral terms: what every channel hands the decision pipeline."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

#: what a click asks for; `check` asks only whether this person may act now (before a
#: channel opens a form for a reason or edits); `acknowledge` says "I'm on it" without
#: deciding (`gate.decisions.acknowledging`)
Action = Literal["approve", "reject", "extend", "check", "acknowledge"]


@dataclass(frozen=True)
class Click:
    """One person's action on a card, translated from the platform's shape to gate's.

    `user_id` is the platform's id of the person (never a display name): gate maps it to an
    `[[approvers]]` entry by the channel's key (`slack = "U01..."`). `edits` holds only the
    arguments the person changed, by name, already parsed from what they typed; `grant` is
    a (scope, duration) pair such as ("session", "30m"); `extend_by` a duration ("15m") and
    `extend_from` the deadline the card showed, so a click delivered twice, to any replica,
    extends once. `args_chars` is how many characters of the call as gate renders it (the
    text of `gate.rendering.as_text`, measured by `gate.rendering.shown_chars`) the channel's
    card shows whole: an approval counts only when the whole rendered call fits (and no mask
    in it could hide code), and a channel that does not say approves nothing.
    """

    channel: str
    user_id: str
    request_id: str
    action: Action
    comment: str | None = None
    reasons: tuple[str, ...] = ()
    edits: dict[str, Any] | None = None
    grant: tuple[str, str] | None = None
    extend_by: str | None = None
    extend_from: datetime | None = None
    args_chars: int | None = None


@dataclass(frozen=True)
class LinkAnswer:
    """What a channel tells the person who sent a one-time link code (`ChannelContext.link`,
    answered by `gate.decisions.identities.complete_link`): whether it bound their id, and
    the words to show them."""

    linked: bool
    message: str
