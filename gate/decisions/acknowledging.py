"""Acknowledging: an approver says "I'm on it" without deciding.

PagerDuty's and Opsgenie's acknowledge, for a request: the request stays pending and keeps
its deadline, but reminders and escalation stop (`gate.delivery.reminders` skips it), every
card and page says who is on it, and the audit trail records it. Only someone who may decide
the request may acknowledge it: the decision pipeline's one check, `acting.refusal_for`,
answers that for every surface. One write transaction; the first acknowledgement wins (a
compare-and-set, `gate.store.nudges.acknowledge`), a second one is told who was first.

In a chain (`gate.policy.stages`) an acknowledgement belongs to the stage it was made in:
the next stage's approvers are reminded on their own clock (`machine._advance` clears it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gate.decisions import audit, outcomes
from gate.decisions.acting import Actor, Result, refusal_for, settled
from gate.decisions.outcomes import Acknowledged
from gate.store import nudges, outbox

if TYPE_CHECKING:
    from gate.decisions.service import GateService

#: the audit event's kind
ACKNOWLEDGED = "acknowledged"


def acknowledge(service: GateService, request_id: str, actor: Actor) -> Result:
    """Record that `actor` is on the pending request, if they may decide it."""
    view = service.view(request_id)
    done = settled(view, request_id)
    if done is not None or view is None:
        return done or Result(outcomes.Missing(request_id), None)
    refusal = refusal_for(service.settings, view, actor)
    if refusal is not None:
        return Result(None, view, refusal)
    if view.acknowledged_by is not None and view.acknowledged_at is not None:
        earlier = Acknowledged(request_id, view.acknowledged_by, view.acknowledged_at, True)
        return Result(earlier, view)
    now = service.clock()
    with service.changing() as change:
        won = nudges.acknowledge(change.session, request_id, actor.name, now)
        if won:
            audit.record(
                change.session,
                request_id=request_id,
                kind=ACKNOWLEDGED,
                actor=actor.name,
                via=actor.via,
                now=now,
                detail={"stage": view.stage} if view.offers.stages else {},
            )
            outbox.enqueue_updates(change.session, request_id, now)  # every card says so
            change.touched(request_id)
    after = service.view(request_id)
    if won:
        return Result(Acknowledged(request_id, actor.name, now), after)
    # someone acknowledged or decided it between the read and the write
    done = settled(after, request_id)
    if done is not None or after is None:
        return done or Result(outcomes.Missing(request_id), None)
    by, at = after.acknowledged_by or "someone", after.acknowledged_at or now
    return Result(Acknowledged(request_id, by, at, True), after)
