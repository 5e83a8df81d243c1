"""Discord: approval cards posted by a bot, and verified interactions, as a translator on gate's
port.

The package, by role:

* `settings`: `DiscordSettings`, the `[channels.discord]` table (the channel's settings model).
* `channel`: `DiscordChannel`, the adapter gate loads (post, update, router, aclose).
* `api`: the bot's REST calls (messages created and edited), failures mapped onto the outbox's
  retry rules.
* `verify`: the Ed25519 signature and timestamp window on the raw bytes.
* `interaction`, `ids`: a verified body read into Discord's terms; custom_ids built and read
  back strictly.
* `clicks`, `answers`: each interaction turned into a neutral `gate.delivery.channel.Click`, handed
to
  gate, and answered (a private message, the updated card, or a modal).
* `card`, `modals`, `markdown`: the message and modals, pure functions of a request's view,
  and what keeps untrusted text inert in them.
"""

from channels.discord.channel import DiscordChannel

__all__ = ["DiscordChannel"]
