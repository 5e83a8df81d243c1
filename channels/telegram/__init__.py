"""Telegram: approval cards from a bot, over the Bot API with httpx.

One module per role:

* `settings`: `[channels.telegram]` (`TelegramSettings`, the channel's settings model);
* `tokens`: what buttons and typed codes carry, sealed with AES-SIV / a keyed permutation;
* `card`: the card (HTML text and inline keyboard) rendered from a request's view (pure);
* `updates`: a verified webhook Update read into a press, a command or a prompt's reply;
* `replies`: what the bot says back, and the Click a typed message means;
* `api`: the Bot API over httpx, failures as `DeliveryError`s the outbox understands;
* `channel`: `TelegramChannel`, the glue the `gate.channels` entry point names.
"""

from channels.telegram.card import Card, render
from channels.telegram.channel import ACK_BUDGET_SECONDS, SECRET_HEADER, TelegramChannel
from channels.telegram.settings import TelegramSettings
from channels.telegram.tokens import Button, NotOurs, Sealer
from channels.telegram.updates import Press, Typed, read_update

__all__ = [
    "ACK_BUDGET_SECONDS",
    "SECRET_HEADER",
    "Button",
    "Card",
    "NotOurs",
    "Press",
    "Sealer",
    "TelegramChannel",
    "TelegramSettings",
    "Typed",
    "read_update",
    "render",
]
