"""One driver per channel: what the contract suite does to a platform, in its own terms.

The contract suite (`tests/channels/test_contract.py`) speaks in neutral words: "the card
posted for request X", "alice clicks Approve", "forge a click", "replay a click", "take the
platform down". A driver (a `Driver` subclass, one module per channel) translates each into
its platform's shape over HTTP only: the loopback fake in `tests/support/` that records what
gate sent, the callback URL gate serves, and the platform's own signing. Drivers never
import the channel's code, so a channel can be rewritten or moved and the suite still holds
it to the same behaviour.
"""

from __future__ import annotations

from tests.channels.drivers.base import Answer, Card, Driver, Private
from tests.channels.drivers.discord import DiscordDriver
from tests.channels.drivers.email import EmailDriver
from tests.channels.drivers.feishu import FeishuDriver
from tests.channels.drivers.log import LogDriver
from tests.channels.drivers.slack import SlackDriver
from tests.channels.drivers.teams import TeamsDriver
from tests.channels.drivers.telegram import TelegramDriver
from tests.channels.drivers.wecom import WeComDriver

#: every channel the suite knows how to drive, by entry point name
DRIVERS: dict[str, type[Driver]] = {
    driver.name: driver
    for driver in (
        SlackDriver,
        FeishuDriver,
        LogDriver,
        TelegramDriver,
        DiscordDriver,
        WeComDriver,
        TeamsDriver,
        EmailDriver,
    )
}

__all__ = ["DRIVERS", "Answer", "Card", "Driver", "Private"]
