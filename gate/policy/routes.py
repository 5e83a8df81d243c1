"""Where a request's cards go, apart from who may decide it: `[[routes]]` compiled once and
tried on each new request.

Routes are tried in order, as Alertmanager's are: a route matches a request of one of its
`rules` (any rule's, when it names none) whose call makes its `when` true, and the first
match decides where the cards go, unless it says `stop = false` (later routes that match add
their targets too). A request no route matches goes where its rule's `channels` say (or to
every channel's default target), as before routes existed. Routing never changes who may
decide: that stays the rule's approvers, checked by the decision pipeline on every surface.

Targets are `channel:target` pairs, people (an approver, or `group:x`, gets the card on
every configured channel where `[[approvers]]` gives their id) and on-call schedules
(`[[oncall]]`: whoever is on call when the request is made).

Failing closed, for routing, means the card goes wider, never nowhere: a `when` that fails
on a call counts as a match, and the rule's own destinations get the card as well. The
failure is logged (once a minute per route) and named in the request's audit trail. Most
failures are refused when gate.toml is loaded instead, with the rules' checks
(`compiling.compile_condition`); so is every route that cannot deliver: an unknown
channel, rule, person or schedule, or a person with no id on any configured channel.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gate.base.errors import ConfigError
from gate.config.settings import OnCallSettings, RouteSettings, Settings
from gate.policy import chains as policy_chains
from gate.policy import compiling, conditions

Target = tuple[str, str]


@dataclass(frozen=True)
class Route:
    """A compiled `[[routes]]` entry."""

    name: str
    rules: frozenset[str] | None
    when: str | None
    program: Any
    channels: tuple[Target, ...]
    #: approver names, groups expanded
    users: tuple[str, ...]
    oncall: tuple[str, ...]
    stop: bool
    keep_rule_channels: bool


@dataclass(frozen=True)
class Routing:
    """Where one request's cards go: `targets` (None: the rule's own destinations, no route
    matched), the routes that matched, and the failures of their `when`s."""

    targets: tuple[Target, ...] | None
    routes: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()
    #: the rule's own destinations get the card too (a route's `keep_rule_channels`, or a
    #: `when` that failed)
    with_rule_channels: bool = True


def routed_detail(routing: Routing) -> dict[str, object]:
    """What a request's `created` audit event says of its routing (nothing: no route)."""
    if not routing.routes:
        return {}
    detail: dict[str, object] = {"routes": list(routing.routes)}
    if routing.targets is not None:
        detail["routed_to"] = [f"{channel}:{target}" for channel, target in routing.targets]
    if routing.failures:
        detail["route_failures"] = list(routing.failures)
    return detail


class Router:
    """The compiled routes of one Settings object."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._oncall = {schedule.name: schedule for schedule in settings.oncall}
        self.routes = tuple(_compile(entry, settings) for entry in settings.routes)
        self._failures = conditions.ConditionFailures()

    def route(self, rule: str, activation: dict[str, Any], now: datetime) -> Routing:
        """Where the cards of a request made under `rule` for this call go."""
        if not self.routes:
            return Routing(None)
        targets: list[Target] = []
        matched: list[str] = []
        failures: list[str] = []
        wide = False
        for route in self.routes:
            if route.rules is not None and rule not in route.rules:
                continue
            if route.program is not None:
                result, failure = conditions.run(route.program, activation)
                if failure is not None:
                    failures.append(f"route {route.name!r}: `when` {failure}")
                    tool_name = str(activation["tool_name"])
                    self._failures.report(route.name, "route", False, failure, tool_name)
                    wide = True
                elif result is not True:
                    continue
            matched.append(route.name)
            targets.extend(self._targets(route, now))
            wide = wide or route.keep_rule_channels
            if route.stop:
                break
        if not matched:
            return Routing(None)
        unique = tuple(dict.fromkeys(targets))
        return Routing(unique, tuple(matched), tuple(failures), with_rule_channels=wide)

    def _targets(self, route: Route, now: datetime) -> list[Target]:
        people = [*route.users, *(self._oncall[name].on_call(now) for name in route.oncall)]
        return [*route.channels, *(t for person in people for t in self.direct(person))]

    def direct(self, person: str) -> list[Target]:
        """Where `person` gets a card of their own: each configured channel where
        `[[approvers]]` gives their id."""
        approver = self._settings.approver(person)
        if approver is None:
            return []
        found = ((name, approver.identity(name)) for name in self._settings.channels.configured())
        return [(name, who) for name, who in found if who]


def _compile(entry: RouteSettings, settings: Settings) -> Route:
    """`entry` checked against the rest of gate.toml; ConfigError at the key that cannot work."""
    source = settings.source
    key = f"routes.{entry.name}"
    program = None
    if entry.when is not None:
        program, _, _ = compiling.compile_condition(entry.when, source=source, key=f"{key}.when")
    if entry.rules is not None:
        known = {rule.name for rule in settings.rules}
        unknown = [name for name in entry.rules if name not in known]
        if unknown:
            raise ConfigError(
                f"no rule called {unknown[0]!r} (rules: {sorted(known)})",
                source=source,
                key=f"{key}.rules",
            )
    channels = tuple(_channel(target, settings, f"{key}.channels") for target in entry.channels)
    users = _people(entry, settings, key)
    schedules = {schedule.name: schedule for schedule in settings.oncall}
    for name in entry.oncall:
        schedule = schedules.get(name)
        if schedule is None:
            raise ConfigError(
                f"no [[oncall]] schedule called {name!r} (schedules: {sorted(schedules)})",
                source=source,
                key=f"{key}.oncall",
            )
        _check_schedule(schedule, settings)
    if not (channels or users or entry.oncall):
        raise ConfigError(
            "a route needs somewhere to send the card: `channels`, `users` or `oncall`",
            source=source,
            key=key,
        )
    return Route(
        name=entry.name,
        rules=frozenset(entry.rules) if entry.rules is not None else None,
        when=entry.when,
        program=program,
        channels=channels,
        users=users,
        oncall=tuple(entry.oncall),
        stop=entry.stop,
        keep_rule_channels=entry.keep_rule_channels,
    )


def _channel(entry: str, settings: Settings, key: str) -> Target:
    """`slack:C0123` as a (channel, target) pair of a configured channel."""
    name, colon, target = entry.partition(":")
    if not colon or not target:
        raise ConfigError(
            f"channel {entry!r} must look like 'slack:C0123' (name:target)",
            source=settings.source,
            key=key,
        )
    configured = settings.channels.configured()
    if name not in configured:
        raise ConfigError(
            f"channel {name!r} is not configured (configured: {sorted(configured)}); add a "
            f"[channels.{name}] table or route elsewhere",
            source=settings.source,
            key=key,
        )
    return name, target


def _people(entry: RouteSettings, settings: Settings, key: str) -> tuple[str, ...]:
    """The route's `users`, groups expanded; each must be reachable on some channel."""
    names = {approver.name for approver in settings.approvers}
    groups = {group for approver in settings.approvers for group in approver.groups}
    for person in entry.users:
        known = person[6:] in groups if person.startswith("group:") else person in names
        if not known:
            raise ConfigError(
                f"{person!r} is not in [[approvers]] (nor a group of theirs)",
                source=settings.source,
                key=f"{key}.users",
            )
    people = tuple(policy_chains.expander(settings)(entry.users))
    for person in people:
        _reachable(person, settings, f"{key}.users")
    return people


def _check_schedule(schedule: OnCallSettings, settings: Settings) -> None:
    key = f"oncall.{schedule.name}.people"
    for person in schedule.people:
        if settings.approver(person) is None:
            raise ConfigError(
                f"{person!r} is not in [[approvers]]", source=settings.source, key=key
            )
        _reachable(person, settings, key)


def _reachable(person: str, settings: Settings, key: str) -> None:
    """ConfigError unless `person` has an id on a configured channel (else no card reaches
    them, and the route would send nothing, silently)."""
    approver = settings.approver(person)
    configured = settings.channels.configured()
    if approver is None or not any(approver.identity(name) for name in configured):
        raise ConfigError(
            f"{person!r} has no id on any configured channel ({sorted(configured) or 'none'}): "
            f'give one in their [[approvers]] entry (e.g. slack = "U0...")',
            source=settings.source,
            key=key,
        )
