"""`gate policy test`: a file of example calls, each with what policy must answer.

A cases file is TOML, like gate.toml: one `[[cases]]` table per call, with the call as an
agent sends it and an `expect` table saying what must happen:

    [[cases]]
    name = "rm in Bash asks"
    tool = "Bash"
    args = { command = "rm -rf build" }
    expect = { decision = "ask", rule = "risky-bash", approvers = ["alice"] }

A shadow rule (`mode = "shadow"`, `gate.policy.shadow`) never answers, so `decision` and `rule` are
the live policy's; `expect.shadow` checks what shadow rules would have answered, by name
(`shadow = { "ask-reads" = "ask" }`; `{}`: no shadow rule would have matched).

Each case is decided by the code the server runs for `POST /v1/gate`: the call is validated
as a `GateCall` (the route's body), turned into facts by `CallFacts.of` and evaluated by
`Policy.evaluate`; the approvers are the rule's, expanded by `Policy.expand_approvers`, and
the grant scopes those `Decision.offers` freezes onto the request. Nothing is re-implemented
here, so a case that passes is answered the same way live (before any grant: a grant an
approver attached earlier turns a live `ask` into `allow`).

A case has no past: every history term (`gate.policy.history`) reads 0 unless the case
supplies it, `history = { 'history.count("deploy_*", "1h")' = 3 }`, each key a term as a rule
writes it (spacing and the window's spelling aside: "60m" is "1h"). A key no rule uses is a
miss, so a typo cannot make a case pass.

A bad cases file raises `ConfigError` naming the file and the case; a case whose answer
differs is an `Outcome` with its `misses`.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from xml.etree import ElementTree

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gate.base.errors import ConfigError
from gate.config.settings import MAX_DURATION
from gate.inputs.bodies import GateCall
from gate.policy import history
from gate.policy.rules import CallFacts, Policy

#: a case's key -> the `POST /v1/gate` field it fills
_CALL_FIELDS = {
    "tool": "tool_name",
    "args": "tool_args",
    "agent": "agent_id",
    "user": "user_id",
    "session": "session_id",
    "org": "org_id",
    "context": "context",
    "metadata": "metadata",
}
_CASE_KEY = {field: key for key, field in _CALL_FIELDS.items()}
#: `rule = ""` in `expect`: no rule may match (the call is allowed by default)
NO_RULE = ""


class Expect(BaseModel):
    """What must happen to a case's call; a key left out is not checked."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["allow", "deny", "ask"]
    rule: str | None = None
    approvers: list[str] | None = None
    grant_scopes: list[Literal["call", "pattern", "session", "agent"]] | None = None
    #: shadow rule name -> what it would have answered (only the rules named are compared)
    shadow: dict[str, Literal["allow", "deny", "ask"]] | None = None


class _CaseEntry(BaseModel):
    """One `[[cases]]` table as written."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    tool: Any = None
    args: Any = None
    agent: Any = None
    user: Any = None
    session: Any = None
    org: Any = None
    context: Any = None
    metadata: Any = None
    #: a history term as written -> the value it reads for this case (others read 0)
    history: dict[str, int | float] | None = None
    expect: Expect


@dataclass(frozen=True)
class Case:
    """A call and what policy must answer, with where it was written."""

    name: str
    number: int
    call: GateCall
    expect: Expect
    #: the history the case supplies: each term with its value
    history: tuple[tuple[history.Term, history.Number], ...] = ()


@dataclass(frozen=True)
class Answer:
    """What gate answers a call: as `POST /v1/gate` says it, plus how policy got there."""

    decision: Literal["allow", "deny", "ask"]
    rule: str | None
    approvers: tuple[str, ...]
    grant_scopes: tuple[str, ...]
    reason: str
    trail: tuple[str, ...]
    #: what each shadow rule that matched would have answered: rule name -> answer
    shadow: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Miss:
    """One expectation a case's answer broke."""

    what: str
    expected: str
    got: str


@dataclass(frozen=True)
class Outcome:
    """A case run: its answer and what differed from the expectation (nothing: it passed)."""

    case: Case
    answer: Answer
    misses: tuple[Miss, ...]

    @property
    def passed(self) -> bool:
        return not self.misses


def load_cases(path: Path) -> list[Case]:
    """Read and check a cases file; a ConfigError names the file and the case."""
    source = str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("file not found", source=source) from None
    except OSError as exc:
        raise ConfigError(f"cannot be read: {exc.strerror or exc}", source=source) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start})", source=source) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", source=source) from None
    extra = sorted(set(data) - {"cases"})
    if extra:
        raise ConfigError(f"unknown key(s) {extra}; a cases file has only [[cases]]", source=source)
    entries = data.get("cases")
    if not isinstance(entries, list) or not entries:
        raise ConfigError("no [[cases]]: add at least one case", source=source)
    cases: list[Case] = []
    seen: set[str] = set()
    for number, entry in enumerate(entries, start=1):
        case = _case(entry, number, source)
        if case.name in seen:
            raise ConfigError(
                f"a second case is named {case.name!r}; names must differ",
                source=source,
                key=f"case {number}",
            )
        seen.add(case.name)
        cases.append(case)
    return cases


def _case(entry: Any, number: int, source: str) -> Case:
    """One `[[cases]]` table checked: its own keys, then its call as the route checks it."""
    name = entry.get("name") if isinstance(entry, dict) else None
    where = f"case {number}" + (f" {name!r}" if isinstance(name, str) else "")
    try:
        parsed = _CaseEntry.model_validate(entry)
    except ValidationError as exc:
        raise ConfigError(_reasons(exc, {}), source=source, key=where) from None
    body = {
        field: getattr(parsed, key)
        for key, field in _CALL_FIELDS.items()
        if getattr(parsed, key) is not None
    }
    try:
        call = GateCall.model_validate(body)
    except ValidationError as exc:
        reasons = _reasons(exc, _CASE_KEY)
        raise ConfigError(f"not a call gate accepts: {reasons}", source=source, key=where) from None
    fixtures = tuple(
        (term_of(text, source, where), value) for text, value in (parsed.history or {}).items()
    )
    return Case(parsed.name, number, call, parsed.expect, fixtures)


def term_of(text: str, source: str, where: str) -> history.Term:
    """A case's (or an explained payload's) `history` key read as the one term it must be."""
    if not history.mentions(text):
        raise ConfigError(
            f"history key {text!r} is not a term: write it as a rule does, e.g. "
            '\'history.count("deploy_*", "1h")\'',
            source=source,
            key=where,
        )
    terms = history.terms_of(text, cap=MAX_DURATION, source=source, key=where)
    if len(terms) != 1:
        raise ConfigError(f"history key {text!r} must be one term", source=source, key=where)
    return terms[0]


def _same(term: history.Term) -> tuple[object, ...]:
    """A term's identity apart from how its window is spelt ("60m" is "1h")."""
    return (term.kind, term.scope, term.tools, term.arg, term.window)


def fixture_reader(fixtures: Sequence[tuple[history.Term, history.Number]]) -> history.Reader:
    """Reads a case's history: the values it supplies, 0 for every other term."""
    supplied = {_same(term): value for term, value in fixtures}
    return lambda terms: {term: supplied.get(_same(term), 0) for term in terms}


def _reasons(exc: ValidationError, names: dict[str, str]) -> str:
    """Pydantic's errors as `key: reason; ...`, with the route's field names put back as
    the case's keys (`tool_name` -> `tool`)."""
    parts = []
    for err in exc.errors():
        loc = [names.get(str(p), str(p)) if i == 0 else str(p) for i, p in enumerate(err["loc"])]
        parts.append(
            f"{'.'.join(loc) or '(top level)'}: {err['msg'].removeprefix('Value error, ')}"
        )
    return "; ".join(parts)


def answer(
    policy: Policy,
    call: GateCall,
    fixtures: Sequence[tuple[history.Term, history.Number]] = (),
) -> Answer:
    """What the server answers `call` (before any grant): the same facts, the same
    evaluation, the same approvers and offers as `GateService.judge` and `.ask`, with the
    history `fixtures` supply."""
    decision = policy.evaluate(CallFacts.of(call), fixture_reader(fixtures))
    rule = decision.rule
    shadow = tuple((outcome.rule, outcome.would) for outcome in decision.shadow)
    if decision.action is None or rule is None:
        # no rule matched: `POST /v1/gate` says allow, naming no rule
        return Answer("allow", None, (), (), decision.reason, decision.trail, shadow)
    approvers: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    if decision.action == "ask":
        approvers = tuple(policy.expand_approvers(rule.approvers))
        scopes = decision.offers().grant_scopes
    return Answer(
        decision.action, rule.name, approvers, scopes, decision.reason, decision.trail, shadow
    )


def run(policy: Policy, cases: list[Case]) -> list[Outcome]:
    """Every case decided and compared with what it expects."""
    outcomes = []
    for case in cases:
        got = answer(policy, case.call, case.history)
        misses = [*_misses(policy, case.expect, got), *_unused(policy, case)]
        outcomes.append(Outcome(case, got, tuple(misses)))
    return outcomes


def _misses(policy: Policy, expect: Expect, got: Answer) -> list[Miss]:
    misses = []
    if got.decision != expect.decision:
        misses.append(Miss("decision", expect.decision, got.decision))
    if expect.rule is not None and (got.rule or NO_RULE) != expect.rule:
        wanted = _rule_words(expect.rule)
        if any(placed.rule.name == expect.rule for placed in policy.shadows):
            wanted += " (a shadow rule: it never answers; expect it under `shadow`)"
        elif expect.rule != NO_RULE and policy.rule(expect.rule) is None:
            wanted += " (the policy has no rule by that name)"
        misses.append(Miss("rule", wanted, _rule_words(got.rule or NO_RULE)))
    # who may approve and which grants are offered are sets: their order means nothing
    if expect.approvers is not None and set(got.approvers) != set(expect.approvers):
        misses.append(Miss("approvers", _listed(expect.approvers), _listed(got.approvers)))
    if expect.grant_scopes is not None and set(got.grant_scopes) != set(expect.grant_scopes):
        wanted = _listed(expect.grant_scopes)
        misses.append(Miss("grant_scopes", wanted, _listed(got.grant_scopes)))
    if expect.shadow is not None:
        would = dict(got.shadow)
        named = (
            {name: would.get(name, "no match") for name in expect.shadow}
            if expect.shadow
            else would
        )
        if named != dict(expect.shadow):
            misses.append(Miss("shadow", _shadowed(expect.shadow), _shadowed(named)))
    return misses


def _unused(policy: Policy, case: Case) -> list[Miss]:
    """A history the case supplies that no rule reads: a typo would pass unseen otherwise."""
    used = {_same(term) for term in policy.history_terms}
    return [
        Miss("history", f"{term.text} read by a rule", "no rule reads it")
        for term, _ in case.history
        if _same(term) not in used
    ]


def _shadowed(answers: Mapping[str, str]) -> str:
    return ", ".join(f"{n!r} would {a}" for n, a in sorted(answers.items())) or "no shadow match"


def _rule_words(name: str) -> str:
    return "no rule" if name == NO_RULE else repr(name)


def _listed(items: Sequence[str]) -> str:
    return "[" + ", ".join(repr(i) for i in sorted(items)) + "]" if items else "none"


def report(outcomes: list[Outcome], source: str) -> list[str]:
    """The lines `gate policy test` prints: each failed case with what was expected and
    what policy answered, then a count."""
    lines: list[str] = []
    for outcome in outcomes:
        if outcome.passed:
            continue
        case = outcome.case
        lines.append(f"FAIL {case.name!r} ({source}, case {case.number})")
        lines.extend(f"  {m.what}: expected {m.expected}, got {m.got}" for m in outcome.misses)
        lines.append("  how policy decided: " + "; ".join(outcome.answer.trail))
    failed = sum(1 for o in outcomes if not o.passed)
    lines.append(
        f"{source}: {len(outcomes)} case(s), {len(outcomes) - failed} passed, {failed} failed"
    )
    return lines


def write_junit(outcomes: list[Outcome], source: str, path: Path) -> None:
    """A JUnit XML report of the run, one testcase per case, for CI to show."""
    failed = sum(1 for o in outcomes if not o.passed)
    counts = {"tests": str(len(outcomes)), "failures": str(failed), "errors": "0"}
    suites = ElementTree.Element("testsuites", counts)
    suite = ElementTree.SubElement(
        suites, "testsuite", {"name": f"gate policy test {source}", **counts, "skipped": "0"}
    )
    for outcome in outcomes:
        case = outcome.case
        attrs = {
            "classname": f"gate.policy.rules.{Path(source).stem}",
            "name": case.name,
            "time": "0",
        }
        element = ElementTree.SubElement(suite, "testcase", attrs)
        if outcome.passed:
            continue
        first = outcome.misses[0]
        failure = ElementTree.SubElement(
            element,
            "failure",
            {
                "type": "PolicyCaseMismatch",
                "message": f"{first.what}: expected {first.expected}, got {first.got}",
            },
        )
        details = [f"{m.what}: expected {m.expected}, got {m.got}" for m in outcome.misses]
        failure.text = "\n".join([*details, f"{source}, case {case.number}", *outcome.answer.trail])
    ElementTree.indent(suites)
    path.parent.mkdir(parents=True, exist_ok=True)
    ElementTree.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)
