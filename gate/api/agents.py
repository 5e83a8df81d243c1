"""`/v1/agents`: the agents whose rejections tripped them (`gate.decisions.denials`), and their
reset.

`gate agents list` and `gate agents reset NAME` call these; the console's Agents page does
the same through the same use case (`denials.reset`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from gate.api import v1
from gate.api.deps import PrincipalDep, ServiceDep
from gate.api.schemas import AgentResetBody
from gate.base import threads
from gate.base.errors import NotFound
from gate.decisions import denials
from gate.decisions.denials import active_trips
from gate.store.records import TripRow

router = APIRouter(prefix="/v1/agents", tags=["v1"])

ERRORS: dict[int | str, dict[str, Any]] = {
    **v1.ERRORS,
    403: {"description": "Not an approver or admin token"},
    404: {"description": "The agent is not tripped"},
}


class TripPublic(BaseModel):
    """An agent's trip: while `reset_at` is null every call of the agent is asked."""

    agent: str
    reason: str
    request_id: str | None
    tripped_at: datetime
    reset_at: datetime | None = None
    reset_by: str | None = None

    @classmethod
    def of(cls, row: TripRow) -> TripPublic:
        """The API's shape of a stored trip."""
        return cls(
            agent=row.agent,
            reason=row.reason,
            request_id=row.request_id,
            tripped_at=row.tripped_at,
            reset_at=row.reset_at,
            reset_by=row.reset_by,
        )


@router.get("/tripped", response_model=list[TripPublic], responses=ERRORS)
async def tripped(principal: PrincipalDep, service: ServiceDep) -> list[TripPublic]:
    """The agents tripped right now, oldest trip first."""
    principal.require("approver", "admin")
    rows = await threads.run_sync(active_trips, service.db)  # the database's, not a copy
    return [TripPublic.of(row) for row in rows]


@router.post("/reset", response_model=TripPublic, responses=ERRORS)
async def reset(body: AgentResetBody, principal: PrincipalDep, service: ServiceDep) -> TripPublic:
    """Reset a tripped agent: its calls are decided by policy again (audited and logged)."""
    principal.require("approver", "admin")
    ended = await threads.run_sync(
        lambda: denials.reset(service, body.agent, by=principal.actor_name, via="api")
    )
    if ended is None:
        raise NotFound(f"agent {body.agent!r} is not tripped", code="agent_not_tripped")
    return TripPublic.of(ended)
