"""A `when` compiled and checked before it runs, for a rule or a route: CEL that does not
compile, cannot be true or false, fails on every call, or reads history wrongly is refused at
load with the key it came from."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gate.base.errors import ConfigError
from gate.policy import cel_engine, cel_shape, history
from gate.policy import check as policy_check


def compile_condition(
    when: str, *, source: str | None, key: str, history_cap: timedelta | None = None
) -> tuple[Any, policy_check.Checked, tuple[history.Term, ...]]:
    """A `when` compiled and checked before it runs (a rule's or a route's): its program and
    what the check found; ConfigError at `key` for text that is not CEL, that cannot be true
    or false, or that fails on every call."""
    try:
        program = cel_engine.compile_expression(when)
    except ValueError as exc:
        hint = policy_check.hint_for_syntax(when)
        raise ConfigError(
            f"`when` is not valid CEL: {exc}" + (f"\n  hint: {hint}" if hint else ""),
            source=source,
            key=key,
        ) from None
    if cel_shape.shape(when) == "other":
        raise ConfigError(
            f"`when` must be a condition that is true or false, but {when!r} gives a "
            "number, text, list or map; compare it, e.g. `args.amount > 50000`",
            source=source,
            key=key,
        )
    # the history terms first: a wrong one is named as such, not as an unknown function
    terms = history.terms_of(when, cap=history_cap or timedelta.max, source=source, key=key)
    if terms and history_cap is None:
        raise ConfigError(
            "`when` reads the call history, which only a rule's condition can: a route "
            "decides where a card goes before anything is counted",
            source=source,
            key=key,
        )
    checked = policy_check.check(when)
    if checked.problems:
        found = "\n  ".join(checked.problems)
        raise ConfigError(
            f"`when` {when!r} fails on every call or never matches:\n  {found}",
            source=source,
            key=key,
        )
    return program, checked, terms
