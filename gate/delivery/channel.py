"""The channel port: what a chat surface implements, and all it may ask of gate.

A channel is a translator. It verifies a callback on the raw bytes, parses it into a neutral
`Click`, hands the click to gate (`ChannelContext.act`) and renders the `Result` it gets
back; it renders cards from a request's view for the outbox (`post`, `update`). It never
decides who may act or what a rule offers: gate's one decision pipeline (`gate.decisions.acting`)
answers that for every surface, and the result's refusal says why in words any surface can
show.

Channels are found through the `gate.channels` entry point group (built-in ones too, see
pyproject.toml). The object an entry point names is a `ChannelPlugin`: it brings the
channel's display name ("Slack"), the pydantic model that validates its `[channels.NAME]`
table, and a `from_settings` constructor. So a new channel is one folder under `channels/`
and one entry point; nothing under `gate/` changes.
"""

from __future__ import annotations

import logging
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from gate.base.errors import ConfigError
from gate.base.surfaces import available
from gate.decisions.clicks import Action as Action
from gate.decisions.clicks import Click as Click
from gate.decisions.clicks import LinkAnswer as LinkAnswer

if TYPE_CHECKING:
    from fastapi import APIRouter
    from pydantic import BaseModel

    from gate.config.settings import Settings
    from gate.decisions.acting import Result
    from gate.decisions.readmodel import RequestView

log = logging.getLogger(__name__)


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


class ChannelContext(Protocol):
    """What a channel may ask of gate: decisions, views and settings, never the database."""

    @property
    def settings(self) -> Settings: ...

    async def act(self, click: Click) -> Result:
        """Run a click through the decision pipeline; refusals come back in the result."""
        ...

    async def view(self, request_id: str) -> RequestView | None:
        """The current state of a request, or None if unknown."""
        ...

    async def link(
        self, channel: str, user_id: str, code: str, *, exposed: bool = False
    ) -> LinkAnswer:
        """Bind `user_id` (whom the platform's signed callback names) on `channel` to the
        approver whose console handed out the one-time `code`; the answer says, in words,
        whether it did (show it to the sender, privately). `exposed`: the code was sent where
        others read it (a group chat): it is used up and binds nothing."""
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


class ChannelPlugin(Protocol):
    """What a `gate.channels` entry point names (usually the channel class itself)."""

    #: how people call the surface in sentences: "Approved by alice in Slack"
    display_name: ClassVar[str]
    #: validates the `[channels.NAME]` table (None: the table is passed as a dict)
    settings_model: ClassVar[type[BaseModel] | None]

    def from_settings(self, settings: Any, ctx: ChannelContext) -> Channel: ...


@cache
def plugin(name: str) -> ChannelPlugin | None:
    """The installed channel called `name`, or None."""
    ep = available().get(name)
    if ep is None:
        return None
    loaded: ChannelPlugin = ep.load()
    return loaded


def validate_settings(name: str, table: Any, source: str | None = None) -> Any:
    """Check `[channels.NAME]` with the channel's own settings model; ConfigError names the key."""
    found = plugin(name)
    if found is None:
        raise ConfigError(
            f"no channel called {name!r} is installed (installed: {sorted(available())})",
            source=source,
            key=f"channels.{name}",
        )
    from pydantic import BaseModel, ValidationError

    if isinstance(table, BaseModel):
        table = table.model_dump()
    model = getattr(found, "settings_model", None)
    if model is None:
        return dict(table or {})
    try:
        return model.model_validate(table or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        key = f"channels.{name}" + (f".{where}" if where else "")
        reason = str(first["msg"]).removeprefix("Value error, ")
        raise ConfigError(reason, source=source, key=key) from None


def load_channels(
    configured: dict[str, Any], ctx: ChannelContext, *, source: str | None = None
) -> dict[str, Channel]:
    """Build every configured channel; a channel that fails to load stops start-up.

    `source` is the gate.toml path, named in configuration errors.
    """
    channels: dict[str, Channel] = {}
    for name, table in configured.items():
        settings = validate_settings(name, table, source)
        found = plugin(name)
        assert found is not None  # validate_settings refused unknown names
        try:
            channels[name] = found.from_settings(settings, ctx)
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(f"channel failed to load: {exc}", key=f"channels.{name}") from exc
        log.info("channel %s loaded", name)
    return channels
