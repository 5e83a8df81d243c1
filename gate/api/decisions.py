"""`GET /v1/decisions`: the decision log, newest first, filtered and paged.

Approvers and admins read it (an agent's token is refused: the log holds every agent's
calls). The arguments are masked as every surface masks them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query

from gate.api.deps import PrincipalDep, ServiceDep
from gate.api.schemas import DecisionPage, DecisionPublic
from gate.api.v1 import ERRORS
from gate.base import threads
from gate.decisions import decision_log

router = APIRouter(prefix="/v1", tags=["v1"])

Text = Annotated[str | None, Query(max_length=200)]


@router.get("/decisions", response_model=DecisionPage, responses=ERRORS)
async def list_decisions(
    principal: PrincipalDep,
    service: ServiceDep,
    agent_id: Text = None,
    tool_name: Text = None,
    rule: Text = None,
    session_id: Text = None,
    answer: Annotated[Literal["allow", "deny", "ask", "granted"] | None, Query()] = None,
    since: Annotated[datetime | None, Query(description="from this time on (ISO 8601)")] = None,
    until: Annotated[datetime | None, Query(description="before this time (ISO 8601)")] = None,
    cursor: Annotated[
        int | None, Query(ge=1, le=2**63 - 1, description="`next_cursor` of the last page")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> DecisionPage:
    """Every answer `POST /v1/gate` gave (allow, deny, ask, granted), newest first.

    Answers are written in batches, once a `[decision_log].flush_seconds` window: the
    newest half second may not be listed yet.
    """
    filters = {"agent_id": agent_id, "tool_name": tool_name, "rule": rule}
    filters |= {"session_id": session_id, "answer": answer}
    rows, next_cursor = await threads.run_sync(
        lambda: decision_log.read_page(
            service.db,
            principal,
            filters=filters,
            since=since,
            until=until,
            cursor=cursor,
            limit=limit,
        )
    )
    items = [DecisionPublic.model_validate(row) for row in rows]
    return DecisionPage(items=items, next_cursor=next_cursor)
