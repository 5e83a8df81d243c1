"""Slack: Block Kit approval cards and verified button callbacks, as a translator on gate's port.

The package, by role:

* `settings`: `SlackSettings`, the `[channels.slack]` table (the channel's `settings_model`).
* `channel`: `SlackChannel`, the adapter gate loads (post, update, router, aclose) and the
  Web API calls behind it, with Slack's failures mapped onto the outbox's retry rules.
* `callback`: the signature check on the raw bytes, then the parse of an interaction
  payload into Slack's own `Interaction`.
* `clicks`: each interaction turned into a neutral `gate.delivery.channel.Click`, handed to gate,
and
  the result answered (a private message, a modal, or the modal's errors).
* `card`, `modals`, `mrkdwn`: the Block Kit card and modals, pure functions of a request's
  view, and the escaping that keeps untrusted text inert in them.
"""

from channels.slack.channel import SlackChannel

__all__ = ["SlackChannel"]
