"""Denials as a signal: an agent people keep saying no to is asked about its every call.

After `in_a_row` rejections in a row, or `per_hour` rejections within an hour (the
`[denials]` table, or the rejected request's rule's own `denials_in_a_row` /
`denials_per_hour`), the agent *trips*: from then on every call it makes is asked, even one
policy would allow, until a person resets it (the console's Agents page, or
`gate agents reset NAME`). A call policy denies stays denied. The request's reason says why
("agent 'ci-bot' tripped: 3 rejections in a row; asked until a person resets it"), so every
card shows it.

The agent is the call's `agent_id`, or the name of the token that sent it when it names
none: what `gate agents reset` takes and what cards show.

Cost: an un-gated call reads only this replica's memory (`Trips`, a dict that is empty
while nobody is tripped): no statement. The counting happens when a person rejects a call,
in the rejection's own write transaction (`gate.store.trips`). Each replica keeps the
active trips in memory: loaded at start, updated at once by the replica that trips or
resets an agent, and by the others when they hear its NOTIFY (`TRIPS_EVENT`) or after their
LISTEN connection was down (they reload). Between a trip's commit on one replica and its
notification reaching another (milliseconds) that other replica may still let a call of
the agent through as policy says; the docs say so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Protocol

from gate.base import threads
from gate.base.notify import Event, Notifier
from gate.config.settings import RuleSettings, Settings
from gate.decisions import audit
from gate.store import trips as store
from gate.store.db import Database
from gate.store.records import RequestRow, TripRow

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from gate.decisions.changes import Change
    from gate.policy.rules import Decision, Policy

log = logging.getLogger(__name__)

#: the rule name of a call asked only because its agent tripped (policy would have allowed)
TRIPPED_RULE = "agent_tripped"
#: the notification kind that tells every replica to reload the active trips
TRIPS_EVENT = "trips"


def agent_of(agent_id: str | None, submitted_by: str | None) -> str:
    """The agent a call or request belongs to: its agent_id, else its token's name."""
    return agent_id or submitted_by or ""


@dataclass(frozen=True, slots=True)
class Thresholds:
    """When a rejection trips its agent: `in_a_row` and `per_hour` (0: that test is off)."""

    in_a_row: int
    per_hour: int

    @property
    def on(self) -> bool:
        """Whether any test is on."""
        return self.in_a_row > 0 or self.per_hour > 0

    def tripped_by(self, streak: int, in_hour: int) -> str | None:
        """Why these counts trip the agent ("3 rejections in a row"), or None."""
        if self.in_a_row and streak >= self.in_a_row:
            return f"{streak} rejections in a row"
        if self.per_hour and in_hour >= self.per_hour:
            return f"{in_hour} rejections within an hour"
        return None


def thresholds(settings: Settings, rule_name: str | None) -> Thresholds:
    """The thresholds for a rejection of a request asked under `rule_name`: the rule's own
    where it sets them, else the `[denials]` table's."""
    rule: RuleSettings | None = next((r for r in settings.rules if r.name == rule_name), None)
    in_a_row = rule.denials_in_a_row if rule and rule.denials_in_a_row is not None else None
    per_hour = rule.denials_per_hour if rule and rule.denials_per_hour is not None else None
    return Thresholds(
        settings.denials.in_a_row if in_a_row is None else in_a_row,
        settings.denials.per_hour if per_hour is None else per_hour,
    )


def words(agent: str, why: str) -> str:
    """What a tripped agent's request says about why it was asked."""
    return f"agent {agent!r} tripped: {why}; asked until a person resets it"


class Trips:
    """This replica's copy of the active trips: agent -> the words its requests carry.

    Read on every call (`note_for`), written rarely; the dict is replaced whole on reload,
    so a reader never sees a half-built one (a reference swap is atomic in CPython).
    """

    def __init__(self, load: Callable[[], list[TripRow]] | None = None) -> None:
        self._load = load
        self._notes: dict[str, str] = {}

    @property
    def any(self) -> bool:
        """Whether any agent is tripped (False on nearly every call: nothing else is read)."""
        return bool(self._notes)

    def note_for(self, agent: str) -> str | None:
        """The words for a tripped agent's calls, or None when it is not tripped."""
        notes = self._notes
        return notes.get(agent) if notes else None

    @property
    def tripped(self) -> dict[str, str]:
        """Every tripped agent and its words (a copy)."""
        return dict(self._notes)

    def reload(self) -> None:
        """Read the active trips again (one statement; a worker thread or start-up)."""
        if self._load is not None:
            self._notes = {row.agent: row.reason for row in self._load()}

    def tripped_here(self, agent: str, note: str) -> None:
        """This replica tripped `agent` (after its commit)."""
        self._notes = {**self._notes, agent: note}

    def reset_here(self, agent: str) -> None:
        """This replica reset `agent` (after its commit)."""
        self._notes = {name: note for name, note in self._notes.items() if name != agent}


def asked(decision: Decision, note: str, policy: Policy) -> Decision:
    """`decision` for a call of a tripped agent: asked (with `note` as why), unless policy
    denies it. An ask keeps its rule and approvers; an allow is asked under `TRIPPED_RULE`,
    whose approvers are `server.default_approvers` (empty: any approver)."""
    if decision.action == "deny":
        return decision
    trail = (*decision.trail, note)
    if decision.action == "ask" and decision.rule is not None:
        # the note is frozen onto the request's offers, so every card shows it
        rule = replace(decision.rule, offers=replace(decision.rule.offers, tripped=note))
        reason = f"{decision.reason} ({note})"
        return replace(decision, rule=rule, reason=reason, trail=trail, tripped=note)
    forced = policy.forced_rule()
    offers = replace(forced.offers, tripped=note)
    rule = replace(forced, name=TRIPPED_RULE, reason=note, offers=offers)
    return replace(decision, action="ask", rule=rule, reason=note, trail=trail, tripped=note)


#: the audit events of a trip (on the rejected request that tripped it) and of its reset
TRIPPED_EVENT, RESET_EVENT = "agent_tripped", "agent_reset"


class UseCases(Protocol):
    """What a trip and a reset need of the use cases (`GateService`, which imports this
    module: named by shape, so neither module needs the other's name)."""

    settings: Settings
    trips: Trips

    def clock(self) -> datetime: ...

    def changing(self) -> AbstractContextManager[Change]: ...


def after_rejection(service: UseCases, change: Change, req: RequestRow, now: datetime) -> None:
    """A person just rejected `req` in `change`'s transaction: trip its agent when its
    rejections reach a threshold (in the same transaction; said in the audit and the log)."""
    limits = thresholds(service.settings, req.rule)
    agent = agent_of(req.agent_id, req.submitted_by)
    if not limits.on or not agent:
        return
    session = change.session
    streak, in_hour = store.count_rejections(
        session, agent=agent, in_a_row=limits.in_a_row, now=now
    )
    why = limits.tripped_by(streak, in_hour)
    if why is None:
        return
    note = words(agent, why)
    if not store.trip(session, TripRow(agent, note, req.id, now)):
        return  # tripped already: the first trip stands until a reset
    detail: dict[str, object] = {"agent": agent, "why": why}
    req.audit_head = audit.record(
        session,
        request_id=req.id,
        kind=TRIPPED_EVENT,
        actor=None,
        via="gate",
        now=now,
        detail=detail,
        prev=req.audit_head,
    )
    change.events.append(Event(TRIPS_EVENT, agent))
    change.after_commit.append(partial(_tripped, service.trips, agent, note, req.id, now))


def _tripped(trips: Trips, agent: str, note: str, request_id: str, at: datetime) -> None:
    trips.tripped_here(agent, note)
    logged_trip(agent, note, request_id, at)


def reset(service: UseCases, agent: str, *, by: str, via: str) -> TripRow | None:
    """A person resets a tripped agent: its calls are decided by policy again. One write
    transaction; the reset is an audit event of the request that tripped it, and logged.
    Returns the trip that ended, or None when the agent was not tripped."""
    now = service.clock()
    with service.changing() as change:
        row = store.reset(change.session, agent=agent, by=by, now=now)
        if row is None:
            return None
        if row.request_id is not None:
            audit.record(
                change.session,
                request_id=row.request_id,
                kind=RESET_EVENT,
                actor=by,
                via=via,
                now=now,
                detail={"agent": agent, "tripped": row.reason},
            )
        change.events.append(Event(TRIPS_EVENT, agent))
    service.trips.reset_here(agent)
    logged_reset(row, by, via)
    return row


def follow(notifier: Notifier, trips: Trips) -> None:
    """Keep `trips` current on this replica: reload it (in a worker thread) when any replica
    trips or resets an agent (`TRIPS_EVENT`), and after a gap in notifications."""
    running: set[asyncio.Future[None]] = set()

    def reload(_agent: str = "") -> None:
        task = asyncio.ensure_future(threads.run_sync(trips.reload))
        running.add(task)
        task.add_done_callback(_reloaded)

    def _reloaded(task: asyncio.Future[None]) -> None:
        running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # the next notification, or the LISTEN reconnect's gap, reloads again
            log.warning("could not reload the tripped agents: %s", task.exception())

    notifier.topics[TRIPS_EVENT] = reload
    notifier.on_gap.append(reload)


def logged_trip(agent: str, note: str, request_id: str, at: datetime) -> None:
    """The log line of a trip (every trip is also an audit event of its request)."""
    log.warning("agent %r tripped at %s by request %s: %s", agent, at.isoformat(), request_id, note)


def logged_reset(row: TripRow, by: str, via: str) -> None:
    """The log line of a reset."""
    log.warning(
        "agent %r reset by %s via %s (tripped at %s: %s)",
        row.agent,
        by,
        via,
        row.tripped_at.isoformat(),
        row.reason,
    )


def active_trips(db: Database) -> list[TripRow]:
    """The active trips (`gate.decisions.denials.Trips`' loader): one statement."""
    with db.read_conn() as conn:
        return store.active(conn)


__all__ = [
    "TRIPPED_RULE",
    "TRIPS_EVENT",
    "Thresholds",
    "Trips",
    "active_trips",
    "after_rejection",
    "agent_of",
    "asked",
    "follow",
    "reset",
    "thresholds",
    "words",
]
