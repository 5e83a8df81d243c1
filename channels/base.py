"""The Channel protocol every chat adapter implements, and the registry that loads them.

Built-in channels are registered like third-party ones, under the entry point group
`gate.channels` (see pyproject.toml). A channel is a class with a `from_settings`
constructor; it talks to gate only through `GateContext`, never to the database.
"""

from __future__ import annotations

import logging
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from gate.errors import ConfigError

if TYPE_CHECKING:
    from fastapi import APIRouter

    from gate.config import Settings
    from gate.service import DecisionResult
    from gate.views import RequestView

log = logging.getLogger(__name__)
ENTRY_POINT_GROUP = "gate.channels"


class DeliveryError(Exception):
    """A post or update failed. The outbox retries unless `permanent` is set.

    `retry_after` (seconds) is honoured when the platform says how long to back off.
    """

    def __init__(
        self, message: str, *, retry_after: float | None = None, permanent: bool = False
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.permanent = permanent


class GateContext(Protocol):
    """What a channel may ask of gate."""

    @property
    def settings(self) -> Settings: ...

    async def decide(
        self,
        *,
        request_id: str,
        channel: str,
        user_id: str,
        verdict: str,
        comment: str | None,
        edited_args: dict[str, Any] | None = None,
        reasons: list[str] | None = None,
        grant: tuple[str, str] | None = None,
    ) -> DecisionResult:
        """Decide as the approver whose id on `channel` is `user_id`.

        `edited_args` (approve), `reasons` (reject) and `grant` ((scope, duration), approve)
        are checked against the rule; `gate.errors.InvalidInput` when it does not offer them.
        """
        ...

    async def extend(
        self, *, request_id: str, channel: str, user_id: str, by: str
    ) -> DecisionResult:
        """Move the deadline as that approver; `outcome` is `Extended` when it moved."""
        ...

    async def view(self, request_id: str) -> RequestView | None:
        """The current state of a request, or None if unknown."""
        ...


@runtime_checkable
class Channel(Protocol):
    """A chat platform that shows approval cards and turns clicks into decisions."""

    name: str

    async def post(self, req: RequestView, target: str) -> str:
        """Post the card for `req` to `target`; return the platform's message reference."""
        ...

    async def update(self, req: RequestView, target: str, ref: str) -> None:
        """Replace the card at `ref` with the current state of `req`."""
        ...

    def router(self) -> APIRouter | None:
        """The callback endpoint(s), which verify the platform's signature first."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


class ChannelFactory(Protocol):
    def from_settings(self, settings: Any, gate: GateContext) -> Channel: ...


def available() -> dict[str, Any]:
    """Entry points of every installed channel, by name."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_channels(configured: dict[str, Any], gate: GateContext) -> dict[str, Channel]:
    """Build every configured channel; a channel that fails to load stops start-up."""
    installed = available()
    channels: dict[str, Channel] = {}
    for name, channel_settings in configured.items():
        ep = installed.get(name)
        if ep is None:
            raise ConfigError(
                f"no channel called {name!r} is installed (installed: {sorted(installed)})",
                key=f"channels.{name}",
            )
        try:
            factory: ChannelFactory = ep.load()
            channels[name] = factory.from_settings(channel_settings, gate)
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(f"channel failed to load: {exc}", key=f"channels.{name}") from exc
        log.info("channel %s loaded", name)
    return channels
