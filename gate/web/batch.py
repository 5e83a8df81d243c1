"""Batch decisions: approve or reject several pending requests from the queue with one reason.

Each selected request is decided as if on its own: through `gate.decisions.deciding.decide`
(so `acting.refusal_for`, the rule's offers and the state machine), one transaction each, in
the order selected. Nothing is decided for a request the pipeline refuses, and the page that
answers says for each request whether it was decided and, if not, why. The form is posted like
every console form (`Console.posted`: the CSRF token, then a signed-in approver; the app's
same-origin guard before that).

An approval counts only for a call the queue row showed whole (its preview left no line
out), and for masked values this approver revealed on the request's page: as on a chat card,
the pipeline refuses the rest with "open its page".
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from gate.base.statuses import Verdict
from gate.decisions import audit, deciding, outcomes
from gate.decisions.acting import Actor, Result
from gate.decisions.readmodel import RequestView
from gate.identity.auth import Principal
from gate.text import untrusted
from gate.web import calls
from gate.web.console import Console, Posted
from gate.web.forms import MAX_COMMENT, field_of
from gate.web.session import SignedIn

#: the most requests one batch decides (the queue shows at most 200; a batch is a page's worth)
MAX_BATCH = 50
#: a request id is a ULID: anything longer is not one (and is not echoed back whole)
_MAX_ID = 26


@dataclass(frozen=True)
class Decided:
    """One selected request and what became of it."""

    request_id: str
    #: gate's one-line reading of the call ("" when the request is not found)
    headline: str
    #: the vote counted (decided, or recorded toward a quorum or the next stage)
    recorded: bool
    #: the pipeline's sentence: what happened, or why nothing did
    words: str


class BatchDecisions:
    """`POST /requests/batch`, the queue's "Approve selected" and "Reject selected"."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.service = console.service

    async def decide(self, request: Request) -> Response:
        """Decide each selected request through the pipeline; answer with each outcome."""
        posted = await self.console.posted(request)
        if not isinstance(posted, Posted):
            return posted
        form, session = posted.form, posted.session
        verdict = field_of(form, "verdict") or ""
        ids = list(dict.fromkeys(i for i in form.getlist("ids") if isinstance(i, str) and i))
        comment = (field_of(form, "comment") or "").strip()
        problem = _problem(verdict, ids, comment)
        if problem is not None:
            return self.console.redirect(request, session, "/", problem, ok=False)
        signed, chosen = posted.signed, Verdict(verdict)
        done = await anyio.to_thread.run_sync(
            lambda: self.each(signed, ids, chosen, comment or None)
        )
        recorded = sum(d.recorded for d in done)
        return self.console.render(
            request,
            session,
            "batch.html",
            me=posted.me,
            verdict=verdict,
            comment=comment,
            done=done,
            recorded=recorded,
        )

    def router(self) -> APIRouter:
        """The batch form's routes (pages: not in the OpenAPI schema); mounted before the
        request page's, whose `/requests/{request_id}` would take "batch" for an id."""
        r = APIRouter(include_in_schema=False)
        r.add_api_route("/requests/batch", self.decide, methods=["POST"])

        @r.get("/requests/batch")
        def form_address() -> Response:
            # the form's address, bookmarked or reloaded after the answer, leads to the queue
            return RedirectResponse("/", status_code=303)

        return r

    def each(
        self, signed: SignedIn, ids: list[str], verdict: Verdict, comment: str | None
    ) -> list[Decided]:
        """Decide `ids` one by one, each as its own decision (blocking: a worker thread)."""
        me = signed.approver
        views, _ = self.service.list(
            Principal(me.name, "approver", me), status="pending", limit=200
        )
        shown = {v.id: v for v in views}
        return [self.one(signed, rid, shown.get(rid), verdict, comment) for rid in ids]

    def one(
        self,
        signed: SignedIn,
        request_id: str,
        view: RequestView | None,
        verdict: Verdict,
        comment: str | None,
    ) -> Decided:
        """One request, decided through the pipeline as the queue showed it."""
        me = signed.approver
        revealed = None
        if verdict is Verdict.approve:
            revealed = audit.revealed(self.console.state.db, request_id, me.name)
        actor = Actor.of_approver(
            me,
            "web",
            args_chars=_shown_chars(view),
            revealed=revealed,
            auth=signed.auth,
            groups=signed.groups,
        )
        result = deciding.decide(self.service, request_id, actor, verdict, comment)
        seen = result.view or view
        headline = calls.shown(seen).rendering.headline if seen is not None else ""
        return Decided(request_id, headline, _recorded(result), result.message())


def _shown_chars(view: RequestView | None) -> int:
    """How much of the call the queue row showed whole, as `Actor.args_chars` counts it: all
    of it when its preview left no line out, else nothing (the request's page shows it)."""
    if view is None:
        return 0  # not in the queue this approver saw
    if calls.preview(calls.shown(view)).hidden_lines:
        return 0
    return untrusted.ANY_LENGTH


def _recorded(result: Result) -> bool:
    if result.refusal is not None or result.view is None:
        return False
    return not isinstance(
        result.outcome, outcomes.Missing | outcomes.AlreadyFinal | outcomes.AlreadyVoted
    )


def _problem(verdict: str, ids: list[str], comment: str) -> str | None:
    """What makes the batch form unusable as a whole, in a sentence (None: nothing)."""
    if verdict not in ("approve", "reject"):
        return "Choose Approve selected or Reject selected."
    if not ids:
        return "Select at least one request to decide."
    if len(ids) > MAX_BATCH:
        return f"Select at most {MAX_BATCH} requests at a time."
    if any(len(i) > _MAX_ID for i in ids):
        return "That is not a request id."
    if len(comment) > MAX_COMMENT:
        return f"The reason is longer than {MAX_COMMENT} characters."
    return None
