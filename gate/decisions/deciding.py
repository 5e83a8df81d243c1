"""Deciding and extending: the one pipeline every surface goes through.

API tokens, web sign-ins and chat clicks all arrive here as an `Actor` (or, from a channel,
a `Click` that names a platform user). The pipeline reads the request once, asks
`gate.decisions.acting.refusal_for` whether the actor may act at all, checks what they ask for
against what the rule offers, and only then writes, in one transaction through the state
machine. Refusals come back in the `Result` (never as exceptions); the API turns them into
its errors with `acting.raise_for`, and every other surface words them with `Result.message()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gate.base.errors import InvalidInput
from gate.base.statuses import RequestStatus, Verdict
from gate.config.settings import parse_duration
from gate.decisions import acknowledging, audit, denials, grants, identities, machine, outcomes
from gate.decisions.acting import (
    Actor,
    Refusal,
    Result,
    approval_refusal,
    asked_it,
    refusal_for,
    settled,
)
from gate.decisions.readmodel import RequestView, build_view
from gate.identity.authmethod import AuthMethod, BoundBy
from gate.policy import offers, stepup
from gate.store.decisions import CHANGED_MEANWHILE

if TYPE_CHECKING:
    from gate.decisions.clicks import Click
    from gate.decisions.service import GateService
    from gate.identity.auth import Principal


def decide(
    service: GateService,
    request_id: str,
    actor: Actor,
    verdict: Verdict,
    comment: str | None = None,
    *,
    edited_args: dict[str, Any] | None = None,
    edits: dict[str, Any] | None = None,
    reasons: Sequence[str] = (),
    grant: tuple[str, str] | grants.GrantAsk | None = None,
) -> Result:
    """Record `actor`'s verdict, if they may decide this request. One write transaction.

    `edited_args` approves with changed arguments (the full object); `edits` gives only the
    changed ones by name (a chat form), merged over the request's arguments. `reasons` are
    the rule's preset reject reasons, and `grant` is a (scope, duration) pair, or a
    `grants.GrantAsk` with uses and pinned arguments, to attach to an approval; each is
    checked against what the rule offers. The request and its votes are
    read once, inside the write (SQLite: under its writer's lock); the answer is built from
    what was written, never read back.

    On PostgreSQL the request is read first without its lock (`machine.lock`, optimistic):
    one autocommitted read and one autocommitted write when nothing else changes it
    meanwhile; when something did, nothing was written and it is decided again, locked.
    """
    asked = (service, request_id, actor, verdict, comment, edited_args, edits, reasons, grant)
    try:
        return _decide(*asked, optimistic=True)
    except CHANGED_MEANWHILE:  # another change of the request committed after the read
        return _decide(*asked, optimistic=False)


def _decide(
    service: GateService,
    request_id: str,
    actor: Actor,
    verdict: Verdict,
    comment: str | None,
    edited_args: dict[str, Any] | None,
    edits: dict[str, Any] | None,
    reasons: Sequence[str],
    grant: tuple[str, str] | grants.GrantAsk | None,
    *,
    optimistic: bool,
) -> Result:
    now = service.clock()
    public_url = service.settings.server.base_url
    with service.changing() as change:
        loaded = machine.lock(change.session, request_id, optimistic=optimistic)
        if loaded is None:
            return Result(outcomes.Missing(request_id), None)
        req, votes = loaded
        view = build_view(req, votes, public_url=public_url)
        if edits is not None:
            edited_args = {**req.tool_args, **edits}
        checked = _check(service, view, actor, verdict, comment, edited_args, reasons, grant)
        if isinstance(checked, Result):
            return checked
        comment, spec, own = checked
        outcome = machine.record_vote(
            change.session,
            req,
            votes,
            approver=actor.name,
            verdict=verdict,
            comment=comment,
            via=actor.via,
            now=now,
            edited_args=edited_args,
            grant=(spec.scope, int(spec.duration.total_seconds())) if spec else None,
            grant_terms=spec.terms() if spec else None,
            own=own,
            auth=actor.auth,
        )
        approved = (
            isinstance(outcome, outcomes.Changed) and outcome.status is RequestStatus.approved
        )
        if isinstance(outcome, outcomes.Changed) and outcome.status is RequestStatus.rejected:
            denials.after_rejection(service, change, req, now)  # may trip the agent
        if approved and view.offers.grant_scopes:
            # every approving vote must have chosen a grant (a quorum's, not one voter's)
            agreed = grants.agreed(grants.chosen(votes))
            if agreed is not None:
                grants.create(change.session, req, agreed, by=actor.name, now=now)
        change.record(outcome)
        decided = build_view(req, votes, public_url=public_url, like=view)
        change.shows(decided)
    return Result(outcome, decided)


def _check(
    service: GateService,
    view: RequestView,
    actor: Actor,
    verdict: Verdict,
    comment: str | None,
    edited_args: dict[str, Any] | None,
    reasons: Sequence[str],
    grant: tuple[str, str] | grants.GrantAsk | None,
) -> Result | tuple[str | None, grants.GrantSpec | None, bool]:
    """Who may act and what the rule offers: a Result to answer with, or the comment (with
    its preset reasons), the grant to record and whether the actor decides their own call
    (a rule's `self_approval`: audited as such)."""
    done = settled(view, view.id)
    if done is not None:
        return done
    refusal = refusal_for(service.settings, view, actor)
    if refusal is not None:
        return Result(None, view, refusal)
    if verdict == Verdict.approve:
        if view.offers.justification == "to_review" and not (view.justification or "").strip():
            return Result(None, view, Refusal.unreviewable)
        unseen = approval_refusal(view, actor)
        if unseen is not None:
            return unseen
        weak = stepup.refusal(view.offers.step_up, actor.auth, service.clock())
        if weak is not None:
            code = Refusal.step_up_required
            return Result(None, view, code, weak[0].upper() + weak[1:], code.value)
    own = asked_it(service.settings, view, actor)
    try:
        comment = offers.with_reasons(view.offers, verdict, comment, list(reasons))
        offers.check_comment(view.current_stage, verdict, comment, own=own)
        spec = None
        if grant is not None:
            if verdict != Verdict.approve:
                raise InvalidInput("only an approval can carry a grant")
            ask = grant if isinstance(grant, grants.GrantAsk) else grants.GrantAsk(*grant)
            spec = grants.validate(
                view, ask.scope, ask.duration, uses=ask.uses, pin=ask.pin, args=edited_args
            )
        if edited_args is not None:
            offers.check_edits(view.offers, verdict, view.tool_args, edited_args)
    except InvalidInput as exc:
        return Result(None, view, Refusal.not_offered, exc.message, exc.code)
    return comment, spec, own


def extend(
    service: GateService,
    request_id: str,
    actor: Actor,
    by: str,
    *,
    seen: datetime | None = None,
) -> Result:
    """Give a pending request more time; only someone who may decide it can.

    `seen` is the deadline the person was shown (a chat card carries it): when the deadline
    has moved since, that extension already happened and nothing moves again.
    """
    view = service.view(request_id)
    done = settled(view, request_id)
    if done is not None or view is None:
        return done or Result(outcomes.Missing(request_id), None)
    refusal = refusal_for(service.settings, view, actor)
    if refusal is not None:
        return Result(None, view, refusal)
    if seen is not None and view.expires_at != seen:
        return Result(outcomes.Extended(request_id, view.expires_at), view)
    try:
        more = parse_duration(by)
    except ValueError as exc:
        return Result(None, view, Refusal.not_offered, f"by: {exc}", "invalid_input")
    server = service.settings.server
    now = service.clock()
    until = min(max(view.expires_at, now) + more, view.created_at + server.max_timeout)
    if until <= view.expires_at:
        detail = (
            f"the deadline is already at the longest allowed (server.max_timeout "
            f"{server.max_timeout} after the request was made)"
        )
        return Result(None, view, Refusal.deadline_at_limit, detail)
    with service.changing() as change:
        outcome = machine.extend(
            change.session,
            request_id=request_id,
            until=until,
            actor=actor.name,
            via=actor.via,
            now=now,
            seen=seen,
        )
        change.record(outcome)
    return Result(outcome, service.view(request_id))


def act(service: GateService, click: Click) -> Result:
    """A click on a chat card: the platform user must be one of the `[[approvers]]`, bound by
    gate.toml, the identity provider, a console link or their email (`identities.lookup`)."""
    bound = identities.lookup(service.settings, service.db, click.channel, click.user_id)
    if bound is None:
        view = service.view(click.request_id)
        return settled(view, click.request_id) or Result(None, view, Refusal.not_an_approver)
    # A chat card shows the arguments up to its platform's length: `click.args_chars` says
    # how far (none when the channel does not say, so nothing it sends can approve).
    actor = Actor.of_approver(
        bound.approver,
        click.channel,
        args_chars=click.args_chars or 0,
        auth=chat_auth(click, bound.bound_by),
    )
    result = _act(service, click, actor)
    if result.refusal is Refusal.email_bound:
        _record_refusal(service, click, actor, result.refusal)
    return result


def _act(service: GateService, click: Click, actor: Actor) -> Result:
    if click.action == "check":
        view = service.view(click.request_id)
        done = settled(view, click.request_id)
        if done is not None or view is None:
            return done or Result(outcomes.Missing(click.request_id), None)
        return Result(None, view, refusal_for(service.settings, view, actor))
    if click.action == "acknowledge":
        return acknowledging.acknowledge(service, click.request_id, actor)
    if click.action == "extend":
        by = click.extend_by or "15m"
        return extend(service, click.request_id, actor, by, seen=click.extend_from)
    return decide(
        service,
        click.request_id,
        actor,
        Verdict(click.action),
        click.comment,
        edits=click.edits,
        reasons=click.reasons,
        grant=click.grant,
    )


def _record_refusal(service: GateService, click: Click, actor: Actor, refusal: Refusal) -> None:
    """Put a refused click in the request's audit trail (who, from where, why, and how they
    were authenticated), so the security team sees attempts a rule turned away."""
    detail: dict[str, object] = {
        "action": click.action,
        "refusal": refusal.value,
        "reason": refusal.sentence(),
        "auth": actor.auth.to_json() if actor.auth is not None else None,
    }
    with service.changing() as change:
        audit.record_refusal(
            change.session,
            click.request_id,
            actor=actor.name,
            via=click.channel,
            now=service.clock(),
            detail=detail,
        )


def chat_auth(click: Click, bound_by: BoundBy) -> AuthMethod:
    """How a chat click's person was authenticated: the platform said who clicked, and gate
    bound that id to the approver as `bound_by` says (`gate.decisions.identities`)."""
    return AuthMethod("chat", platform=click.channel, user_id=click.user_id, bound_by=bound_by)


def for_api(principal: Principal) -> Actor:
    """The actor for an API decision or extension (403 for agent tokens, before any read).

    Approver and admin tokens may read every request, so there is nothing else to check
    before the pipeline (an unknown id comes back as `Missing`, the API's 404).
    """
    principal.require("approver", "admin")
    return Actor.of_principal(principal)
