"""`gate policy lint`: rules that can never match, tool patterns no call reaches, untested rules.

Rules are tried in order and the first match wins (gate.policy.rules), so an earlier rule with no
`when` takes every call whose tool it matches: a later rule naming only such tools never
decides anything. Matching is `Rule.tool_matches`, so lint minds both of its halves:

* globs: `mcp__github__*` covers `mcp__github__merge_*` (`gate.policy.globs.covers`);
* variants (gate.policy.toolnames): an `ask` or `deny` rule also catches a name's case, width and
  look-alike variants, an `allow` rule only the name as written. A `deny` rule for `bash`
  therefore shadows a later rule for `Bash`, while an `allow` rule for `Bash` leaves a later
  `deny` for `Bash` alive (it still catches `bash`, `ＢＡＳＨ`).

Lint says only what it can show: where it cannot tell (an unusual character set), it stays
silent rather than guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gate.policy import globs
from gate.policy import matchers as hook_matchers
from gate.policy.rules import Rule

#: the longest tool name `POST /v1/gate` accepts (`GateCall.tool_name`)
_LONGEST_TOOL_NAME = 200

Kind = Literal["never-matches", "unreachable-pattern", "unsent", "untested"]


@dataclass(frozen=True)
class Finding:
    """One thing lint found, in words."""

    kind: Kind
    rule: str
    message: str


def lint(
    rules: tuple[Rule, ...],
    exercised: set[str] | None = None,
    hooks: Sequence[hook_matchers.Installed] = (),
) -> list[Finding]:
    """What is wrong with the order and patterns of `rules`; with `hooks` (gate's agent hooks
    installed here), the tools they never send; with `exercised` (the rules some case was
    decided by), the rules no case exercised."""
    findings: list[Finding] = []
    dead_rules: set[str] = set()
    for index, rule in enumerate(rules):
        why = [_dead(rules[:index], rule, p) for p in range(len(rule.tools))]
        if all(why):
            dead_rules.add(rule.name)
            reasons = "; ".join(f"{rule.tools[p]!r}: {w}" for p, w in enumerate(why))
            message = f"rule {rule.name!r} can never match: {reasons}"
            findings.append(Finding("never-matches", rule.name, message))
            continue
        for p, w in enumerate(why):
            if w:
                message = (
                    f"rule {rule.name!r}: tool pattern {rule.tools[p]!r} is never reached: {w}"
                )
                findings.append(Finding("unreachable-pattern", rule.name, message))
    # a tool the agent's hook never sends to gate never reaches any rule (`gate policy check`
    # warns of the same; lint counts it, so CI fails on it)
    named = [(rule.name, rule.tools) for rule in rules]
    findings.extend(Finding("unsent", "", text) for text in hook_matchers.uncovered(named, hooks))
    if exercised is not None:
        for rule in rules:
            if rule.name not in exercised and rule.name not in dead_rules:
                message = f"rule {rule.name!r} is not exercised: no case is decided by it"
                findings.append(Finding("untested", rule.name, message))
    return findings


def _dead(earlier: tuple[Rule, ...], rule: Rule, p: int) -> str | None:
    """Why no call reaches `rule` through its p-th tool pattern (None: some call may)."""
    pattern = rule.tools[p]
    if globs.shortest(pattern) > _LONGEST_TOOL_NAME:
        return f"it matches only names longer than {_LONGEST_TOOL_NAME} characters"
    if not pattern:
        return "an empty pattern matches no tool name"
    for first in earlier:
        if first.when is not None:
            continue  # a condition may be false, and then the call goes on down the list
        how = _catches(first, rule, p)
        if how:
            return f"rule {first.name!r} (no `when`) comes first and {how}"
    return None


def _catches(first: Rule, later: Rule, p: int) -> str | None:
    """How `first` takes every call `later` could match through its p-th pattern (None: it
    may not)."""
    pattern, folded = later.tools[p], later.folded[p]
    widens = first.action != "allow"  # ask and deny rules catch variants too
    as_written = any(globs.covers(outer, pattern) for outer in first.tools)
    # `?` and `[...]` count characters, which folding may change (NFKC makes "ﬁ" two): only
    # a pattern of literals and `*` is sure to catch, folded, every name it matches as written
    plain = "?" not in pattern and "[" not in pattern
    folded_in = widens and any(globs.covers(outer, folded) for outer in first.folded)
    if not as_written and not (plain and folded_in):
        return None
    if later.action != "allow":
        # the later rule also matches variants of its names: the first must catch those too
        everything = any(globs.matches_everything(outer) for outer in first.tools)
        if not everything and not folded_in:
            return None
    if as_written:
        return "catches every tool name it matches"
    return (
        "catches every name it matches as a case or look-alike variant "
        f"({first.action} rules catch variants: gate/policy/toolnames.py)"
    )
