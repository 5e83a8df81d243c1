"""Compiling a rule's approval chain (`gate.config.chains`) into what its requests freeze:
stages with their approvers resolved, vote thresholds and filters, the justification asked
of the agent and who may approve their own call. Every problem is a `ConfigError` naming its
key (`rules.<name>.stages.<n>.<key>`), which `gate.config.errors.located` turns into a line
of gate.toml: a chain that cannot work is refused at load, never found out by a request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from gate.base.errors import ConfigError
from gate.config.chains import VoteSettings
from gate.config.settings import RuleSettings, Settings
from gate.policy.stages import Stage, VoteFilter

Expand = Callable[[Sequence[str]], list[str]]

#: rule keys that a rule with stages sets in each stage instead (a value here would be
#: ambiguous: which stage would it mean?)
_PER_STAGE = ("approvers", "escalate_approvers", "escalate_after", "votes", "approvers_justify")


def expander(settings: Settings) -> Expand:
    """`["group:finance", "bob"]` -> approver names, in order, without repeats."""

    def expand(entries: Sequence[str]) -> list[str]:
        names: list[str] = []
        for entry in entries:
            if entry.startswith("group:"):
                members = [a.name for a in settings.approvers if entry[6:] in a.groups]
            else:
                members = [entry]
            names.extend(m for m in members if m not in names)
        return names

    return expand


def compile_chain(rule: RuleSettings, settings: Settings, timeout: timedelta) -> dict[str, Any]:
    """The `Offers` fields of `rule`'s chain (stages, thresholds, filters, justification,
    self-approval); ConfigError for a chain that cannot work."""
    source, key = settings.source, f"rules.{rule.name}"
    expand = expander(settings)
    out: dict[str, Any] = {"justification": rule.justification}
    if rule.self_approval is not None:
        _known_groups(settings, rule.self_approval.groups, f"{key}.self_approval", source)
        out["self_approvers"] = tuple(expand([f"group:{g}" for g in rule.self_approval.groups]))
    if not rule.stages:
        votes = rule.votes
        if votes is not None:
            given = "approvals_required" in rule.model_fields_set
            if given and rule.approvals_required != votes.approve:
                raise ConfigError(
                    f"approvals_required = {rule.approvals_required} and votes.approve = "
                    f"{votes.approve} disagree; keep one of them",
                    source=source,
                    key=f"{key}.votes",
                )
            out["vote_filter"] = _filter(settings, votes, f"{key}.votes")
            out["rejections"] = votes.reject
        out["approvers_justify"] = rule.approvers_justify
        return out
    _check_staged_rule(rule, settings, timeout)
    out["stages"] = tuple(
        _stage(rule, index, settings, expand, timeout) for index in range(len(rule.stages))
    )
    return out


def _check_staged_rule(rule: RuleSettings, settings: Settings, timeout: timedelta) -> None:
    source, key = settings.source, f"rules.{rule.name}"
    for name in (*_PER_STAGE, "approvals_required"):
        # set, and to something else than its default (a settings dump writes every key)
        default = type(rule).model_fields[name].get_default(call_default_factory=True)
        if name in rule.model_fields_set and getattr(rule, name) != default:
            raise ConfigError(
                f"`{name}` is set in each [[rules.stages]] entry of a rule with stages, not on "
                "the rule (which stage would it mean?)",
                source=source,
                key=f"{key}.{name}",
            )
    if rule.grant_scopes:
        raise ConfigError(
            "grant_scopes cannot go with stages: a grant made by the last stage would let "
            "later calls skip the earlier ones",
            source=source,
            key=f"{key}.grant_scopes",
        )
    if rule.on_timeout == "approve":
        raise ConfigError(
            'on_timeout = "approve" cannot go with stages: a stage nobody decided denies',
            source=source,
            key=f"{key}.on_timeout",
        )
    total = sum((s.timeout or timeout for s in rule.stages), timedelta())
    if total > settings.server.max_timeout:
        raise ConfigError(
            f"the stages together may wait {total}, longer than server.max_timeout "
            f"{settings.server.max_timeout}; shorten a stage's `timeout`",
            source=source,
            key=f"{key}.stages",
        )


def _stage(
    rule: RuleSettings, index: int, settings: Settings, expand: Expand, timeout: timedelta
) -> Stage:
    entry = rule.stages[index]
    source, key = settings.source, f"rules.{rule.name}.stages.{index}"
    said = f"stage {index + 1}" + (f" ({entry.name})" if entry.name else "")
    for field in ("approvers", "fallback_approvers", "escalate_approvers"):
        _known_names(settings, getattr(entry, field), f"{key}.{field}", source)
    approvers = expand(entry.approvers)
    fallback = not approvers
    if fallback:
        approvers = expand(entry.fallback_approvers)
    if not approvers:
        raise ConfigError(
            f"{said}: nobody could decide it (its `approvers` resolve to nobody and "
            "`fallback_approvers` names nobody either); a stage must name people",
            source=source,
            key=f"{key}.approvers",
        )
    vote_filter = _filter(settings, entry.votes, f"{key}.votes")
    voters = [n for n in approvers if vote_filter.counted is None or n in vote_filter.counted]
    if entry.votes.approve > len(voters):
        raise ConfigError(
            f"{said} needs {entry.votes.approve} approvals, but only {len(voters)} of its "
            f"approvers can give one ({', '.join(voters) or 'nobody'})",
            source=source,
            key=f"{key}.votes",
        )
    if entry.timeout is not None and entry.timeout > settings.server.max_timeout:
        raise ConfigError(
            f"{said}: timeout {entry.timeout} is longer than server.max_timeout",
            source=source,
            key=f"{key}.timeout",
        )
    return Stage(
        name=entry.name or "",
        approvers=tuple(approvers),
        fallback=fallback,
        approvals=entry.votes.approve,
        rejections=entry.votes.reject,
        filter=vote_filter,
        escalate_approvers=tuple(expand(entry.escalate_approvers)),
        escalate_after=entry.escalate_after,
        timeout=entry.timeout or timeout,
        justify=entry.justify,
        asked=tuple(entry.approvers),
        fallback_asked=tuple(entry.fallback_approvers),
    )


def _filter(settings: Settings, votes: VoteSettings, key: str) -> VoteFilter:
    _known_groups(settings, votes.groups, f"{key}", settings.source)
    counted = None
    if votes.groups:
        counted = tuple(a.name for a in settings.approvers if set(a.groups) & set(votes.groups))
    return VoteFilter(counted, tuple(votes.via))


def _known_groups(settings: Settings, groups: Sequence[str], key: str, source: str | None) -> None:
    known = {g for a in settings.approvers for g in a.groups}
    unknown = [g for g in groups if g not in known]
    if unknown:
        raise ConfigError(
            f"group {unknown[0]!r} has no members in [[approvers]]", source=source, key=key
        )


def _known_names(settings: Settings, entries: Sequence[str], key: str, source: str | None) -> None:
    """A name must be an approver (a typo is refused); a group may be empty (the fallback
    is then asked), which is what fallback approvers are for."""
    names = {a.name for a in settings.approvers}
    unknown = [e for e in entries if not e.startswith("group:") and e not in names]
    if unknown:
        raise ConfigError(
            f"approver {unknown[0]!r} is not in [[approvers]]", source=source, key=key
        )
