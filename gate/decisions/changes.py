"""One write transaction's changes, and the pump its card rows are handed to.

`GateService.changing` opens the transaction, lets the use case record what it changed
here, and after the commit tells this replica's waiters, its outbox pump and its metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from sqlmodel import Session

from gate.base.notify import Event
from gate.decisions import outcomes
from gate.decisions.readmodel import RequestView
from gate.store import outbox


@dataclass
class Change:
    """One write transaction's changes, so the after-commit step is written once.

    Use cases record each state-machine outcome; `GateService.changing` stages the events
    inside the transaction (other replicas hear of them only if it commits) and, after the
    commit, publishes them to this replica's waiters, kicks the outbox and counts finished
    requests for metrics.
    """

    session: Session
    events: list[Event] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    #: each request this transaction finished, as the state machine reported it (the log)
    decided: list[outcomes.Changed] = field(default_factory=list)
    #: each request as this transaction left it, built from what it wrote: the cards it owes
    #: are sent showing this, not a copy read back (`sending.mark_sent` owes one more
    #: refresh, read back, if another replica's newer card may have landed first)
    shown: dict[str, RequestView] = field(default_factory=dict)
    #: run after the commit, in order (an agent's trip noted in this replica's memory)
    after_commit: list[Callable[[], None]] = field(default_factory=list)

    def record(self, outcome: outcomes.Outcome) -> None:
        """Note what `outcome` changed (nothing for refusals and no-ops)."""
        if isinstance(outcome, outcomes.Changed):
            self.events.append(Event("final", outcome.request_id))
            self.finished.append(outcome.request_id)
            self.decided.append(outcome)
        elif isinstance(outcome, outcomes.Voted | outcomes.Extended):
            self.events.append(Event("changed", outcome.request_id))

    def touched(self, request_id: str) -> None:
        """Note a change that is not a transition (an outcome report): readers re-read."""
        self.events.append(Event("changed", request_id))

    def shows(self, view: RequestView) -> None:
        """`view` is its request as this transaction leaves it (the cards it owes show it)."""
        self.shown[view.id] = view


class CardPump(Protocol):
    """This replica's outbox pump, as a writing transaction sees it (`gate.delivery.jobs.Jobs`)."""

    def accepting(self) -> bool:
        """True while the pump runs and takes rows handed to it."""

    def hand_over(self, rows: list[tuple[outbox.Claimed, RequestView | None]]) -> None:
        """Send these rows, claimed by a transaction that committed, with their views
        (None: read the request before sending). Safe from any thread."""
