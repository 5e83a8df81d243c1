"""The v1 JSON API: what hooks, SDKs, approver tools and operators call."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query

from gate.api.deps import PrincipalDep, ServiceDep
from gate.models import RequestStatus, Verdict
from gate.schemas import (
    CancelBody,
    DecisionBody,
    GateAnswer,
    GateCall,
    RequestPage,
    RequestPublic,
)

router = APIRouter(prefix="/v1", tags=["v1"])

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "Malformed JSON or a bad value"},
    401: {"description": "Missing or unknown token"},
    403: {"description": "Wrong role, not an approver for this rule, or self-approval"},
    404: {"description": "Unknown request id"},
    413: {"description": "Body too large"},
    422: {"description": "Body does not match the schema"},
}


@router.post("/gate", response_model=GateAnswer, responses=ERRORS)
def gate_call(call: GateCall, principal: PrincipalDep, service: ServiceDep) -> GateAnswer:
    """Ask whether a tool call may run: allow, deny, or ask (a request a human decides)."""
    principal.require("agent", "admin")
    submitted = service.submit(call, principal)
    decision = submitted.decision
    if decision.action is None:
        return GateAnswer(decision="allow", rule=None, reason=decision.reason)
    request = RequestPublic.of(submitted.view) if submitted.view else None
    rule = decision.rule.name if decision.rule else None
    return GateAnswer(decision=decision.action, rule=rule, reason=decision.reason, request=request)


@router.get("/requests", response_model=RequestPage, responses=ERRORS)
def list_requests(
    principal: PrincipalDep,
    service: ServiceDep,
    status: Annotated[RequestStatus | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=26)] = None,
    tool_name: Annotated[str | None, Query(max_length=200)] = None,
    agent_id: Annotated[str | None, Query(max_length=200)] = None,
    session_id: Annotated[str | None, Query(max_length=200)] = None,
) -> RequestPage:
    """Requests, newest first, one page at a time (`next_cursor` fetches the next)."""
    views, next_cursor = service.list(
        principal,
        status=status.value if status else None,
        limit=limit,
        cursor=cursor,
        tool_name=tool_name,
        agent_id=agent_id,
        session_id=session_id,
    )
    return RequestPage(items=[RequestPublic.of(v) for v in views], next_cursor=next_cursor)


@router.get("/requests/{request_id}", response_model=RequestPublic, responses=ERRORS)
def get_request(request_id: str, principal: PrincipalDep, service: ServiceDep) -> RequestPublic:
    """One request."""
    return RequestPublic.of(service.get(request_id, principal))


@router.get("/requests/{request_id}/wait", response_model=RequestPublic, responses=ERRORS)
async def wait_request(
    request_id: str,
    principal: PrincipalDep,
    service: ServiceDep,
    timeout: Annotated[float, Query(ge=0, le=3600)] = 25.0,
) -> RequestPublic:
    """Long-poll: the request as soon as it is final, or still pending when `timeout` passes."""
    cap = service.settings.server.max_wait_seconds
    view = await service.wait(request_id, principal, min(timeout, cap))
    return RequestPublic.of(view)


@router.post(
    "/requests/{request_id}/decision",
    response_model=RequestPublic,
    responses={**ERRORS, 409: {"description": "Already decided (says by whom, when)"}},
)
def decide(
    request_id: str, body: DecisionBody, principal: PrincipalDep, service: ServiceDep
) -> RequestPublic:
    """Approve or reject, as the approver the token belongs to."""
    view = service.decide_as(request_id, principal, Verdict(body.verdict), body.comment)
    return RequestPublic.of(view)


@router.post(
    "/requests/{request_id}/cancel",
    response_model=RequestPublic,
    responses={**ERRORS, 409: {"description": "Already finished"}},
)
def cancel(
    request_id: str,
    principal: PrincipalDep,
    service: ServiceDep,
    body: Annotated[CancelBody | None, Body()] = None,
) -> RequestPublic:
    """Withdraw a pending request (the agent no longer needs the call)."""
    return RequestPublic.of(service.cancel(request_id, principal, body.reason if body else None))
