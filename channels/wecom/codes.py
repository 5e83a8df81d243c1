"""The ResponseCodes WeCom hands out: each updates a card once, for 72 hours.

`message/send` returns one code for a new interactive card, and every click on it brings
another. A card can only be replaced by spending one, so gate keeps what it was given:

* the post's code travels in the message reference gate stores, and is kept for the card's
  final state (approved, rejected, expired...), which must always reach everyone;
* clicks' codes are kept here, in memory, by task id, and refresh a pending card (a vote, a
  new deadline). A pending card with no click code to spend keeps its last state: its
  buttons still work, and gate's answer to a click is checked against the request anyway.

Memory is per process: on another replica, or after a restart, pending refreshes wait for the
next click, while final updates still have the post's code.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

#: a code is good for 72 hours; forget ours well before, in case of clock skew
CODE_LIFETIME_SECONDS = 70 * 3600.0
#: cards remembered (a few days of requests); the oldest go first
MAX_TASKS = 4096
#: the separator in a message reference: "<task id> <response code>" (task ids have none)
REF_SEP = " "
#: gate stores message references in 200 characters
MAX_REF = 200


def make_ref(task: str, code: str) -> str:
    """The reference gate stores for a posted card (the code left out if it would not fit)."""
    ref = f"{task}{REF_SEP}{code}" if code else task
    return ref if len(ref) <= MAX_REF else task


def read_ref(ref: str) -> tuple[str, str]:
    """(task id, the post's response code or "")."""
    task, _, code = ref.partition(REF_SEP)
    return task, code


class Codes:
    """Unspent click codes by task id, newest last; post codes already spent."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._codes: OrderedDict[str, list[tuple[float, str]]] = OrderedDict()
        self._spent: OrderedDict[str, None] = OrderedDict()

    def add(self, task: str, code: str) -> None:
        """Keep a click's code for `task` (a repeated delivery's code is kept once)."""
        if not code or code in self._spent:
            return
        kept = self._codes.setdefault(task, [])
        if all(c != code for _, c in kept):
            kept.append((self.clock(), code))
        self._codes.move_to_end(task)
        while len(self._codes) > MAX_TASKS:
            self._codes.popitem(last=False)

    def take(self, task: str) -> str | None:
        """The newest unexpired code for `task`, removed; None when there is none."""
        kept = self._codes.get(task, [])
        oldest = self.clock() - CODE_LIFETIME_SECONDS
        while kept:
            at, code = kept.pop()
            if at >= oldest:
                return code
        return None

    def give_back(self, task: str, code: str) -> None:
        """An update failed before WeCom spent `code`: keep it for the next try."""
        self._codes.setdefault(task, []).append((self.clock(), code))

    def spend(self, code: str) -> None:
        """Remember that a post's code was spent (its reference still carries it)."""
        self._spent[code] = None
        while len(self._spent) > MAX_TASKS:
            self._spent.popitem(last=False)

    def spent(self, code: str) -> bool:
        """Whether this process already spent a post's code."""
        return code in self._spent
