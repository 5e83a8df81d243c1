"""Microsoft Teams: Adaptive Card 1.5 approval cards with Universal Actions (Action.Execute).

One module per role:

* `settings`: `[channels.teams]` (`TeamsSettings`, the channel's settings model);
* `verify`: the Bot Connector's JWT (OpenID metadata, JWKS with httpx, PyJWT), before the
  body is read, and what the activity must agree with;
* `card`: the base card and the approver view, rendered from a request's view (pure);
* `clicks`: an `adaptiveCard/action` invoke read into a `CardAction`, then a `Click`;
* `answers`: the invoke response (the presser's own view of the card, with a notice);
* `api`: the Bot Connector over httpx (app token by client credentials, cards posted and
  replaced, members looked up), only ever at the configured service URL;
* `channel`: `TeamsChannel`, the glue the `gate.channels` entry point names.
"""

from channels.teams.channel import TeamsChannel

__all__ = ["TeamsChannel"]
