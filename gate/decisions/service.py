"""Use cases: submit, read, cancel, expire. Each owns its transaction.

Everything here is synchronous (it runs in a worker thread) except `wait`, which holds
no thread and no database connection while it sleeps on the notifier.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from gate.asking.binding import call_hash
from gate.base import tracing
from gate.base.errors import ApprovalSpent, KeyReused
from gate.base.notify import Event, Notifier
from gate.base.statuses import GrantStatus, RequestStatus, new_id, utcnow
from gate.config.settings import Settings
from gate.decisions import (
    audit,
    denials,
    destinations,
    grants,
    history,
    machine,
    outcomes,
    requestlog,
    spans,
)
from gate.decisions.acting import Result, approved_own, raise_for
from gate.decisions.changes import CardPump, Change
from gate.decisions.decision_log import DecisionLog
from gate.decisions.reading import RequestReads
from gate.decisions.readmodel import RequestView, build_view
from gate.identity.auth import Principal
from gate.inputs.bodies import GateCall
from gate.policy import offers
from gate.policy import stages as chains
from gate.policy.history import Reader
from gate.policy.routes import Routing, routed_detail
from gate.policy.rules import CallFacts, Decision, Policy, Rule
from gate.policy.shadow import ShadowOutcome
from gate.store import batch, outbox, reads, records, webhooks
from gate.store import decisions as store
from gate.store.db import Database
from gate.store.records import RequestRow

log = logging.getLogger(__name__)


#: what must match for a key to find its earlier request: the call (its hash covers the tool,
#: the arguments and the key) and who it was made for
_SAME_CALL = ("args_hash", "agent_id", "user_id", "session_id", "org_id")
#: outcomes that spend an approval: the call was made (`not_run` leaves it unspent)
SPENT = frozenset({"ran", "failed"})


@dataclass(frozen=True)
class Submitted:
    """Policy's decision for a call and, for `ask`, the request (new or found again)."""

    decision: Decision
    view: RequestView | None
    created: bool


class GateService(RequestReads):
    """gate's use cases over one database, policy and notifier."""

    def __init__(
        self,
        *,
        settings: Settings,
        db: Database,
        policy: Policy,
        notifier: Notifier,
        clock: Callable[[], datetime] = utcnow,
        kick_outbox: Callable[[], None] = lambda: None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.policy = policy
        self.notifier = notifier
        self.clock = clock
        self.kick_outbox = kick_outbox
        self.kick_webhooks: Callable[[], None] = lambda: None  # set with `[[webhooks]]`
        #: when set and running, the delivery rows a change writes are claimed in its own
        #: transaction and handed to this pump after the commit (`changing`)
        self.pump: CardPump | None = None
        self.configured_channels: dict[str, Any] = {}
        #: called after commit with the id of each request this process finished (metrics)
        self.on_final: Callable[[str], None] = lambda request_id: None
        #: where `answered` notes each answer (None: the decision log is off)
        self.decision_log: DecisionLog | None = None
        #: told what shadow rules would have answered a call (metrics)
        self.on_shadow: Callable[[tuple[ShadowOutcome, ...]], None] = lambda found: None
        self.trips = denials.Trips(partial(denials.active_trips, db))  # this replica's copy

    # -- submit -----------------------------------------------------------------------------

    def submit(self, call: GateCall, principal: Principal) -> Submitted:
        """Apply policy; for `ask`, create the request (or find it again by idempotency key)."""
        decision = history.judged(self, call, principal)  # self.judge, under history's lock
        if decision.action != "ask":
            return Submitted(decision, None, False)
        return self.ask(call, principal, decision)

    def answered(self, call: GateCall, principal: Principal, submitted: Submitted) -> None:
        """Note what `POST /v1/gate` answered in the decision log (a buffer: no I/O)."""
        if self.decision_log is not None:
            view = submitted.view
            self.decision_log.answered(
                call, principal.name, submitted.decision, view.id if view is not None else None
            )

    def judge(
        self, call: GateCall, principal: Principal | None = None, reader: Reader | None = None
    ) -> Decision:
        """Policy's decision, asked if the agent tripped; I/O only through `reader` (history)."""
        decision = self.policy.evaluate(CallFacts.of(call), reader)
        if decision.shadow:
            self.on_shadow(decision.shadow)
        if self.trips.any:  # nobody tripped (nearly always): nothing more is read
            who = denials.agent_of(call.agent_id, principal.name if principal else None)
            note = self.trips.note_for(who)
            decision = denials.asked(decision, note, self.policy) if note else decision
        if tracing.tracer is not None:
            spans.judged(call, decision)
        return decision

    def ask(self, call: GateCall, principal: Principal, decision: Decision) -> Submitted:
        """Create the request an `ask` decision makes (or find it again by idempotency key)."""
        args_hash = call_hash(call.tool_name, call.tool_args, call.idempotency_key)
        rule = decision.rule
        assert rule is not None
        offers.require_justification(rule.offers, rule.name, call.justification)
        now = self.clock()
        req = self._new_request(call, principal, decision, rule, args_hash, now)
        router = self.policy.router
        routing = (
            router.route(rule.name, CallFacts.of(call).activation(), now)
            if router.routes
            else Routing(None)
        )
        try:
            found, granted, view = self._store(req, principal, decision, rule, now, routing)
        except IntegrityError:
            # Two submits with the same idempotency key raced; the other one won.
            with self.db.read() as session:
                found = self._by_key(session, req)
            if found is None:
                raise
        if found is not None:
            return Submitted(decision, found, False)
        view = view or self._created_view(req)
        requestlog.asked(view, granted=granted)
        if tracing.tracer is not None:
            spans.asked(view, granted=granted)
        if granted:
            assert view.reason is not None
            allowed = Decision("allow", rule, view.reason, (*decision.trail, "granted"))
            return Submitted(allowed, view, True)
        return Submitted(decision, view, True)

    def _created_view(self, req: RequestRow) -> RequestView:
        """The row just written is the view: a new request has no votes, and a grant's
        approval was set on it before the insert. Nothing is read back."""
        return build_view(req, [], public_url=self.settings.server.base_url)

    def _new_request(
        self,
        call: GateCall,
        principal: Principal,
        decision: Decision,
        rule: Rule,
        args_hash: str,
        now: datetime,
    ) -> RequestRow:
        """The request a call under `rule` makes, with the rule's terms frozen onto it."""
        wait = rule.timeout
        # The caller's own deadline (expires_in) may shorten the wait, never lengthen it;
        # not for on_timeout = "approve", where an early expiry would be an early yes.
        if call.expires_in is not None and rule.on_timeout != "approve":
            wait = min(wait, timedelta(seconds=call.expires_in))
        frozen = decision.offers()
        if frozen.stages:  # a stage whose approvers are all the requester asks its fallback
            mine = partial(approved_own, self.settings, user_id=call.user_id)
            stages = chains.for_requester(
                frozen.stages,
                self.policy.expand_approvers,
                lambda name: mine([name], submitted_by=principal.name),
            )
            frozen = replace(frozen, stages=stages)
        return records.new_request(
            id=new_id(),
            idempotency_key=call.idempotency_key,
            tool_name=call.tool_name,
            tool_args=call.tool_args,
            agent_id=call.agent_id,
            user_id=call.user_id,
            session_id=call.session_id,
            org_id=call.org_id,
            summary=call.summary,
            context={**call.context, "metadata": call.metadata} if call.metadata else call.context,
            rule=rule.name,
            approvers=(
                list(frozen.stages[0].approvers)
                if frozen.stages
                else self.policy.expand_approvers(rule.approvers)
            ),
            approvals_required=rule.approvals_required,
            justification=call.justification,
            submitted_by=principal.name,
            created_at=now,
            expires_at=now + wait,
            on_timeout=rule.on_timeout,
            reason=decision.reason,
            args_hash=args_hash,
            # the rule's offers, with the words of a condition that failed on this call
            options=frozen.to_options(),
            nudge_at=rule.offers.next_nudge(now, reminded=False, escalated=False),
            policy_revision=self.policy.revision,
        )

    def _store(
        self,
        req: RequestRow,
        principal: Principal,
        decision: Decision,
        rule: Rule,
        now: datetime,
        routing: Routing,
    ) -> tuple[RequestView | None, bool, RequestView | None]:
        """One transaction: find the request made earlier under the same key, or let a grant
        approve `req` at once, or insert it with its audit and card rows.

        Returns (the earlier request or None, whether a grant covered the call, the new
        request's view when it was inserted).
        """
        with self.changing() as change:
            session = change.session
            if req.idempotency_key:
                found = self._by_key(session, req)
                if found is not None:
                    return found, False, None
            history.record_asked(session, self.policy, req, principal.name, now)
            covering = grants.find(
                session,
                req=req,
                now=now,
                # a tripped agent's calls are asked, every one: no earlier grant covers them
                offered=() if decision.tripped else rule.offers.grant_scopes,
                made_by_requester=partial(
                    approved_own, self.settings, user_id=req.user_id, submitted_by=req.submitted_by
                ),
            )
            # the first grant whose use this call can take lets it through (a counted one's
            # last use may have gone to another call meanwhile)
            if any(machine.allow_by_grant(session, req=req, grant=g, now=now) for g in covering):
                change.events.append(Event("final", req.id))
                return None, True, None
            store.insert_request(session, req)
            audit.record(
                session,
                request_id=req.id,
                kind="created",
                actor=principal.name,
                via="api",
                now=now,
                detail=audit.created_detail(
                    rule.name, decision.trail, req.justification, self.policy.revision
                )
                | routed_detail(routing),
                first=True,
            )
            targets = destinations.of_request(self.configured_channels, rule.channels, routing)
            outbox.enqueue_posts(session, req.id, targets, now)
            change.events.append(Event("created", req.id))
            view = self._created_view(req)
            change.shows(view)
            return None, False, view

    def _by_key(self, session: Session, req: RequestRow) -> RequestView | None:
        """The request made earlier by the same principal under `req`'s idempotency key;
        409 if it was for a different call, or approved and its call reported run (spent).

        Keys belong to the principal that sent them: another token's request under the same
        key is never found (nor its approval handed out)."""
        key = req.idempotency_key
        earlier = reads.by_key(session, key, req.submitted_by)
        if earlier is None:
            return None
        if any(getattr(earlier, name) != getattr(req, name) for name in _SAME_CALL):
            raise KeyReused(
                f"idempotency key {key!r} was already used for a different call (other "
                "tool, arguments, agent, user or session); an approval never carries over "
                "to another call"
            )
        if earlier.status == RequestStatus.approved and earlier.outcome in SPENT:
            raise ApprovalSpent(
                f"idempotency key {key!r} belongs to request {earlier.id}, whose approved "
                f"call was already reported {earlier.outcome}: one approval runs a call "
                "once. Ask again under a new key if the call should run again."
            )
        return self._view(session, earlier)

    # -- cancel / expire --------------------------------------------------------------------

    def cancel(self, request_id: str, principal: Principal, why: str | None) -> RequestView:
        """The agent withdraws its request."""
        principal.require("agent", "admin")
        self.get(request_id, principal)
        via = "agent" if principal.role == "agent" else "api"
        outcome = self.withdraw(request_id, actor=principal.name, via=via, why=why)
        return raise_for(Result(outcome, self.view(request_id)))

    def withdraw(
        self, request_id: str, *, actor: str, via: str, why: str | None
    ) -> outcomes.Outcome:
        """Cancel one pending request in its own transaction and wake whoever waits on it."""
        with self.changing() as change:
            outcome = machine.cancel(
                change.session,
                request_id=request_id,
                actor=actor,
                via=via,
                why=why,
                now=self.clock(),
            )
            change.record(outcome)
        return outcome

    def expire_due(self, now: datetime | None = None, limit: int = 500) -> int:
        """Expire each pending request and end each grant whose time is up. Safe on N replicas."""
        now = now or self.clock()
        # It runs every second on every replica, mostly to find nothing: one statement on a
        # connection (no ORM session) finds both kinds of due work.
        with self.db.read_conn() as conn:
            found = reads.due_work(conn, now, limit)
        done = 0
        for request_id in (work_id for kind, work_id in found if kind == reads.REQUEST):
            with self.changing() as change:
                outcome = machine.expire(change.session, request_id=request_id, now=now)
                change.record(outcome)
            done += isinstance(outcome, outcomes.Changed)
        ended = [work_id for kind, work_id in found if kind == reads.GRANT]
        if ended:
            with self.db.write() as session:
                for grant_id in ended:
                    machine.end_grant(
                        session, grant_id=grant_id, to=GrantStatus.expired, actor=None, now=now
                    )
        return done

    @contextmanager
    def changing(self) -> Iterator[Change]:
        """One write transaction whose recorded changes are announced once it commits."""
        pump = self.pump if self.pump is not None and self.pump.accepting() else None
        with self.db.write() as session:
            change = Change(session)
            if not self.db.sqlite:  # its trailing writes go as one statement (gate.store.batch)
                batch.begin(session)
            if pump is not None:
                outbox.hand_to_pump(session, self.clock() + outbox.LEASE)
            yield change
            for event in change.events:
                self.notifier.stage(session, event)
            batch.send(session, last=True)
        for event in change.events:
            self.notifier.publish(event)
        handed = outbox.handed(session)
        if pump is not None and handed:
            pump.hand_over([(claim, change.shown.get(claim.request_id)) for claim in handed])
        elif outbox.owes_cards(session):  # no pump run for a change no card shows
            self.kick_outbox()
        if webhooks.owes_messages(session):  # sent now, not at the pump's next tick
            self.kick_webhooks()
        requestlog.decided(*change.decided)
        for after in change.after_commit:
            after()
        if tracing.tracer is not None and change.decided:
            spans.decided(change.decided, change.shown)
        for request_id in change.finished:
            self.on_final(request_id)
