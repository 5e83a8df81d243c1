"""The v1 JSON API: what hooks, SDKs, approver tools and operators call."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response
from pydantic import BaseModel

from gate.api import waiting
from gate.api.deps import PrincipalDep, ServiceDep
from gate.api.schemas import AuditPublic, GateAnswer, GrantPublic, RequestPage, RequestPublic
from gate.base import threads
from gate.base.statuses import RequestStatus, Verdict
from gate.decisions import acknowledging, acting, deciding, grant_review, grants, history, reports
from gate.decisions.service import GateService, Submitted
from gate.identity.auth import Principal
from gate.inputs.bodies import CancelBody, DecisionBody, ExtendBody, GateCall, OutcomeBody

router = APIRouter(prefix="/v1", tags=["v1"])

#: the long-poll's `timeout` query: seconds, capped again by `server.max_wait_seconds`
WAIT_TIMEOUT_DEFAULT = 25.0
WAIT_TIMEOUT_MAX = 3600

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "Malformed JSON or a bad value"},
    401: {"description": "Missing or unknown token"},
    403: {"description": "Wrong role, not an approver for this rule, or self-approval"},
    404: {"description": "Unknown request id"},
    413: {"description": "Body too large"},
    422: {"description": "Body does not match the schema"},
}


def encoded(answer: BaseModel) -> bytes:
    """`answer` as the JSON body, encoded once.

    The routes that run on every tool call and every decision return their answer already
    encoded: FastAPI would otherwise validate the model against `response_model` a second
    time and serialise it through `jsonable_encoder`. `response_model` still documents it.
    """
    return answer.model_dump_json().encode()


def json_response(body: bytes) -> Response:
    """An encoded JSON body as the route's response."""
    return Response(body, media_type="application/json")


@router.post("/gate", response_model=GateAnswer, responses=ERRORS)
async def gate_call(call: GateCall, principal: PrincipalDep, service: ServiceDep) -> Response:
    """Ask whether a tool call may run: allow, deny, or ask (a request a human decides).

    Plain JSON posts of this route are answered by `gate.api.lean` ahead of the middleware
    stack, with the same checks and `gate_answer`; this declaration documents it (OpenAPI)
    and answers what the lean path hands over (a body it could not validate, for one).
    """
    return json_response(await gate_answer(service, call, principal))


async def gate_answer(service: GateService, call: GateCall, principal: Principal) -> bytes:
    """What `POST /v1/gate` answers for a validated call from an authenticated caller."""
    principal.require("agent", "admin")
    if history.touches(service.policy, call.tool_name):
        # a rule that counts past calls reads (and an allowed call is written): in a thread
        submitted = await threads.run_sync(service.submit, call, principal)
        service.answered(call, principal, submitted)
        return encoded(_answer(submitted))
    # Policy runs here, on the event loop: it touches no database, and most calls end with
    # it. Only an `ask` goes to a worker thread, for its one write transaction.
    decision = service.judge(call, principal)
    if decision.action != "ask":
        submitted = Submitted(decision, None, False)
    else:
        submitted = await threads.run_sync(service.ask, call, principal, decision)
    service.answered(call, principal, submitted)  # the decision log: buffered, written later
    return encoded(_answer(submitted))


def _answer(submitted: Submitted) -> GateAnswer:
    """What `POST /v1/gate` says about a call."""
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
    idempotency_key: Annotated[str | None, Query(max_length=200)] = None,
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
        idempotency_key=idempotency_key,
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
    timeout: Annotated[float, Query(ge=0, le=WAIT_TIMEOUT_MAX)] = WAIT_TIMEOUT_DEFAULT,
) -> Response:
    """Long-poll: the request as soon as it is final, or still pending when `timeout` passes.

    Plain GETs of this route are answered by `gate.api.lean` ahead of the middleware
    stack, with the same checks; this declaration documents it (OpenAPI) and answers what
    the lean path hands over (an unusual query, a body, HEAD), with the same bytes.
    """
    cap = service.settings.server.max_wait_seconds
    body = await waiting.wait(service, request_id, principal, min(timeout, cap))
    return json_response(body)


@router.post(
    "/requests/{request_id}/decision",
    response_model=RequestPublic,
    responses={**ERRORS, 409: {"description": "Already decided (says by whom, when)"}},
)
def decide(
    request_id: str, body: DecisionBody, principal: PrincipalDep, service: ServiceDep
) -> Response:
    """Approve or reject, as the approver the token belongs to.

    An approval may carry `edited_args` (the call runs with them instead) and a `grant`
    ({"scope": "call"|"pattern"|"session"|"agent", "duration": "30m", "uses": 3, "pin":
    ["branch"]}) when the rule offers one; a
    reject may carry preset `reasons` from the rule.

    Plain JSON posts of this route are answered by `gate.api.lean` ahead of the middleware
    stack, with the same checks and `decision_answer`; this declaration documents it and
    answers what the lean path hands over.
    """
    return json_response(decision_answer(service, request_id, body, principal))


def decision_answer(
    service: GateService, request_id: str, body: DecisionBody, principal: Principal
) -> bytes:
    """What `POST /v1/requests/{id}/decision` answers (blocking: call it in a worker thread)."""
    result = deciding.decide(
        service,
        request_id,
        deciding.for_api(principal),
        Verdict(body.verdict),
        body.comment,
        edited_args=body.edited_args,
        reasons=body.reasons or (),
        grant=grants.GrantAsk(
            body.grant.scope, body.grant.duration, body.grant.uses, tuple(body.grant.pin)
        )
        if body.grant
        else None,
    )
    return encoded(RequestPublic.of(acting.raise_for(result)))


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


@router.post(
    "/requests/{request_id}/extend",
    response_model=RequestPublic,
    responses={**ERRORS, 409: {"description": "Already finished"}},
)
def extend(
    request_id: str, body: ExtendBody, principal: PrincipalDep, service: ServiceDep
) -> RequestPublic:
    """Give a pending request more time (approvers of the request only)."""
    actor = deciding.for_api(principal)
    result = deciding.extend(service, request_id, actor, body.by)
    return RequestPublic.of(acting.raise_for(result))


@router.post(
    "/requests/{request_id}/acknowledge",
    response_model=RequestPublic,
    responses={**ERRORS, 409: {"description": "Already finished"}},
)
def acknowledge(request_id: str, principal: PrincipalDep, service: ServiceDep) -> RequestPublic:
    """Say "I'm on it" without deciding: reminders and escalation stop, every card shows who
    (only someone who may decide the request may; a second acknowledgement changes nothing)."""
    result = acknowledging.acknowledge(service, request_id, deciding.for_api(principal))
    return RequestPublic.of(acting.raise_for(result))


@router.post(
    "/requests/{request_id}/outcome",
    response_model=RequestPublic,
    responses={**ERRORS, 409: {"description": "Not approved, or already recorded"}},
)
def outcome(
    request_id: str, body: OutcomeBody, principal: PrincipalDep, service: ServiceDep
) -> RequestPublic:
    """Record whether the approved call ran, and what came of it."""
    view = reports.record_outcome(service, request_id, principal, body.outcome, body.summary)
    return RequestPublic.of(view)


@router.get("/requests/{request_id}/audit", response_model=list[AuditPublic], responses=ERRORS)
def audit(request_id: str, principal: PrincipalDep, service: ServiceDep) -> list[AuditPublic]:
    """The audit trail with its hash chain (`gate audit verify` checks it)."""
    events = reports.audit_trail(service, request_id, principal)
    return [AuditPublic.model_validate(e) for e in events]


@router.post("/sessions/{session_id}/cancel", responses=ERRORS)
def cancel_session(
    session_id: str,
    principal: PrincipalDep,
    service: ServiceDep,
    body: Annotated[CancelBody | None, Body()] = None,
) -> dict[str, list[str]]:
    """Cancel every pending request of an agent session (the session ended)."""
    ids = reports.cancel_session(service, session_id, principal, body.reason if body else None)
    return {"cancelled": ids}


@router.get("/grants", response_model=list[GrantPublic], responses=ERRORS)
def list_grants(
    principal: PrincipalDep, service: ServiceDep, active: bool = True
) -> list[GrantPublic]:
    """Time-boxed grants (active ones by default)."""
    rows = grant_review.list_grants(service, principal, active)
    return [GrantPublic.model_validate(g) for g in rows]


@router.post(
    "/grants/{grant_id}/revoke",
    response_model=GrantPublic,
    responses={**ERRORS, 409: {"description": "Already ended"}},
)
def revoke_grant(grant_id: str, principal: PrincipalDep, service: ServiceDep) -> GrantPublic:
    """End a grant now; later calls go back to asking a human."""
    return GrantPublic.model_validate(grant_review.revoke_grant(service, grant_id, principal))
