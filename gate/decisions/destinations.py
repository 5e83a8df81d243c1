"""Where a new request's cards are posted: the (channel, target) pairs its routes chose
(`gate.policy.routes`), else its rule's `channels`, else every channel's default target."""

from __future__ import annotations

from typing import Any

from gate.policy.routes import Routing


def of_request(
    configured: dict[str, Any], rule_channels: tuple[str, ...] | None, routing: Routing
) -> list[tuple[str, str]]:
    """The cards a request owes, on the `configured` channels (name -> its table): its
    routes' targets, with the rule's own when a route keeps them or a route's `when`
    failed (fail wide), or the rule's own when no route matched."""
    if routing.targets is None:
        return of_rule(configured, rule_channels)
    own = of_rule(configured, rule_channels) if routing.with_rule_channels else []
    routed = [(c, t) for c, t in routing.targets if c in configured]
    return list(dict.fromkeys([*routed, *own]))


def of_rule(
    configured: dict[str, Any], rule_channels: tuple[str, ...] | None
) -> list[tuple[str, str]]:
    """(channel, target) pairs for a rule: its own list, or every channel's default."""
    if rule_channels is not None:
        pairs = [tuple(entry.split(":", 1)) for entry in rule_channels]
        return [(c, t) for c, t in pairs if c in configured]
    targets = []
    for name, channel_settings in configured.items():
        default = getattr(channel_settings, "default_target", None)
        if default is None and isinstance(channel_settings, dict):
            default = channel_settings.get("default_target")
        if default is None and name == "log":
            default = "log"
        if default:
            targets.append((name, str(default)))
    return targets
