"""Use cases: submit, decide, cancel, expire, wait. Each owns its transaction.

Everything here is synchronous (it runs in a worker thread) except `wait`, which holds
no thread and no database connection while it sleeps on the notifier.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import anyio
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from gate import grants, machine, offers, outbox
from gate.auth import Principal
from gate.binding import call_hash
from gate.config import ApproverSettings, Settings
from gate.db import Database
from gate.errors import AlreadyDecided, Conflict, Forbidden, InvalidInput, NotFound
from gate.models import (
    AuditEvent,
    ConfirmationRequest,
    Delivery,
    GrantStatus,
    RequestStatus,
    Verdict,
    Vote,
    utcnow,
)
from gate.notify import Event, Notifier
from gate.policy import CallFacts, Decision, Policy, may_decide
from gate.schemas import GateCall
from gate.views import RequestView, build_view

log = logging.getLogger(__name__)

#: a waiter re-reads the database this often even without a wake-up, as a safety net for
#: notifications lost while a listener reconnects; jittered so 10k waiters do not align
RECHECK_SECONDS = 10.0


@dataclass(frozen=True)
class Submitted:
    """Policy's decision for a call and, for `ask`, the request (new or found again)."""

    decision: Decision
    view: RequestView | None
    created: bool


@dataclass(frozen=True)
class DecisionResult:
    """What a decision attempt did, for any surface to report."""

    outcome: machine.Outcome | None
    view: RequestView | None
    refused: str | None = None

    @property
    def changed(self) -> bool:
        return isinstance(self.outcome, machine.Changed | machine.Voted)

    def message(self) -> str:
        """One sentence for the person who clicked."""
        out = self.outcome
        if self.refused:
            return f"Not recorded: {self.refused}."
        if isinstance(out, machine.Missing) or self.view is None:
            return "This request no longer exists."
        if isinstance(out, machine.AlreadyFinal):
            return already_final_message(out)
        if isinstance(out, machine.AlreadyVoted):
            return f"You already voted to {out.verdict.value} this request."
        if isinstance(out, machine.Voted):
            return f"Your approval is recorded ({out.approvals} of {out.required})."
        return self.view.outcome_sentence() + "."


def already_final_message(out: machine.AlreadyFinal) -> str:
    """ "Already approved by alice at 2026-11-21 10:00 UTC"."""
    by = f" by {out.decided_by}" if out.decided_by else ""
    at = f" at {out.decided_at:%Y-%m-%d %H:%M:%S} UTC" if out.decided_at else ""
    return f"Already {out.status.value}{by}{at}."


class GateService:
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
        self.configured_channels: dict[str, Any] = {}
        #: called after commit with the id of each request this process finished (metrics)
        self.on_final: Callable[[str], None] = lambda request_id: None

    # -- submit -----------------------------------------------------------------------------

    def submit(self, call: GateCall, principal: Principal) -> Submitted:
        """Apply policy; for `ask`, create the request (or find it again by idempotency key)."""
        facts = CallFacts(
            call.tool_name, call.tool_args, call.agent_id, call.user_id, call.metadata
        )
        decision = self.policy.evaluate(facts)
        if decision.action != "ask":
            return Submitted(decision, None, False)
        args_hash = call_hash(call.tool_name, call.tool_args, call.idempotency_key)
        if call.idempotency_key:
            found = self._by_key(call.idempotency_key, args_hash, principal.name)
            if found is not None:
                return Submitted(decision, found, False)
        rule = decision.rule
        assert rule is not None
        now = self.clock()
        req = ConfirmationRequest(
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
            approvers=self.policy.expand_approvers(rule.approvers),
            approvals_required=rule.approvals_required,
            submitted_by=principal.name,
            created_at=now,
            # The caller's own deadline (expires_in) may shorten the wait, never lengthen it;
            # not for on_timeout = "approve", where an early expiry would be an early yes.
            expires_at=now
            + (
                rule.timeout
                if call.expires_in is None or rule.on_timeout == "approve"
                else min(rule.timeout, timedelta(seconds=call.expires_in))
            ),
            on_timeout=rule.on_timeout,
            reason=decision.reason,
            args_hash=args_hash,
            options=rule.options,
        )
        try:
            with self.db.write() as session:
                grant = grants.find(session, req=req, now=now)
                if grant is not None:
                    machine.allow_by_grant(session, req=req, grant=grant, now=now)
                    self.notifier.stage(session, Event("final", req.id))
                    granted = True
                else:
                    granted = False
                    session.add(req)
                    session.flush()
                    machine.audit(
                        session,
                        request_id=req.id,
                        kind="created",
                        actor=principal.name,
                        via="api",
                        now=now,
                        detail={"rule": rule.name, "trail": list(decision.trail)},
                    )
                    outbox.enqueue_posts(session, req.id, self._targets(rule.channels), now)
                    self.notifier.stage(session, Event("created", req.id))
        except IntegrityError:
            # Two submits with the same idempotency key raced; the other one won.
            found = self._by_key(call.idempotency_key or "", args_hash, principal.name)
            if found is None:
                raise
            return Submitted(decision, found, False)
        if granted:
            view = self.view(req.id)  # the grant changed the row in SQL: read it back
            self.notifier.publish(Event("final", req.id))
            assert view is not None and view.reason is not None
            allowed = Decision("allow", rule, view.reason, (*decision.trail, "granted"))
            return Submitted(allowed, view, True)
        # A new request has no votes yet: the row just inserted is its view, no read-back.
        view = build_view(req, [], public_url=self.settings.server.base_url)
        self.notifier.publish(Event("created", req.id))
        self.kick_outbox()
        return Submitted(decision, view, True)

    def _targets(self, rule_channels: tuple[str, ...] | None) -> list[tuple[str, str]]:
        """(channel, target) pairs for a rule: its own list, or every channel's default."""
        if rule_channels is not None:
            pairs = [tuple(entry.split(":", 1)) for entry in rule_channels]
            return [(c, t) for c, t in pairs if c in self.configured_channels]
        targets = []
        for name, channel_settings in self.configured_channels.items():
            default = getattr(channel_settings, "default_target", None)
            if default is None and isinstance(channel_settings, dict):
                default = channel_settings.get("default_target")
            if default is None and name == "log":
                default = "log"
            if default:
                targets.append((name, str(default)))
        return targets

    def _by_key(self, key: str, args_hash: str, submitted_by: str) -> RequestView | None:
        """The request `submitted_by` made earlier under `key`; 409 if for a different call.

        Keys belong to the principal that sent them: another token's request under the same
        key is never found (nor its approval handed out)."""
        with self.db.read() as session:
            req = session.exec(
                select(ConfirmationRequest).where(
                    ConfirmationRequest.idempotency_key == key,
                    ConfirmationRequest.submitted_by == submitted_by,
                )
            ).first()
            if req is None:
                return None
            if req.args_hash and req.args_hash != args_hash:
                raise Conflict(
                    f"idempotency key {key!r} was already used for a different call "
                    "(other tool or arguments); an approval never carries over to other "
                    "arguments",
                    code="idempotency_key_reused",
                )
            return self._view(session, req)

    # -- read -------------------------------------------------------------------------------

    def view(self, request_id: str, *, full: bool = False) -> RequestView | None:
        """The request with its votes (and deliveries and audit trail when `full`)."""
        with self.db.read() as session:
            req = session.get(ConfirmationRequest, request_id)
            return self._view(session, req, full=full) if req else None

    def _view(
        self, session: Session, req: ConfirmationRequest, *, full: bool = False
    ) -> RequestView:
        votes = list(
            session.exec(
                select(Vote).where(Vote.request_id == req.id).order_by(col(Vote.at), col(Vote.id))
            ).all()
        )
        deliveries = audit = None
        if full:
            deliveries = list(
                session.exec(
                    select(Delivery).where(Delivery.request_id == req.id).order_by(col(Delivery.id))
                ).all()
            )
            audit = list(
                session.exec(
                    select(AuditEvent)
                    .where(AuditEvent.request_id == req.id)
                    .order_by(col(AuditEvent.id))
                ).all()
            )
        return build_view(
            req,
            votes,
            public_url=self.settings.server.base_url,
            deliveries=deliveries,
            audit=audit,
        )

    def get(self, request_id: str, principal: Principal, *, full: bool = False) -> RequestView:
        """A request the caller may see; 404 when unknown, 403 when another agent's."""
        view = self.view(request_id, full=full)
        if view is None:
            raise NotFound(f"no request with id {request_id!r}", code="request_not_found")
        self._check_readable(view, principal)
        return view

    def _check_readable(self, view: RequestView, principal: Principal) -> None:
        if principal.role == "agent" and view.submitted_by != principal.name:
            raise Forbidden("this request was submitted by another agent", code="not_your_request")

    def list(
        self,
        principal: Principal,
        *,
        status: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        **filters: str | None,
    ) -> tuple[list[RequestView], str | None]:
        """Newest first; `cursor` is the last id of the previous page."""
        stmt = select(ConfirmationRequest).order_by(col(ConfirmationRequest.id).desc())
        if status:
            stmt = stmt.where(ConfirmationRequest.status == status)
        if cursor:
            stmt = stmt.where(col(ConfirmationRequest.id) < cursor)
        if principal.role == "agent":
            stmt = stmt.where(ConfirmationRequest.submitted_by == principal.name)
        for field in (
            "tool_name",
            "agent_id",
            "user_id",
            "session_id",
            "rule",
            "decided_by",
            "idempotency_key",
        ):
            value = filters.get(field)
            if value:
                stmt = stmt.where(getattr(ConfirmationRequest, field) == value)
        with self.db.read() as session:
            rows = list(session.exec(stmt.limit(limit + 1)).all())
            more = len(rows) > limit
            rows = rows[:limit]
            views = [self._view(session, r) for r in rows]
        return views, (rows[-1].id if more and rows else None)

    # -- decide -----------------------------------------------------------------------------

    def decide(
        self,
        request_id: str,
        *,
        actor: str,
        approver: ApproverSettings | None,
        verdict: Verdict,
        comment: str | None,
        via: str,
        bypass_approver_list: bool = False,
        actor_token: str | None = None,
        edited_args: dict[str, Any] | None = None,
        reasons: Sequence[str] | None = None,
        grant: tuple[str, str] | None = None,
    ) -> DecisionResult:
        """Record `actor`'s verdict, if they may decide this request.

        `actor_token` is the API token they act with, if any (never the one that asked).
        `edited_args` approves with changed arguments, `reasons` are the rule's preset
        reject reasons, and `grant` is a (scope, duration) pair to attach to an approval;
        each is checked against what the rule offers (InvalidInput when it does not).
        """
        view = self.view(request_id)
        if view is None:
            return DecisionResult(machine.Missing(request_id), None)
        if view.is_final:
            return DecisionResult(already_final(view), view)
        refused = may_decide(
            self.settings,
            view,
            approver,
            actor_name=actor,
            actor_token=actor_token,
            bypass_approver_list=bypass_approver_list,
        )
        if refused:
            return DecisionResult(None, view, refused)
        comment = offers.with_reasons(view, verdict, comment, list(reasons or ()))
        spec = None
        if grant is not None:
            if verdict != Verdict.approve:
                raise InvalidInput("only an approval can carry a grant", code="invalid_input")
            spec = grants.validate(view, *grant)
        if edited_args is not None:
            offers.check_edits(view, verdict, edited_args)
        now = self.clock()
        with self.db.write() as session:
            outcome = machine.record_vote(
                session,
                request_id=request_id,
                approver=actor,
                verdict=verdict,
                comment=comment,
                via=via,
                now=now,
                edited_args=edited_args,
                grant=(spec.scope, int(spec.duration.total_seconds())) if spec else None,
            )
            if (
                isinstance(outcome, machine.Changed)
                and outcome.status == RequestStatus.approved
                and view.options.get("grant_scopes")
            ):
                # every approving vote must have chosen a grant (a quorum's, not one voter's)
                agreed = grants.agreed(grants.chosen(session, request_id))
                req = session.get(ConfirmationRequest, request_id)
                if agreed is not None and req is not None:
                    grants.create(session, req, agreed, by=actor, now=now)
            if isinstance(outcome, machine.Changed | machine.Voted):
                kind = "final" if isinstance(outcome, machine.Changed) else "changed"
                self.notifier.stage(session, Event(kind, request_id))
        self._after_change(outcome)
        return DecisionResult(outcome, self.view(request_id))

    def decide_as(
        self,
        request_id: str,
        principal: Principal,
        verdict: Verdict,
        comment: str | None,
        via: str = "api",
        **extras: Any,
    ) -> RequestView:
        """API decision: raise the documented error for every refusal.

        `extras` are `decide`'s edited_args, reasons and grant.
        """
        principal.require("approver", "admin")
        self.get(request_id, principal)
        result = self.decide(
            request_id,
            actor=principal.actor_name,
            approver=principal.approver,
            verdict=verdict,
            comment=comment,
            via=via,
            bypass_approver_list=principal.role == "admin",
            actor_token=None if principal.anonymous else principal.name,
            **extras,
        )
        raise_for(result)
        assert result.view is not None
        return result.view

    def decide_from_channel(
        self,
        *,
        request_id: str,
        channel: str,
        user_id: str,
        verdict: str,
        comment: str | None,
        edited_args: dict[str, Any] | None = None,
        reasons: Sequence[str] | None = None,
        grant: tuple[str, str] | None = None,
    ) -> DecisionResult:
        """A click in a chat card: the platform user must be a configured approver.

        `edited_args`, `reasons` and `grant` are `decide`'s (InvalidInput when refused).
        """
        approver = self.settings.approver_by_identity(channel, user_id)
        if approver is None:
            view = self.view(request_id)
            if view is None:
                return DecisionResult(machine.Missing(request_id), None)
            if view.is_final:
                return DecisionResult(already_final(view), view)
            return DecisionResult(None, view, "you are not an approver for this rule")
        return self.decide(
            request_id,
            actor=approver.name,
            approver=approver,
            verdict=Verdict(verdict),
            comment=comment,
            via=channel,
            edited_args=edited_args,
            reasons=reasons,
            grant=grant,
        )

    # -- cancel / expire --------------------------------------------------------------------

    def cancel(self, request_id: str, principal: Principal, why: str | None) -> RequestView:
        """The agent withdraws its request."""
        principal.require("agent", "admin")
        self.get(request_id, principal)
        via = "agent" if principal.role == "agent" else "api"
        outcome = self.withdraw(request_id, actor=principal.name, via=via, why=why)
        result = DecisionResult(outcome, self.view(request_id))
        raise_for(result)
        assert result.view is not None
        return result.view

    def withdraw(
        self, request_id: str, *, actor: str, via: str, why: str | None
    ) -> machine.Outcome:
        """Cancel one pending request in its own transaction and wake whoever waits on it."""
        with self.db.write() as session:
            outcome = machine.cancel(
                session, request_id=request_id, actor=actor, via=via, why=why, now=self.clock()
            )
            if isinstance(outcome, machine.Changed):
                self.notifier.stage(session, Event("final", request_id))
        self._after_change(outcome)
        return outcome

    def expire_due(self, now: datetime | None = None, limit: int = 500) -> int:
        """Apply the deadline of every pending request whose time is up. Safe on N replicas."""
        now = now or self.clock()
        with self.db.read() as session:
            due = list(
                session.exec(
                    select(ConfirmationRequest.id)
                    .where(
                        ConfirmationRequest.status == RequestStatus.pending,
                        col(ConfirmationRequest.expires_at) <= now,
                    )
                    .order_by(col(ConfirmationRequest.expires_at))
                    .limit(limit)
                ).all()
            )
        done = 0
        for request_id in due:
            with self.db.write() as session:
                outcome = machine.expire(session, request_id=request_id, now=now)
                if isinstance(outcome, machine.Changed):
                    self.notifier.stage(session, Event("final", request_id))
            if isinstance(outcome, machine.Changed):
                done += 1
                self._after_change(outcome)
        with self.db.read() as session:
            ended = grants.due(session, now)
        if ended:
            with self.db.write() as session:
                for grant_id in ended:
                    machine.end_grant(
                        session, grant_id=grant_id, to=GrantStatus.expired, actor=None, now=now
                    )
        return done

    def _after_change(self, outcome: machine.Outcome) -> None:
        if isinstance(outcome, machine.Changed):
            self.notifier.publish(Event("final", outcome.request_id))
            self.kick_outbox()
            self.on_final(outcome.request_id)
        elif isinstance(outcome, machine.Voted):
            self.notifier.publish(Event("changed", outcome.request_id))
            self.kick_outbox()

    # -- wait -------------------------------------------------------------------------------

    async def wait(self, request_id: str, principal: Principal, timeout: float) -> RequestView:
        """Return as soon as the request is final, or the still-pending request at `timeout`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        notifier = self.notifier

        async def read() -> RequestView:
            # Waiters of one request that arrive or wake together share one database read;
            # `seq` makes sure none gets a read begun before the change that concerns it.
            view = await notifier.shared_read(
                request_id, notifier.seq, lambda: anyio.to_thread.run_sync(self.view, request_id)
            )
            if view is None:
                raise NotFound(f"no request with id {request_id!r}", code="request_not_found")
            return view

        with notifier.watch(request_id) as watch:
            # Registered before the first read, so a decision landing in between still wakes us.
            view = await read()
            self._check_readable(view, principal)
            while not view.is_final:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                await watch.wait(min(remaining, RECHECK_SECONDS * random.uniform(0.8, 1.2)))
                view = await read()
        return view

    # -- stats for health and metrics --------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Requests by status."""
        with self.db.read() as session:
            rows = session.execute(
                sa.select(col(ConfirmationRequest.status), sa.func.count()).group_by(
                    ConfirmationRequest.status
                )
            ).all()
        return {str(status): int(n) for status, n in rows}


def already_final(view: RequestView) -> machine.AlreadyFinal:
    """The "already decided" outcome for a request that is no longer pending."""
    return machine.AlreadyFinal(
        view.id, RequestStatus(view.status), view.decided_by, view.decided_at, view.decided_via
    )


def raise_for(result: DecisionResult) -> None:
    """Turn a refused or no-op decision into the API's error."""
    out = result.outcome
    if result.refused:
        code = "self_approval" if "yourself" in result.refused else "not_an_approver"
        raise Forbidden(result.refused[0].upper() + result.refused[1:], code=code)
    if isinstance(out, machine.Missing):
        raise NotFound(f"no request with id {out.request_id!r}", code="request_not_found")
    if isinstance(out, machine.AlreadyFinal):
        raise AlreadyDecided(
            already_final_message(out),
            status=out.status.value,
            decided_by=out.decided_by,
            decided_at=out.decided_at.isoformat() if out.decided_at else None,
            decided_via=out.decided_via,
        )
    if isinstance(out, machine.AlreadyVoted):
        raise Conflict(
            f"{out.approver} already voted to {out.verdict.value} this request",
            code="already_voted",
        )
