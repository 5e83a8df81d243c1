"""Reading a verified Discord interaction into Discord's own terms: which control, which
request, who clicked, on which message.

Runs only after the signature check. Everything in the body is still read strictly: the
clicker is `member.user.id` (in a server) or `user.id` (in a DM), a snowflake, never a
username or nick; the custom_id is parsed by `channels.discord.ids`; select values and modal
values are bounded. A shape gate did not send is a ValueError, answered with a 400.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from channels.discord import ids
from channels.discord.markdown import MAX_CUSTOM_ID, MAX_OPTIONS
from channels.discord.modals import submitted_values
from channels.discord.settings import is_snowflake

PING, APPLICATION_COMMAND, MESSAGE_COMPONENT, AUTOCOMPLETE, MODAL_SUBMIT = 1, 2, 3, 4, 5
BUTTON, STRING_SELECT = 2, 3
#: how deep and how many components of the clicked message are looked at (Discord's own
#: limits are far below: 5 rows of 5, or 40 components in the newer layout)
MAX_MESSAGE_COMPONENTS = 100

#: interaction tokens are a few hundred URL-safe characters
MAX_TOKEN = 1000
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.")

Kind = Literal["ping", "component", "modal", "command", "autocomplete"]


@dataclass(frozen=True)
class Interaction:
    """A verified interaction, in Discord's terms."""

    kind: Kind
    #: the interaction's id: the same for a body delivered twice, new for every click
    id: str = ""
    user_id: str = ""
    custom: ids.CustomId | None = None
    #: a string select's picked values
    values: tuple[str, ...] = ()
    #: a submitted modal's text values, by input custom_id
    inputs: dict[str, str] = field(default_factory=dict)
    #: the message the component was on (a modal opened from a component has it too)
    message_id: str | None = None
    #: gate's requests whose controls are on that message
    message_requests: frozenset[str] = frozenset()
    #: the application and the interaction's token: together they address a follow-up
    #: message, the only way to tell the clicker something after the first answer
    application_id: str | None = None
    token: str | None = None

    @property
    def request_id(self) -> str:
        """The request the control names."""
        return self.custom.request_id if self.custom else ""

    @property
    def on_its_card(self) -> bool:
        """Whether the clicked message is this request's card, so UPDATE_MESSAGE may
        replace it (a crafted custom_id on another message must not repaint that one)."""
        return self.message_id is not None and self.request_id in self.message_requests


def parse_interaction(payload: Mapping[str, Any]) -> Interaction:
    """Translate a verified interaction body; ValueError when it is not one gate can read."""
    kind = payload.get("type")
    if kind == PING:
        return Interaction("ping")
    if kind in (APPLICATION_COMMAND, AUTOCOMPLETE):
        return Interaction("command" if kind == APPLICATION_COMMAND else "autocomplete")
    if kind not in (MESSAGE_COMPONENT, MODAL_SUBMIT):
        raise ValueError("not an interaction type gate handles")
    interaction_id = payload.get("id")
    if not is_snowflake(interaction_id):
        raise ValueError("the interaction has no valid id")
    data = payload.get("data")
    if not isinstance(data, Mapping):
        raise ValueError("the interaction has no data")
    message = payload.get("message")
    message = message if isinstance(message, Mapping) else {}
    message_id = message.get("id")
    application_id, token = payload.get("application_id"), payload.get("token")
    common: dict[str, Any] = {
        "id": interaction_id,
        "application_id": application_id if is_snowflake(application_id) else None,
        "token": token if token_ok(token) else None,
        "user_id": clicker(payload),
        "message_id": message_id if is_snowflake(message_id) else None,
        "message_requests": frozenset(_requests_on(message.get("components"))),
    }
    if kind == MODAL_SUBMIT:
        custom = ids.parse(data.get("custom_id"), ids.MODALS)
        inputs = submitted_values(data.get("components"))
        return Interaction("modal", custom=custom, inputs=inputs, **common)
    custom = ids.parse(data.get("custom_id"), ids.BUTTONS + ids.SELECTS)
    is_select = custom.verb in ids.SELECTS
    if data.get("component_type") != (STRING_SELECT if is_select else BUTTON):
        raise ValueError("the component type does not match the control")
    values = _values(data.get("values")) if is_select else ()
    return Interaction("component", custom=custom, values=values, **common)


def token_ok(token: object) -> bool:
    """Whether an interaction token is safe to put in a URL path (it is Discord's, but a
    path is no place for `/`, `?` or `..`)."""
    return (
        isinstance(token, str)
        and 0 < len(token) <= MAX_TOKEN
        and all(c in _TOKEN_CHARS for c in token)
    )


def clicker(payload: Mapping[str, Any]) -> str:
    """The user id of who clicked: `member.user.id` in a server, `user.id` in a DM."""
    member = payload.get("member")
    user = member.get("user") if isinstance(member, Mapping) else payload.get("user")
    user_id = user.get("id") if isinstance(user, Mapping) else None
    if not is_snowflake(user_id):
        raise ValueError("the interaction names no valid user")
    assert isinstance(user_id, str)
    return user_id


def _values(values: Any) -> tuple[str, ...]:
    if not isinstance(values, list) or not 0 < len(values) <= MAX_OPTIONS:
        raise ValueError("a select sent no values, or too many")
    if not all(isinstance(v, str) and 0 < len(v) <= 100 for v in values):
        raise ValueError("a select value is not gate's")
    return tuple(values)


def _requests_on(components: Any) -> Iterator[str]:
    """Request ids in the custom_ids of a message's components (bounded walk)."""
    stack, seen = [components], 0
    while stack and seen < MAX_MESSAGE_COMPONENTS:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node[:MAX_MESSAGE_COMPONENTS])
            continue
        if not isinstance(node, Mapping):
            continue
        seen += 1
        custom_id = node.get("custom_id")
        if isinstance(custom_id, str) and len(custom_id) <= MAX_CUSTOM_ID:
            try:
                yield ids.parse(custom_id, ids.BUTTONS + ids.SELECTS).request_id
            except ValueError:
                pass
        stack.append(node.get("components"))
