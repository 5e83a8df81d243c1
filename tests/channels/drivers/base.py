"""What every channel driver does: the neutral operations the contract suite asks for.

The contract suite (`tests/channels/test_contract.py`) speaks in neutral words: "the card
posted for request X", "alice clicks Approve", "forge a click", "replay a click", "take the
platform down". A driver translates each into its platform's shape over HTTP only: the
loopback fake in `tests/support/` (which records what gate sent), the callback URL gate
serves, and the platform's own signing. Drivers never import the channel's modules, so a
channel can be rewritten or moved and the suite still holds it to the same behaviour.

A new channel adds one driver module beside this one (a `Driver` subclass) and one entry
in `DRIVERS` (`tests/channels/drivers/__init__.py`).
"""

from __future__ import annotations

import contextlib
import itertools
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx

#: the neutral actions a card can offer and a click can ask for
ACTIONS = frozenset({"approve", "reject", "edit", "extend", "grant", "acknowledge"})


@dataclass(frozen=True)
class Card:
    """A card as the platform holds it now."""

    #: everything the card shows, as one string, for "does it say X" assertions
    text: str
    #: how many times gate replaced the card since it was posted
    updates: int
    #: the neutral actions the card offers (empty once the request is final)
    offers: frozenset[str]
    #: the platform's own form of the card, for the driver's markup check
    raw: Any = field(repr=False)


@dataclass(frozen=True)
class Private:
    """An answer only the clicker sees."""

    text: str
    #: the platform user it is shown to
    to: str


class Answer:
    """What one click got back: the HTTP status now, and (waiting for it) the private answer."""

    def __init__(self, status: int, private: Callable[[], Private]) -> None:
        self.status = status
        self._private = private

    def private(self) -> Private:
        """The answer shown only to the clicker; fails if none arrives."""
        return self._private()


def no_answer(what: str) -> Callable[[], Private]:
    """For clicks whose only answer is the refreshed card."""

    def fail() -> Private:
        raise AssertionError(f"{what}: the clicker got no private answer")

    return fail


class Driver:
    """The neutral operations on one platform. Subclasses implement them for their fake."""

    #: the channel's entry point name
    name: ClassVar[str]
    #: why the channel takes no clicks (the click cases skip with it); None: it takes clicks
    no_clicks: ClassVar[str | None] = None
    #: why the platform cannot be made to fail (the outage case skips); None: it can
    no_outage: ClassVar[str | None] = None
    #: characters of a call as gate renders it (`gate.rendering.as_text`) the card shows whole
    args_chars: ClassVar[int] = 0
    #: how the card labels the agent's summary, as the agent's claim
    claim_label: ClassVar[str] = "Agent's summary (the agent's claim, not checked by gate)"
    #: why an edit form opens without asking gate (it is part of the card or page gate
    #: built); None: a click asks gate to open it
    form_in_card: ClassVar[str | None] = None
    #: why a pending card is replaced only in answer to a click on it (a change made
    #: elsewhere shows from the next click on); None: gate refreshes it at once
    refresh_on_click: ClassVar[str | None] = None

    #: the gate under test, handed over by the suite once it runs (`attach`)
    gate_url: str | None = None

    def start(self) -> None:
        """Start the fake platform."""

    def attach(self, gate_url: str) -> None:
        """The gate under test is running at `gate_url`: for platforms that call gate on
        their own, not only on a click (Teams fetches an approver's view of a card)."""
        self.gate_url = gate_url

    def stop(self) -> None:
        """Stop the fake platform."""

    def settings(self) -> dict[str, Any]:
        """The `[channels.NAME]` table that points gate at the fake."""
        return {}

    def user_id(self, person: str) -> str:
        """The platform's user id for a person (an approver's name, or anyone else)."""
        return person

    def card(self, request_id: str) -> Card:
        """The card posted for `request_id` (waits for it to be posted)."""
        raise NotImplementedError

    def links_to(self, card: Card, url: str) -> bool:
        """Whether the card links to `url` (gate's page for the request)."""
        return url in card.text

    def live_markup(self, card: Card, request_id: str, own_url: str) -> list[str]:
        """Fragments of the card the platform would act on (mentions, links that are not
        gate's own `own_url`, tags, controls for another request, invisible characters);
        empty when the card is inert."""
        raise NotImplementedError

    def click(
        self,
        gate_url: str,
        request_id: str,
        person: str,
        action: str,
        *,
        reason: str | None = None,
        reasons: Sequence[str] = (),
        edits: dict[str, str] | None = None,
        grant: tuple[str, str] | None = None,
    ) -> Answer:
        """`person` clicks `action` on the card, delivered and signed the platform's way.

        `action` is approve, reject, edit (approve with `edits`, texts by argument name) or
        extend; `grant` is a (scope, duration) choice with an approval; `reasons` are preset
        reject reasons by their label. The click is sent whether or not the card shows that
        control, as a crafted (but correctly signed) callback could be.
        """
        raise NotImplementedError

    def forgeries(self, gate_url: str, request_id: str, person: str) -> dict[str, httpx.Response]:
        """An approval by `person` delivered wrongly, each way: signed with the wrong secret,
        bytes that are not even a callback under a wrong signature, unsigned, and correctly
        signed but too old. Every one must be refused before anything is read."""
        raise NotImplementedError

    def replay(self, gate_url: str, request_id: str, person: str, action: str) -> list[Answer]:
        """One signed delivery of `person`'s `action` click, sent twice (a platform retry, or a
        captured body replayed)."""
        raise NotImplementedError

    def send_link(self, gate_url: str, person: str, code: str) -> Answer | None:
        """`person` sends the console's one-time link `code` to gate through the platform,
        the way its channel takes one (`ChannelContext.link`); None when the channel takes
        no codes (its ids come from gate.toml or the identity provider)."""
        return None

    def outage(self) -> contextlib.AbstractContextManager[None]:
        """Inside the block the platform answers every post and update with a server error."""
        raise NotImplementedError

    def platform_calls(self) -> int:
        """How many card posts and updates the platform has received (failed ones too)."""
        raise NotImplementedError


# -- helpers shared by the drivers --------------------------------------------------------


def invisible(text: str) -> list[str]:
    """Characters that are not shown or change the direction of text (newline and tab aside).

    Independent of gate's own list on purpose: the suite checks gate, it does not reuse it.
    """
    kinds = {"Cc", "Cf", "Co", "Cs", "Zl", "Zp"}
    return [f"U+{ord(c):04X}" for c in text if c not in "\n\t" and unicodedata.category(c) in kinds]


def strings(node: Any) -> Iterator[str]:
    """Every string in a JSON structure."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)


def objects(node: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object in a structure, depth first."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from objects(value)
    elif isinstance(node, list):
        for value in node:
            yield from objects(value)


_clicks = itertools.count(1)


def click_number() -> int:
    """A number no other click in this process has (trigger ids, event ids)."""
    return next(_clicks)
