"""Which tool calls need a human: `[[rules]]` compiled once, evaluated per call.

Rules are tried in order and the first match wins. A rule matches when the tool name
matches one of its `tools` globs and its `when` CEL expression (if any) is true.

Tool names are compared by `gate.policy.toolnames.match`: an `ask` or `deny` rule also catches a
name's case, width and look-alike variants (`bash`, `Ｂａｓｈ`, `Bаsh` with a Cyrillic "а"),
an `allow` rule only the name as written.

Failing closed: when a `when` expression cannot be evaluated for a call (a missing key, a
type clash, an overflow, any CEL error) or gives something other than true or false, an
`allow` rule does not match, while an `ask` or `deny` rule does; the failure is logged (once a
minute per rule, with a count) and the request says so (`Offers.condition_error`). Most such
failures are caught when gate.toml is loaded instead: a `when` that can never be a boolean
(`args.amount + 1`), names what gate does not provide (`command`, `.includes`) or compares
types that never meet (`tool_name > 5`) is refused (`gate.policy.check`). A typo in a guard
must never let a call through; `has(args.amount) && args.amount > 5` is the way to make a
condition optional.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from gate.base.errors import ConfigError
from gate.config.settings import RuleSettings, Settings
from gate.policy import chains as policy_chains
from gate.policy import check as policy_check
from gate.policy import compiling, conditions, history, routes, shadow, toolnames
from gate.policy import revision as policy_revision
from gate.policy import stages as policy_stages
from gate.policy.offers import Offers
from gate.policy.rule_checks import check_channels, check_pattern, offers_of

if TYPE_CHECKING:
    from gate.inputs.bodies import GateCall

log = logging.getLogger(__name__)

Action = Literal["allow", "deny", "ask"]
FORCED_RULE = "requires_confirmation"


@dataclass(frozen=True)
class CallFacts:
    """What policy may look at for one tool call."""

    tool_name: str
    args: dict[str, Any]
    agent_id: str | None = None
    user_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, call: GateCall) -> CallFacts:
        """What policy sees of a `POST /v1/gate` body: the server and `gate policy test` both
        build the facts here, so a tested case is decided as the live call would be."""
        return cls(call.tool_name, call.tool_args, call.agent_id, call.user_id, call.metadata)

    def activation(self) -> dict[str, Any]:
        """The variables a `when` expression sees."""
        return {
            "tool_name": self.tool_name,
            "args": self.args,
            "agent_id": self.agent_id or "",
            "user_id": self.user_id or "",
            "metadata": self.metadata,
        }


@dataclass(frozen=True)
class Rule:
    """A compiled `[[rules]]` entry."""

    name: str
    tools: tuple[str, ...]
    when: str | None
    program: Any
    action: Action
    approvers: tuple[str, ...]
    approvals_required: int
    timeout: timedelta
    on_timeout: Literal["reject", "approve"]
    channels: tuple[str, ...] | None
    reason: str | None
    offers: Offers = field(default_factory=Offers)
    #: `toolnames.canonical` of each of `tools`, folded once here rather than on every call
    folded: tuple[str, ...] = ()
    #: its answers go in the decision log (`log = false`: an allow rule too chatty to keep)
    log: bool = True
    #: set for a shadow rule only: when its trial ends (gate.policy.shadow)
    until: datetime | None = None
    #: the `history.*(...)` terms its `when` reads (gate.policy.history), read before it runs
    history: tuple[history.Term, ...] = ()

    def tool_matches(self, tool_name: str, canonical: str | None = None) -> toolnames.Match | None:
        """How `tool_name` matches the rule's globs: "exact", "variant" (a case, width or
        look-alike variant) or None. `canonical` is `toolnames.canonical(tool_name)`."""
        if canonical is None:
            canonical = toolnames.canonical(tool_name)
        return toolnames.match(self.tools, self.folded, tool_name, canonical)


@dataclass(frozen=True)
class Decision:
    """Policy's answer for one call, with the trail that explains it."""

    action: Action | None  # None: no rule matched
    rule: Rule | None
    reason: str
    trail: tuple[str, ...] = ()
    #: set when the rule matched only because its `when` failed on this call (fail closed)
    condition_error: str | None = None
    #: what shadow rules that matched would have answered (`gate.policy.shadow.ShadowOutcome`)
    shadow: tuple[shadow.ShadowOutcome, ...] = ()
    #: set when the call is asked because its agent tripped (`gate.decisions.denials`): the words
    #: why
    tripped: str | None = None
    #: the history terms read for this call, as written, with their values (explain shows them)
    history: tuple[tuple[str, history.Number], ...] = ()

    @property
    def matched(self) -> bool:
        return self.action is not None

    def offers(self) -> Offers:
        """What the request this decision makes offers, as it is frozen onto the request."""
        assert self.rule is not None
        if self.condition_error is None:
            return self.rule.offers
        return replace(self.rule.offers, condition_error=self.condition_error)


class Policy:
    """The compiled rules of one Settings object."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.settings = settings
        self.wall = wall
        rules, problems, self.warnings = compile_rules(settings, now=wall())
        if problems:
            raise problems[0]
        #: the short hash of the rules (`gate.policy.revision`) each decision records
        self.revision = policy_revision.revision(settings)
        self.rules = tuple(r for r in rules if r.until is None)
        self._live_at = {rule.name: index for index, rule in enumerate(self.rules)}
        self.shadows = shadow.placed(rules)
        toolnames.load()
        self._forced: Rule | None = None
        self._failures = conditions.ConditionFailures(clock)
        #: every history term of every rule: the calls of their tools are recorded
        self.history_terms = tuple(dict.fromkeys(t for r in rules for t in r.history))
        #: where cards go, apart from who decides (`gate.policy.routes`)
        self.router = routes.Router(settings)

    def counts(self, tool_name: str) -> bool:
        """Whether a call of `tool_name` is one some history term counts (so it is recorded)."""
        return any(term.matches(tool_name) for term in self.history_terms)

    def uses_history(self, tool_name: str) -> bool:
        """Whether judging a call of `tool_name` may read history (a rule with history terms,
        live or shadow, could be tried on it) or write it (`counts`)."""
        canonical = toolnames.canonical(tool_name)
        tried = (*self.rules, *(placed.rule for placed in self.shadows))
        return self.counts(tool_name) or any(
            r.history and r.tool_matches(tool_name, canonical) for r in tried
        )

    def evaluate(self, facts: CallFacts, reader: history.Reader | None = None) -> Decision:
        """Find the first rule that matches `facts`; fall back to `requires_confirmation`.
        Shadow rules that could have changed the answer are tried too (`Decision.shadow`).
        `reader` reads the history terms of a rule reached (none: such a rule fails closed)."""
        reading = history.Reading(reader)
        decision = self._first_match(facts, reading)
        if self.shadows:
            live_at = self._live_at.get(
                decision.rule.name if decision.rule else "", len(self.rules)
            )
            would = partial(self._would, facts=facts, reading=reading)
            found = shadow.beside(decision.action, live_at, self.shadows, self.wall(), would)
            decision = replace(decision, shadow=found) if found else decision
        if reading.values:
            decision = replace(decision, history=tuple(history.shown(reading.values).items()))
        return decision

    def _would(self, rule: Rule, facts: CallFacts, reading: history.Reading) -> Action | None:
        """`rule`'s action when it alone matches `facts` (a failing `when` as live rules)."""
        if not _name_matches(rule, rule.tool_matches(facts.tool_name), facts.tool_name, []):
            return None
        if rule.program is None:
            return rule.action
        result, failure = reading.run(rule.history, rule.program, facts.activation())
        if failure is not None:
            self._failures.report(
                rule.name, rule.action, rule.until is not None, failure, facts.tool_name
            )
            return None if rule.action == "allow" else rule.action
        return rule.action if result is True else None

    def _first_match(self, facts: CallFacts, reading: history.Reading) -> Decision:
        trail: list[str] = []
        activation: dict[str, Any] | None = None
        canonical = toolnames.canonical(facts.tool_name)
        for rule in self.rules:
            how = rule.tool_matches(facts.tool_name, canonical)
            if not _name_matches(rule, how, facts.tool_name, trail):
                continue
            if rule.program is not None:
                activation = activation or facts.activation()
                result, failure = reading.run(rule.history, rule.program, activation)
                trail.extend(f"{rule.name}: {said}" for said in reading.said(rule.history))
                if failure is not None:
                    self._failures.report(
                        rule.name, rule.action, rule.until is not None, failure, facts.tool_name
                    )
                    if rule.action == "allow":
                        trail.append(f"{rule.name}: `when` {failure}; allow rules skip")
                        continue
                    trail.append(f"{rule.name}: `when` {failure}; matching (fail closed)")
                    error = (
                        f"The rule's condition `{rule.when}` {failure} on this call, so gate "
                        + ("asked a person to be safe." if rule.action == "ask" else "denied it.")
                    )
                    return Decision(
                        rule.action, rule, _rule_reason(rule), tuple(trail), condition_error=error
                    )
                if result is not True:
                    trail.append(f"{rule.name}: `when` {rule.when!r} is false")
                    continue
                trail.append(f"{rule.name}: tool matches and `when` {rule.when!r} is true")
            else:
                trail.append(f"{rule.name}: tool matches (no `when`)")
            # the values a history rule matched on go with its reason: to the agent, the
            # request and every card ("... (history.count("deploy_*", "1h") = 3)")
            said = "; ".join(reading.said(rule.history))
            reason = f"{_rule_reason(rule)} ({said})" if said else _rule_reason(rule)
            return Decision(rule.action, rule, reason, tuple(trail))
        if facts.metadata.get("requires_confirmation") is True:
            trail.append("no rule matched; metadata.requires_confirmation is true")
            return Decision(
                "ask",
                self.forced_rule(),
                "The caller marked this call as requiring confirmation",
                tuple(trail),
            )
        trail.append("no rule matched")
        return Decision(None, None, "No rule matched", tuple(trail))

    def forced_rule(self) -> Rule:
        """The implicit rule used for `requires_confirmation` calls that no rule matched."""
        if self._forced is None:  # built once, not per call
            self._forced = self._build_forced_rule()
        return self._forced

    def _build_forced_rule(self) -> Rule:
        server = self.settings.server
        return Rule(
            name=FORCED_RULE,
            tools=("*",),
            when=None,
            program=None,
            action="ask",
            approvers=tuple(server.default_approvers),
            approvals_required=1,
            timeout=server.default_timeout,
            on_timeout="reject",
            channels=tuple(server.default_channels)
            if server.default_channels is not None
            else None,
            reason="The caller marked this call as requiring confirmation",
            offers=offers_of(RuleSettings(name=FORCED_RULE)),
            folded=("*",),
        )

    def rule(self, name: str | None) -> Rule | None:
        """The rule called `name` (the implicit one included)."""
        if name == FORCED_RULE:
            return self.forced_rule()
        return next((r for r in self.rules if r.name == name), None)

    def expand_approvers(self, entries: tuple[str, ...] | list[str]) -> list[str]:
        """Turn `["group:finance", "bob"]` into approver names, in order, without repeats."""
        return policy_chains.expander(self.settings)(entries)

    def chain_of(self, rule: Rule) -> dict[str, Any]:
        """The stages and thresholds of `rule` as `gate policy explain` shows them (a rule
        without stages has one)."""
        offers = rule.offers
        stages = offers.stages or (
            replace(
                offers.stage(0, rule.approvals_required),
                approvers=tuple(self.expand_approvers(rule.approvers)),
                escalate_approvers=tuple(self.expand_approvers(offers.escalate_approvers)),
                escalate_after=offers.escalate_after,
                timeout=rule.timeout,
            ),
        )
        return policy_stages.explain(stages, offers.justification, offers.self_approvers)


def compile_rules(
    settings: Settings, *, now: datetime | None = None
) -> tuple[list[Rule], list[ConfigError], list[str]]:
    """Every rule compiled and checked: the rules, the problems (each names its rule) and the
    warnings (a condition gate could not analyse). Shadow rules are checked against `now`."""
    rules: list[Rule] = []
    problems: list[ConfigError] = []
    warnings: list[str] = []
    now = now or datetime.now(UTC)
    for entry in settings.rules:
        try:
            until = shadow.until_of(entry, now=now, source=settings.source)
            rule, note = _compile(entry, settings, settings.source)
            rule = replace(rule, until=until) if until is not None else rule
        except ConfigError as exc:
            problems.append(exc)
            continue
        rules.append(rule)
        if note:
            warnings.append(f"rule {entry.name!r}: {note}; it was not checked before running")
    return rules, problems, warnings


def _compile(rule: RuleSettings, settings: Settings, source: str | None) -> tuple[Rule, str | None]:
    program, checked, terms = _compile_when(rule, settings, source)
    timeout = rule.timeout or settings.server.default_timeout
    if timeout > settings.server.max_timeout:
        raise ConfigError(
            f"timeout {timeout} is longer than server.max_timeout {settings.server.max_timeout}",
            source=source,
            key=f"rules.{rule.name}.timeout",
        )
    check_channels(rule, source)
    check_pattern(rule, source)
    offers = replace(
        offers_of(rule, checked.watched), **policy_chains.compile_chain(rule, settings, timeout)
    )
    first = offers.stages[0] if offers.stages else None
    return Rule(
        name=rule.name,
        tools=tuple(rule.tools),
        when=rule.when,
        program=program,
        action=rule.action,
        # a chain's first stage decides first (its approvers resolved already)
        approvers=first.approvers if first else tuple(rule.approvers),
        approvals_required=first.approvals if first else rule.approvals_needed,
        timeout=first.timeout or timeout if first else timeout,
        on_timeout=rule.on_timeout,
        channels=tuple(rule.channels) if rule.channels is not None else None,
        reason=rule.reason,
        offers=offers,
        folded=tuple(toolnames.canonical(pattern) for pattern in rule.tools),
        log=rule.log,
        history=terms,
    ), checked.unchecked


def _compile_when(
    rule: RuleSettings, settings: Settings, source: str | None
) -> tuple[Any, policy_check.Checked, tuple[history.Term, ...]]:
    """A rule's `when` compiled, checked, and its history terms read (ConfigError if not)."""
    if rule.when is None:
        return None, policy_check.Checked((), ()), ()
    key = f"rules.{rule.name}.when"
    return compiling.compile_condition(
        rule.when, source=source, key=key, history_cap=settings.server.history_max_window
    )


def _name_matches(
    rule: Rule, how: toolnames.Match | None, tool_name: str, trail: list[str]
) -> bool:
    """Whether the tool name lets `rule` match (said in `trail` either way): a variant of a
    name meets `ask` and `deny` rules, never `allow` ones (gate.policy.toolnames)."""
    if how is None:
        trail.append(f"{rule.name}: tool {tool_name!r} matches none of {list(rule.tools)}")
        return False
    if how == "variant":
        said = f"{rule.name}: tool {tool_name!r} is a variant of {list(rule.tools)} (case, width "
        if rule.action == "allow":
            trail.append(
                said + "or look-alike letters); allow rules match only the name as written"
            )
            return False
        trail.append(said + "or look-alike letters): matching")
    return True


def _rule_reason(rule: Rule) -> str:
    if rule.reason:
        return rule.reason
    return {
        "allow": f"Allowed by rule {rule.name!r}",
        "deny": f"Denied by rule {rule.name!r}",
        "ask": f"Rule {rule.name!r} needs a human decision",
    }[rule.action]
