"""What an audit event tells `[[webhooks]]` receivers: which event it is, and its payload.

`audit.append` calls `owe` for every event it writes, in the same transaction, so a message
exists exactly when its change committed. The payload is built here from what gate stored
(the event's kind, actor, channel, time and chain hash), never from the agent's or a
person's free text: the justification, comments, reasons and outcome summaries stay in the
audit trail, where a receiver can read them (labelled) through `GET /v1/requests/{id}/audit`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlmodel import Session

from gate.store import webhooks as outbox

#: audit kind -> the webhook event it is (kinds not here send nothing: votes that do not
#: decide, extensions, reveals, card notes)
EVENT_OF: dict[str, str] = {
    "created": "created",
    "approved": "decided",
    "rejected": "decided",
    "cancelled": "decided",
    "expired": "expired",
    "ran": "outcome",
    "failed": "outcome",
    "not_run": "outcome",
    "grant_created": "grant",
    "allowed_by_grant": "grant",
    "grant_revoked": "grant",
    "grant_expired": "grant",
}
#: audit detail keys gate writes itself (names, numbers, ids, how an approver signed in);
#: anything else in a detail may hold free text and is left out
GATE_WRITTEN = (
    "rule",
    "policy_revision",
    "approvals",
    "on_timeout",
    "self_approval",
    "grant",
    "approval",
    "scope",
    "until",
    "auth",
)


def owe(
    session: Session,
    *,
    request_id: str,
    kind: str,
    actor: str | None,
    via: str | None,
    at: datetime,
    detail: dict[str, Any],
    chain_hash: str,
    prev_hash: str | None,
) -> None:
    """Owe the message for one audit event to each webhook that wants its event (nothing
    when none does), in the caller's transaction."""
    event = EVENT_OF.get(kind)
    if event is None:
        return
    webhooks = outbox.subscribers(session, event)
    if not webhooks:
        return
    when = at.astimezone(UTC).isoformat()
    data: dict[str, Any] = {
        "request_id": request_id,
        "kind": kind,
        "actor": actor,
        "via": via,
        "at": when,
        "detail": {k: detail[k] for k in GATE_WRITTEN if detail.get(k) is not None},
        "audit": {"chain_hash": chain_hash, "prev_hash": prev_hash},
    }
    payload = {"type": f"request.{event}", "timestamp": when, "data": data}
    outbox.owe(
        session, webhooks=webhooks, event=event, request_id=request_id, payload=payload, now=at
    )
