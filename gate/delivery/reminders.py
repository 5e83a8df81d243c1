"""Reminders and escalation: a request still waiting past its rule's `remind_after` reminds
its approvers; past `escalate_after` it adds the rule's escalation approvers and channels.

Each happens once per request (a compare-and-set on its marker column), so every replica may
run the job (`gate.delivery.jobs`).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from gate.decisions import audit
from gate.decisions.service import GateService
from gate.policy.offers import Offers
from gate.store import nudges, outbox

log = logging.getLogger(__name__)


def remind_and_escalate(service: GateService, now: datetime) -> tuple[int, int]:
    """Remind approvers of requests waiting past `remind_after`; escalate past `escalate_after`.

    Each happens once per request: the marker columns are set with a compare-and-set, so
    every replica may run this job.
    """
    counts = {"reminded_at": 0, "escalated_at": 0}
    with service.db.read_conn() as conn:  # only the columns this needs: no ORM objects
        rows = nudges.due(conn, now)
    for req in rows:
        offers = Offers.from_options(req.options)
        done = {
            "reminded_at": req.reminded_at is not None,
            "escalated_at": req.escalated_at is not None,
        }
        tried = False
        began = req.stage_at or req.created_at  # each stage of a chain has its own clock
        for column, after in (
            ("reminded_at", offers.remind_after),
            ("escalated_at", offers.escalate_after_in(req.stage)),
        ):
            if after is None or done[column] or now < began + after:
                continue
            tried = done[column] = True
            counts[column] += _mark(service, req, column, now, _next(offers, req, done))
        if not tried:  # due by an older row's guess (see migration 0005): store the real time
            _renudge(service, req.id, _next(offers, req, done))
    return counts["reminded_at"], counts["escalated_at"]


def _next(offers: Offers, req: Any, done: dict[str, bool]) -> datetime | None:
    """The request's next nudge once the markers in `done` are set."""
    return offers.next_nudge(
        req.stage_at or req.created_at,
        reminded=done["reminded_at"],
        escalated=done["escalated_at"],
        stage=req.stage,
    )


def _renudge(service: GateService, request_id: str, when: datetime | None) -> None:
    with service.db.write_conn() as conn:
        nudges.set_next(conn, request_id, when)


def _mark(service: GateService, req: Any, column: str, now: datetime, then: datetime | None) -> int:
    """Set `column` (and the next nudge, `then`) if nobody did yet; remind or escalate."""
    escalate = column == "escalated_at"
    with service.changing() as change:
        session = change.session
        if not nudges.mark(session, req.id, column, now, then, stage=req.stage):
            return 0
        detail: dict[str, object] = {}
        if escalate:
            offers = Offers.from_options(req.options)
            extra = service.policy.expand_approvers(list(offers.escalate_approvers_in(req.stage)))
            approvers = list(dict.fromkeys([*req.approvers, *extra])) if req.approvers else []
            nudges.set_approvers(session, req.id, approvers)
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
