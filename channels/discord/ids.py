"""The custom_ids on gate's buttons, selects and modals: built here, and read back strictly.

A custom_id comes back in a signed interaction, but the signature proves only that Discord
sent it, not that gate put it on a card: anyone who can make Discord send an interaction
(a modified client, say) chooses its custom_id. So it is parsed strictly (a known verb, a
request id of gate's shape, bounded arguments, at most 100 characters) and trusted for
nothing but naming which request and which control; gate's pipeline decides who may act and
what the rule offers.

Shapes (`:`-separated, always starting with `gate`):

* `gate:approve:<request>`, `gate:reject:<request>`, `gate:edit:<request>`,
  `gate:acknowledge:<request>`: buttons;
* `gate:extend:<request>:<deadline in µs since the epoch>`: the deadline the card showed;
* `gate:reasons:<request>`, `gate:grant:<request>`: string selects (values: `r<index>`,
  `<scope>:<duration>`);
* `gate:rejectm:<request>:<reasons bitmask, hex>`, `gate:editm:<request>`,
  `gate:grantm:<request>:<scope>:<duration>`: the modals those open.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from channels.discord.markdown import MAX_CUSTOM_ID
from channels.inbound import deadline_from_micros

PREFIX = "gate"
BUTTONS = ("approve", "reject", "edit", "extend", "acknowledge")
SELECTS = ("reasons", "grant")
MODALS = ("rejectm", "editm", "grantm")
#: request ids are ULIDs (26 characters); anything longer or of other characters is not ours
MAX_REQUEST_ID = 40
#: a grant's duration as the rule offers it ("1800s"); bounded so a modal's id fits
MAX_DURATION = 12
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_HEX = frozenset("0123456789abcdef")
_ID_CHARS = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_-")


@dataclass(frozen=True)
class CustomId:
    """A custom_id read back: the control, the request, and the control's arguments."""

    verb: str
    request_id: str
    args: tuple[str, ...] = ()


def build(verb: str, request_id: str, *args: str) -> str:
    """A custom_id; ValueError if it would not fit Discord's 100 characters."""
    text = ":".join((PREFIX, verb, request_id, *args))
    if len(text) > MAX_CUSTOM_ID:
        raise ValueError(f"custom_id over {MAX_CUSTOM_ID} characters")
    return text


def parse(text: object, allowed: tuple[str, ...]) -> CustomId:
    """Read a custom_id of one of the `allowed` verbs; ValueError for anything else."""
    if not isinstance(text, str) or not 0 < len(text) <= MAX_CUSTOM_ID:
        raise ValueError("the custom_id is missing or too long")
    parts = text.split(":")
    if len(parts) < 3 or parts[0] != PREFIX or parts[1] not in allowed:
        raise ValueError("the custom_id is not one of gate's controls")
    verb, request_id, args = parts[1], parts[2], tuple(parts[3:])
    if not request_id_ok(request_id):
        raise ValueError("the custom_id names no valid request")
    if not _args_ok(verb, args):
        raise ValueError("the custom_id's arguments are not gate's")
    return CustomId(verb, request_id, args)


def _args_ok(verb: str, args: tuple[str, ...]) -> bool:
    """Each control's arguments, by shape: a deadline, a reasons mask, a grant choice."""
    if not all(a.isascii() and a.isalnum() for a in args):
        return False
    if verb == "extend":
        return len(args) == 1 and _deadline_ok(args[0])
    if verb == "rejectm":
        return len(args) == 1 and len(args[0]) <= 7 and all(c in _HEX for c in args[0])
    if verb == "grantm":
        scope, duration = args if len(args) == 2 else ("", "")
        return scope.isalpha() and len(scope) <= 16 and 0 < len(duration) <= MAX_DURATION
    return not args


def request_id_ok(value: str) -> bool:
    """Whether `value` has the shape of a gate request id."""
    return 0 < len(value) <= MAX_REQUEST_ID and all(c in _ID_CHARS for c in value)


def deadline_token(when: datetime) -> str:
    """A deadline as whole microseconds since the epoch: exact, and short enough to carry."""
    return str((when - _EPOCH) // _MICROSECOND)


def deadline_from(token: str) -> datetime:
    """The deadline an Extend button carried; ValueError when it is not one (digits of a
    time past what a datetime holds included: `channels.inbound.deadline_from_micros`)."""
    return deadline_from_micros(token)


def _deadline_ok(token: str) -> bool:
    try:
        deadline_from(token)
    except ValueError:
        return False
    return True


def reasons_mask(indexes: list[int]) -> str:
    """Picked preset reasons (indexes into the rule's list) as a hex bitmask."""
    mask = 0
    for index in indexes:
        mask |= 1 << index
    return format(mask, "x")


def reasons_from_mask(mask: str) -> list[str]:
    """The option values (`r<index>`) behind a bitmask; ValueError when it is not one."""
    # 25 options at most: seven hex digits hold them all.
    if not (mask.isascii() and 0 < len(mask) <= 7):
        raise ValueError("the reasons mask is not gate's")
    try:
        bits = int(mask, 16)
    except ValueError:
        raise ValueError("the reasons mask is not gate's") from None
    return [f"r{i}" for i in range(bits.bit_length()) if bits >> i & 1]
