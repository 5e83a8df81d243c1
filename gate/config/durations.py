"""Durations as gate.toml, forms and requests write them ("90s", "15m", "1h30m", "2d"): one
parser for all (a part of `gate.config.settings`, apart so the settings modules it is split into can
all use it; import it from `gate.config.settings`)."""

from __future__ import annotations

import math
from datetime import timedelta

from gate.text import untrusted

# Durations come from requests and forms too: RE2, so a long digit run cannot backtrack.
_DURATION_PART = untrusted.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
#: the longest duration gate accepts anywhere (timeouts, grants, extend). Ten years is far
#: beyond any approval deadline, and keeps `now + duration` well inside datetime's range
#: (year 9999), so a huge value is refused with a message instead of overflowing later.
MAX_DURATION = timedelta(days=3650)


def parse_duration(value: str | int | float | timedelta) -> timedelta:
    """Parse "90s", "15m", "1h30m", "2d" (or a number of seconds) into a timedelta.

    Raises ValueError for anything else, for zero or less, and for more than MAX_DURATION.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        seconds = _duration_seconds(str(value))
    if math.isnan(seconds) or seconds <= 0:
        raise ValueError("a duration must be positive")
    if seconds > MAX_DURATION.total_seconds():
        raise ValueError(f"a duration may be at most {MAX_DURATION.days}d (ten years)")
    return value if isinstance(value, timedelta) else timedelta(seconds=seconds)


def _duration_seconds(value: str) -> float:
    text = value.strip().replace(" ", "")
    pos, seconds = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        # float() of a long digit run is inf, not an error: the bound check refuses it.
        seconds += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if not text or pos != len(text):
        shown = value if len(value) <= 40 else value[:40] + "..."
        raise ValueError(
            f"{shown!r} is not a duration; write it like '30s', '15m', '1h30m' or '2d'"
        )
    return seconds
