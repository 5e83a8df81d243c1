"""A request's reads for the API and the console: one request as a view, a page of them, and
the counts by status. `GateService` takes them as its base; they only read."""

from __future__ import annotations

from sqlmodel import Session

from gate.base.errors import Forbidden, NotFound
from gate.config.settings import Settings
from gate.decisions.readmodel import RequestView, build_view
from gate.identity.auth import Principal
from gate.store import listing, reads, trail
from gate.store.db import Database
from gate.store.records import RequestRow
from gate.store.tables import ConfirmationRequest


class RequestReads:
    """The read half of `GateService`: needs the database and the settings, nothing else."""

    db: Database
    settings: Settings

    def view(self, request_id: str, *, full: bool = False) -> RequestView | None:
        """The request with its votes (and deliveries and audit trail when `full`)."""
        if full:
            with self.db.read() as session:
                req = reads.request(session, request_id)
                return self._view(session, req, full=True) if req else None
        with self.db.read_conn() as conn:  # the common read: one statement, no ORM
            found = reads.with_votes(conn, request_id)
        if found is None:
            return None
        return build_view(*found, public_url=self.settings.server.base_url)

    def _view(
        self, session: Session, req: ConfirmationRequest | RequestRow, *, full: bool = False
    ) -> RequestView:
        votes = reads.votes(session, req.id)
        deliveries = audit = None
        if full:
            deliveries = listing.deliveries_of(session, req.id)
            audit = trail.events_of(session, req.id)
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
        self.check_readable(view, principal)
        return view

    def check_readable(self, view: RequestView, principal: Principal) -> None:
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
        mine = principal.name if principal.role == "agent" else None
        with self.db.read() as session:
            rows = listing.requests(session, status, cursor, mine, filters, limit + 1)
            more = len(rows) > limit
            rows = rows[:limit]
            views = [self._view(session, r) for r in rows]
        return views, (rows[-1].id if more and rows else None)

    def counts(self) -> dict[str, int]:
        """Requests by status."""
        with self.db.read() as session:
            return dict(reads.counts(session))
