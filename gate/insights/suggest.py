"""`gate policy suggest`: rules proposed from what people actually decided.

A proposal is built from one tool's decided calls that agree (all approved, or all
rejected) and share some argument values: those values become the rule's `when`, pinned
with `==`. An allow proposal needs at least `min_approvals` approvals by at least two
different people. Then the proposal's own TOML is loaded with gate's config loader and
compiled by gate's policy, and every call of that tool a person ever refused (rejected, or
approved only after editing its arguments) is run through it: if the proposed rule would
let one through, the proposal is narrowed to the one agent that made all its calls, and if
that still lets one through it is dropped and said why (`Suggestions.blocked`). A deny
proposal is checked the same way against every approval. Nothing here writes anything: the
operator copies a snippet into gate.toml, or does not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from gate.insights.suggest_rules import (
    Candidate,
    Refusals,
    build_rule,
    condition,
    inline,
    literal,
    surely_matches,
)
from gate.store import history
from gate.store.db import Database
from gate.store.records import DecidedCall
from gate.text import untrusted
from gate.text.untrusted import is_secret_key

Kind = Literal["allow", "deny"]
#: how many of the newest decisions a proposal lists as its evidence
EVIDENCE = 5
#: globs in a tool name would widen a `tools = [...]` pin beyond the tool that was asked
_GLOB = untrusted.compile(r"[*?\[\]]")
#: what a rule name may not hold (the tool and its values come from agents: RE2, linear)
_NOT_NAME = untrusted.compile(r"[^a-z0-9]+")
_PAST = {"allow": "allowed", "deny": "denied"}


@dataclass(frozen=True)
class Evidence:
    """One decision a proposal covers: the request, who decided it, when."""

    id: str
    who: tuple[str, ...]
    at: datetime
    status: str


@dataclass(frozen=True)
class Proposal:
    """One proposed rule and the history behind it."""

    kind: Kind
    name: str
    tool: str
    when: str
    toml: str
    #: the rules that asked these calls: the proposal goes above them (first match wins)
    asked_under: tuple[str, ...]
    covered: int
    per_day: float
    people: tuple[str, ...]
    last: tuple[Evidence, ...]
    #: covered calls by the rule that asked them
    by_rule: dict[str, int]


@dataclass
class Suggestions:
    """What `suggest` found: the proposals, and the candidates refused with the reason."""

    days: float
    decided: int
    min_approvals: int
    proposals: list[Proposal] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)

    def lost_by_rule(self) -> dict[str, int]:
        """Asks each rule would no longer make if every proposal were adopted."""
        lost: Counter[str] = Counter()
        for p in self.proposals:
            lost.update(p.by_rule)
        return dict(lost)


def suggest(
    calls: list[DecidedCall],
    history: list[DecidedCall],
    *,
    days: float,
    min_approvals: int,
) -> Suggestions:
    """Proposals from `calls` (the window), checked against `history` (every decided call of
    the same tools, at any time)."""
    found = Suggestions(days=days, decided=len(calls), min_approvals=min_approvals)
    by_tool: dict[str, list[DecidedCall]] = {}
    for call in calls:
        by_tool.setdefault(call.tool_name, []).append(call)
    past: dict[str, list[DecidedCall]] = {}
    for call in history:
        past.setdefault(call.tool_name, []).append(call)
    taken: set[str] = set()
    for tool in sorted(by_tool):
        if _GLOB.search(tool):
            if len(by_tool[tool]) < min_approvals:
                continue  # too few to propose anything: nothing held back to say
            found.blocked.append(
                f"{inline(tool)}: not proposed, its name has glob characters (* ? [ ]), so "
                "`tools = [...]` would name more tools than this one"
            )
            continue
        for kind in ("allow", "deny"):
            agree = [c for c in by_tool[tool] if _agrees(c, kind)]
            against = Refusals([c for c in past.get(tool, []) if _refutes(c, kind)])
            for candidate in _candidates(tool, agree, min_approvals):
                _consider(found, candidate, kind, against, taken, days)
    found.proposals.sort(key=lambda p: -p.covered)
    return found


def _agrees(call: DecidedCall, kind: str) -> bool:
    if kind == "allow":
        return call.status == "approved" and not call.edited
    return call.status == "rejected"


def _refutes(call: DecidedCall, kind: str) -> bool:
    """A call that the proposal of `kind` must not decide that way."""
    if kind == "allow":
        return call.status == "rejected" or call.edited
    return call.status == "approved"


def _people(calls: Iterable[DecidedCall], verdict: str) -> set[str]:
    return {who for c in calls for who, v in c.votes if v == verdict}


def _candidates(tool: str, agree: list[DecidedCall], need: int) -> list[Candidate]:
    """Clusters of agreeing calls, each pinned to every scalar argument its calls share;
    biggest first, so a wide rule is preferred to several narrow ones."""
    if len(agree) < need:
        return []
    pairs = {call.id: _pairs(call) for call in agree}
    seeds: dict[tuple[str, str], list[DecidedCall]] = {}
    for call in agree:
        for pair in pairs[call.id]:
            seeds.setdefault(pair, []).append(call)
    clusters: dict[tuple[tuple[str, str], ...], list[DecidedCall]] = {}
    for members in seeds.values():
        if len(members) < need:
            continue
        pins = tuple(sorted(set.intersection(*(pairs[c.id] for c in members))))
        clusters.setdefault(pins, members)
    if not any(call.tool_args for call in agree):
        clusters[()] = agree  # a tool called without arguments: the empty call is the pin
    ordered = sorted(clusters.items(), key=lambda kv: (-len(kv[1]), len(kv[0]), kv[0]))
    return [Candidate(tool=tool, pins=pins, calls=tuple(members)) for pins, members in ordered]


def _pairs(call: DecidedCall) -> set[tuple[str, str]]:
    """(key, CEL literal) of each top-level scalar argument a rule can pin."""
    found = set()
    for key, value in call.tool_args.items():
        if is_secret_key(key):
            continue  # `args.api_key == "..."` would print the key into gate.toml
        lit = literal(value)
        if lit is not None:
            found.add((key, lit))
    return found


def _consider(
    found: Suggestions,
    candidate: Candidate,
    kind: Kind,
    against: Refusals,
    taken: set[str],
    days: float,
) -> None:
    """Propose `candidate` if it is new, backed by two people, and safe against history."""
    fresh = [c for c in candidate.calls if c.id not in taken]
    if len(fresh) < found.min_approvals:
        return  # its calls are covered by a wider proposal already
    verdict = "approve" if kind == "allow" else "reject"
    people = _people(candidate.calls, verdict)
    if len(people) < 2:
        found.blocked.append(
            f"{kind} {candidate.describe()}: {len(candidate.calls)} decisions but all by "
            f"{', '.join(sorted(people)) or 'nobody recorded'}; two people must agree"
        )
        return
    name = _name(found, kind, candidate)
    agents = {c.agent_id for c in candidate.calls}
    narrowings = [None] + ([next(iter(agents))] if len(agents) == 1 and None not in agents else [])
    refusal = ""
    for agent in narrowings:
        # only calls with every pinned key (and the same string, where a string is pinned)
        # can match; one whose pinned values are all the same certainly does, uncompiled
        near = against.near(candidate.pins)
        crossing = next((c for c in near if surely_matches(c, candidate.pins, agent)), None)
        if crossing is None:
            built = build_rule(name, kind, candidate, agent)
            if built.problem:
                refusal = built.problem
                break
            crossing = next((c for c in near if built.decides(c)), None)
            if crossing is None:
                _propose(found, candidate, kind, built.when, built.toml, name, days, people)
                taken.update(c.id for c in candidate.calls)
                return
        refusal = (
            f"request {crossing.id} ({crossing.status}"
            f"{' after an edit' if crossing.edited else ''}, "
            f"{crossing.decided_at:%Y-%m-%d %H:%M}) would be {_PAST[kind]} by "
            f"`{condition(candidate.pins, agent)}`"
        )
    found.blocked.append(f"{kind} {candidate.describe()}: not proposed, {refusal}")


def _propose(
    found: Suggestions,
    candidate: Candidate,
    kind: Kind,
    when: str,
    toml: str,
    name: str,
    days: float,
    people: set[str],
) -> None:
    calls = sorted(candidate.calls, key=lambda c: c.decided_at, reverse=True)
    verdict = "approve" if kind == "allow" else "reject"
    by_rule = Counter(c.rule or "(no rule)" for c in calls)
    found.proposals.append(
        Proposal(
            kind=kind,
            name=name,
            tool=candidate.tool,
            when=when,
            toml=toml,
            asked_under=tuple(sorted(r for r in by_rule if r != "(no rule)")),
            covered=len(calls),
            per_day=len(calls) / days if days > 0 else float(len(calls)),
            people=tuple(sorted(people)),
            last=tuple(
                Evidence(
                    id=c.id,
                    who=tuple(w for w, v in c.votes if v == verdict),
                    at=c.decided_at,
                    status=c.status,
                )
                for c in calls[:EVIDENCE]
            ),
            by_rule=dict(by_rule),
        )
    )


def _name(found: Suggestions, kind: str, candidate: Candidate) -> str:
    """`suggested-allow-git-push-main-api`: the tool and its pinned values, made unique."""
    words = [candidate.tool, *(lit.strip('"') for _, lit in candidate.pins)]
    base = f"suggested-{kind}-" + _NOT_NAME.sub(lambda _: "-", "-".join(words).lower()).strip("-")
    base = base[:60].rstrip("-")
    taken = {p.name for p in found.proposals}
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    return name


def from_history(
    db: Database, *, now: datetime, window: timedelta, min_approvals: int
) -> Suggestions:
    """Suggestions from the calls decided in the `window` before `now`, checked against every
    call of the same tools decided at any time."""
    since = now - window
    calls = history.decided_calls(db, since=since)
    tools = {c.tool_name for c in calls}
    older = history.decided_calls(db, since=None, before=since, tools=tools) if tools else []
    days = window.total_seconds() / 86400
    return suggest(calls, calls + older, days=days, min_approvals=min_approvals)
