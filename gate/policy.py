"""Which tool calls need a human: `[[rules]]` compiled once, evaluated per call.

Rules are tried in order and the first match wins. A rule matches when the tool name
matches one of its `tools` globs and its `when` CEL expression (if any) is true.

Failing closed: when a `when` expression cannot be evaluated for a call (a missing key, a
type clash, an overflow, any CEL error) or gives something other than true or false, an
`allow` rule does not match, while an `ask` or `deny` rule does. A `when` that can never be
a boolean (`args.amount + 1`) is refused when gate.toml is loaded. A typo in
a guard must never let a call through; `has(args.amount) && args.amount > 5` is the way
to make a condition optional.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

import cel

from gate import cel_shape
from gate.config import RuleSettings, Settings
from gate.errors import ConfigError
from gate.offers import DEFAULT_MAX_GRANT, Offers

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

    def tool_matches(self, tool_name: str) -> bool:
        """True when `tool_name` matches one of the rule's globs."""
        return any(fnmatch.fnmatchcase(tool_name, pattern) for pattern in self.tools)


@dataclass(frozen=True)
class Decision:
    """Policy's answer for one call, with the trail that explains it."""

    action: Action | None  # None: no rule matched
    rule: Rule | None
    reason: str
    trail: tuple[str, ...] = ()

    @property
    def matched(self) -> bool:
        return self.action is not None


class Policy:
    """The compiled rules of one Settings object."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.rules = tuple(_compile(rule, settings, settings.source) for rule in settings.rules)
        self._forced: Rule | None = None

    def evaluate(self, facts: CallFacts) -> Decision:
        """Find the first rule that matches `facts`; fall back to `requires_confirmation`."""
        trail: list[str] = []
        activation: dict[str, Any] | None = None
        for rule in self.rules:
            if not rule.tool_matches(facts.tool_name):
                trail.append(
                    f"{rule.name}: tool {facts.tool_name!r} matches none of {list(rule.tools)}"
                )
                continue
            if rule.program is not None:
                activation = activation or facts.activation()
                failure: str | None
                try:
                    result = rule.program.execute(activation)
                except (KeyboardInterrupt, SystemExit):
                    raise
                except BaseException as exc:  # any CEL failure, a Rust panic included
                    failure = f"failed ({_short(exc)})"
                else:
                    if result is True or result is False:
                        failure = None
                    else:  # a guard that is not a boolean cannot be trusted either way
                        failure = f"returned {type(result).__name__} {_short_value(result)}"
                if failure is not None:
                    if rule.action == "allow":
                        trail.append(f"{rule.name}: `when` {failure}; allow rules skip")
                        continue
                    trail.append(f"{rule.name}: `when` {failure}; matching (fail closed)")
                    return Decision(rule.action, rule, _rule_reason(rule), tuple(trail))
                if result is not True:
                    trail.append(f"{rule.name}: `when` {rule.when!r} is false")
                    continue
                trail.append(f"{rule.name}: tool matches and `when` {rule.when!r} is true")
            else:
                trail.append(f"{rule.name}: tool matches (no `when`)")
            return Decision(rule.action, rule, _rule_reason(rule), tuple(trail))
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
            offers=_offers(RuleSettings(name=FORCED_RULE)),
        )

    def rule(self, name: str | None) -> Rule | None:
        """The rule called `name` (the implicit one included)."""
        if name == FORCED_RULE:
            return self.forced_rule()
        return next((r for r in self.rules if r.name == name), None)

    def expand_approvers(self, entries: tuple[str, ...] | list[str]) -> list[str]:
        """Turn `["group:finance", "bob"]` into approver names, in order, without repeats."""
        names: list[str] = []
        for entry in entries:
            if entry.startswith("group:"):
                members = [a.name for a in self.settings.approvers if entry[6:] in a.groups]
            else:
                members = [entry]
            names.extend(m for m in members if m not in names)
        return names


def _compile(rule: RuleSettings, settings: Settings, source: str | None) -> Rule:
    program = None
    if rule.when is not None:
        try:
            program = cel.compile(rule.when)
        except ValueError as exc:
            raise ConfigError(
                f"`when` is not valid CEL: {exc}", source=source, key=f"rules.{rule.name}.when"
            ) from None
        if cel_shape.shape(rule.when) == "other":
            raise ConfigError(
                f"`when` must be a condition that is true or false, but {rule.when!r} gives a "
                "number, text, list or map; compare it, e.g. `args.amount > 50000`",
                source=source,
                key=f"rules.{rule.name}.when",
            )
    timeout = rule.timeout or settings.server.default_timeout
    if timeout > settings.server.max_timeout:
        raise ConfigError(
            f"timeout {timeout} is longer than server.max_timeout {settings.server.max_timeout}",
            source=source,
            key=f"rules.{rule.name}.timeout",
        )
    for channel in [*(rule.channels or ()), *rule.escalate_to]:
        if ":" not in channel:
            raise ConfigError(
                f"channel {channel!r} must look like 'slack:C0123' (name:target)",
                source=source,
                key=f"rules.{rule.name}.channels",
            )
    return Rule(
        name=rule.name,
        tools=tuple(rule.tools),
        when=rule.when,
        program=program,
        action=rule.action,
        approvers=tuple(rule.approvers),
        approvals_required=rule.approvals_required,
        timeout=timeout,
        on_timeout=rule.on_timeout,
        channels=tuple(rule.channels) if rule.channels is not None else None,
        reason=rule.reason,
        offers=_offers(rule),
    )


def _offers(rule: RuleSettings) -> Offers:
    """What a request made under `rule` offers its approvers; frozen onto the request."""
    return Offers(
        allow_edits=rule.allow_edits and rule.approvals_required == 1,
        editable=tuple(rule.editable) if rule.editable is not None else None,
        grant_scopes=tuple(rule.grant_scopes),
        max_grant=rule.max_grant or DEFAULT_MAX_GRANT,
        reject_reasons=tuple(rule.reject_reasons),
        remind_after=rule.remind_after,
        escalate_after=rule.escalate_after,
        escalate_to=tuple(rule.escalate_to),
        escalate_approvers=tuple(rule.escalate_approvers),
    )


def _rule_reason(rule: Rule) -> str:
    if rule.reason:
        return rule.reason
    return {
        "allow": f"Allowed by rule {rule.name!r}",
        "deny": f"Denied by rule {rule.name!r}",
        "ask": f"Rule {rule.name!r} needs a human decision",
    }[rule.action]


def _short_value(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, KeyError):
        text = f"no such key {text}"
    return text[:200]
