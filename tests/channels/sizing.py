"""Arguments whose rendering is a given number of characters, for tests at a card's limit.

gate's rendering is not linear in a value's length (a very long line gets a flag saying how
long it is), so the size is found by search, through `gate.rendering.shown_chars`: the same
measure gate's check on an approval and every card use.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from gate.rendering import shown_chars


def filled(
    tool: str,
    limit: int,
    make: Callable[[int], dict[str, Any]],
    *,
    watched: Collection[str] = (),
    slack: int = 8,
) -> dict[str, Any]:
    """`make(n)` for the largest `n` whose rendering as a `tool` call (`watched`: the
    arguments the rule reads, marked in it) is at most `limit` characters, and at least
    `limit - slack`: at the limit, not far under it."""

    def size(args: dict[str, Any]) -> int:
        return shown_chars(tool, args, watched=watched)

    low, high = 0, limit
    while low < high:  # the largest n that fits: the size only grows with n
        middle = (low + high + 1) // 2
        if size(make(middle)) <= limit:
            low = middle
        else:
            high = middle - 1
    args = make(low)
    found = size(args)
    assert limit - slack <= found <= limit, (found, limit)
    return args
