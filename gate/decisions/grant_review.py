"""Grants under review: approvers and admins list them and end them early.

The grant rules themselves (what a rule offers, what a grant covers, when it ends) are in
gate.decisions.grants; these are the use cases on top, each owning its transaction.
"""

from __future__ import annotations

from gate.base.errors import Conflict, NotFound
from gate.base.statuses import GrantStatus
from gate.decisions import grants, machine
from gate.decisions.service import GateService
from gate.identity.auth import Principal
from gate.store.tables import Grant


def revoke_grant(service: GateService, grant_id: str, principal: Principal) -> Grant:
    """End a grant early. Approvers and admins may revoke."""
    principal.require("approver", "admin")
    with service.db.write() as session:
        grant = session.get(Grant, grant_id)
        if grant is None:
            raise NotFound(f"no grant with id {grant_id!r}", code="grant_not_found")
        if not machine.end_grant(
            session,
            grant_id=grant_id,
            to=GrantStatus.revoked,
            actor=principal.actor_name,
            now=service.clock(),
        ):
            raise Conflict(f"grant {grant_id} already ended ({grant.status})", code="grant_ended")
        session.refresh(grant)
        return grant


def list_grants(service: GateService, principal: Principal, active_only: bool) -> list[Grant]:
    """Grants for approvers and admins to review."""
    principal.require("approver", "admin")
    with service.db.read() as session:
        return grants.list_grants(session, active_only=active_only, now=service.clock())
