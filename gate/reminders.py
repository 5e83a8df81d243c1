"""Reminders and escalation: a request still waiting past its rule's `remind_after` reminds
its approvers; past `escalate_after` it adds the rule's escalation approvers and channels.

Each happens once per request (a compare-and-set on its marker column), so every replica may
run the job (`gate.jobs`).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import col

from gate import audit, outbox
from gate.models import ConfirmationRequest, RequestStatus
from gate.offers import Offers
from gate.rows import REQUEST
from gate.service import GateService

log = logging.getLogger(__name__)


#: pending requests not yet reminded or not yet escalated, with what deciding either needs
_WAITING = sa.select(
    REQUEST.c.id,
    REQUEST.c.created_at,
    REQUEST.c.options,
    REQUEST.c.approvers,
    REQUEST.c.reminded_at,
    REQUEST.c.escalated_at,
).where(
    REQUEST.c.status == RequestStatus.pending.value,
    sa.or_(REQUEST.c.reminded_at.is_(None), REQUEST.c.escalated_at.is_(None)),
)


def remind_and_escalate(service: GateService, now: datetime) -> tuple[int, int]:
    """Remind approvers of requests waiting past `remind_after`; escalate past `escalate_after`.

    Each happens once per request: the marker columns are set with a compare-and-set, so
    every replica may run this job.
    """
    reminded = escalated = 0
    with service.db.read_conn() as conn:  # only the columns this needs: no ORM objects
        rows = conn.execute(_WAITING).all()
    for req in rows:
        offers = Offers.from_options(req.options)
        remind = offers.remind_after
        if remind and req.reminded_at is None and now >= req.created_at + remind:
            reminded += _mark(service, req, "reminded_at", now, escalate=False)
        escalate = offers.escalate_after
        if escalate and req.escalated_at is None and now >= req.created_at + escalate:
            escalated += _mark(service, req, "escalated_at", now, escalate=True)
    return reminded, escalated


def _mark(service: GateService, req: Any, column: str, now: datetime, *, escalate: bool) -> int:
    with service.changing() as change:
        session = change.session
        result = session.execute(
            sa.update(ConfirmationRequest)
            .where(
                col(ConfirmationRequest.id) == req.id,
                col(ConfirmationRequest.status) == RequestStatus.pending,
                getattr(ConfirmationRequest, column).is_(None),
            )
            .values({column: now})
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            return 0
        detail: dict[str, object] = {}
        if escalate:
            offers = Offers.from_options(req.options)
            extra = service.policy.expand_approvers(list(offers.escalate_approvers))
            approvers = list(dict.fromkeys([*req.approvers, *extra])) if req.approvers else []
            session.execute(
                sa.update(ConfirmationRequest)
                .where(col(ConfirmationRequest.id) == req.id)
                .values(approvers=approvers)
            )
            pairs = [t.partition(":") for t in offers.escalate_to]
            targets = [(c, t) for c, _, t in pairs if c in service.configured_channels]
            outbox.enqueue_posts(session, req.id, targets, now)
            detail = {"approvers": extra, "channels": [f"{c}:{t}" for c, t in targets]}
        outbox.enqueue_updates(session, req.id, now)
        audit.record(
            session,
            request_id=req.id,
            kind="escalated" if escalate else "reminded",
            actor=None,
            via=None,
            now=now,
            detail=detail,
        )
        change.touched(req.id)
    log.info("request %s %s", req.id, "escalated" if escalate else "reminder sent")
    return 1
