"""A rule's (or a route's) `when`: checked at load, run on one call, and its failures told
(the first at once, then at most once a minute per rule: fail closed, never silently)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("gate.policy")


class ConditionFailures:
    """Logs each rule whose `when` fails at run time: the first failure at once, then at most
    once a minute per rule, saying how many failed meanwhile (a rule failing on every call
    must not flood the log, nor fall silent)."""

    #: seconds between two reports of one rule
    EVERY = 60.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()  # evaluate runs on the event loop and in worker threads
        #: rule name -> (when it was last reported, failures since)
        self._seen: dict[str, tuple[float, int]] = {}

    def report(self, rule: str, action: str, shadow: bool, failure: str, tool_name: str) -> None:
        """Note one failure of the `when` of `rule` (an `action` rule, or a route when
        `action` is "route"; `shadow`: a shadow rule's) on a call of `tool_name`."""
        now = self._clock()
        with self._lock:
            last, since = self._seen.get(rule, (None, 0))
            if last is not None and now - last < self.EVERY:
                self._seen[rule] = (last, since + 1)
                return
            self._seen[rule] = (now, 0)
        outcome = {
            "allow": "the allow rule was skipped",
            "ask": "gate asked a person",
            "route": "the route matched and the rule's own channels got the card too",
        }.get(action, "the call was denied")
        if shadow:  # a shadow rule: only what it would have answered
            outcome = (
                f"in shadow mode {outcome.replace('gate', 'gate would have')}; no answer changed"
            )
        more = f"; {since} more failure(s) since the last report" if since else ""
        log.warning(
            "%s %r: `when` %s on a call of %r, so %s (fail closed)%s",
            *("route" if action == "route" else "rule", rule, failure, tool_name[:100]),
            *(outcome, more),
        )


def run(program: Any, activation: dict[str, Any]) -> tuple[object, str | None]:
    """The condition's result on one call, and what went wrong (None: a clean true or false)."""
    try:
        result = program.execute(activation)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # any CEL failure, a Rust panic included
        return None, f"failed ({short(exc)})"
    if result is True or result is False:
        return result, None
    # a guard that is not a boolean cannot be trusted either way
    return result, f"returned {type(result).__name__} {short_value(result)}"


def short_value(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, KeyError):
        text = f"no such key {text}"
    return text[:200]
