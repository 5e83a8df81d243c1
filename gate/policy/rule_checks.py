"""A rule's settings checked and frozen for its requests: the checks `compile_rules` runs on
each rule beside its condition, and the `Offers` (with its step-up) each request carries."""

from __future__ import annotations

from gate.base.errors import ConfigError
from gate.config.oidc import StepUpSettings
from gate.config.settings import RuleSettings
from gate.policy.offers import DEFAULT_MAX_GRANT, Offers, StepUp


def check_channels(rule: RuleSettings, source: str | None) -> None:
    """Each of the rule's channels and escalation targets reads `name:target`."""
    for channel in [*(rule.channels or ()), *rule.escalate_to]:
        if ":" not in channel:
            raise ConfigError(
                f"channel {channel!r} must look like 'slack:C0123' (name:target)",
                source=source,
                key=f"rules.{rule.name}.channels",
            )


def check_pattern(rule: RuleSettings, source: str | None) -> None:
    """A pattern grant is offered exactly when the rule pins an argument."""
    # a "pattern" grant that pins nothing would cover every call of the tool under the rule
    if "pattern" in rule.grant_scopes and not rule.grant_pin:
        raise ConfigError(
            'grant_scopes offers "pattern" but grant_pin names no argument: a pattern grant pins '
            'at least one argument to its approved value, e.g. grant_pin = ["repo"]',
            source=source,
            key=f"rules.{rule.name}.grant_scopes",
        )
    if rule.grant_pin and "pattern" not in rule.grant_scopes:
        raise ConfigError(
            'grant_pin is set but grant_scopes does not offer "pattern": add it, or drop grant_pin',
            source=source,
            key=f"rules.{rule.name}.grant_pin",
        )


def offers_of(rule: RuleSettings, watched: tuple[str, ...] = ()) -> Offers:
    """What a request made under `rule` offers its approvers; frozen onto the request."""
    return Offers(
        # one person's edits are what every later approver would have to approve: only on a
        # rule one approval decides (not a quorum, not a chain)
        allow_edits=rule.allow_edits and rule.approvals_needed == 1 and not rule.stages,
        editable=tuple(rule.editable) if rule.editable is not None else None,
        grant_scopes=tuple(rule.grant_scopes),
        max_grant=rule.max_grant or DEFAULT_MAX_GRANT,
        grant_pin=tuple(rule.grant_pin),
        max_grant_uses=rule.max_grant_uses,
        reject_reasons=tuple(rule.reject_reasons),
        remind_after=rule.remind_after,
        escalate_after=rule.escalate_after,
        escalate_to=tuple(rule.escalate_to),
        escalate_approvers=tuple(rule.escalate_approvers),
        watched_args=watched,
        approver_groups=tuple(a[6:] for a in rule.approvers if a.startswith("group:")),
        step_up=step_up_of(rule.step_up),
        refuse_email_bound=rule.refuse_email_bound,
    )


def step_up_of(settings: StepUpSettings | None) -> StepUp | None:
    """A rule's `step_up`, as frozen onto each request it holds."""
    if settings is None:
        return None
    return StepUp(settings.max_age, tuple(settings.acr), settings.webauthn)
