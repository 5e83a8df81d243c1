"""A vote as the state machine records it: cast (new or changed) and, when it decides
nothing yet, written to the trail and the cards. `gate.decisions.machine` decides what a vote does
(reject, pass a stage, approve); this is its bookkeeping, apart for the machine's size.
Speaks no SQL: the store's verbs do (`gate.store.decisions`).
"""

from __future__ import annotations

from sqlmodel import Session

from gate.decisions import audit
from gate.decisions.outcomes import Voted
from gate.policy import stages as chains
from gate.policy.offers import Offers
from gate.store import decisions as store
from gate.store.records import RequestRow, VoteRow


def cast(
    session: Session, req: RequestRow, votes: list[VoteRow], vote: VoteRow
) -> tuple[bool, str | None]:
    """Store `vote` (and add it to `votes`): (whether it was cast, the verdict it replaced).
    Not cast when this approver had already cast the same verdict in this stage, or voted in
    an earlier one (`gate.decisions.acting` refuses that first). An approver who changes their
    verdict in the stage changes their one vote (the grant they chose goes with their approval)."""
    existing = next((v for v in votes if v.approver == vote.approver), None)
    if existing is not None and (existing.verdict == vote.verdict or existing.stage != req.stage):
        return False, None
    if existing is None:
        store.cast_vote(session, req.id, vote, replacing=None)
        votes.append(vote)
        return True, None
    before = existing.verdict
    vote.grant_scope = vote.grant_seconds = None
    store.cast_vote(session, req.id, vote, replacing=existing)
    return True, before


def counted(
    session: Session,
    req: RequestRow,
    vote: VoteRow,
    offers: Offers,
    count: chains.Tally,
    extra: dict[str, object],
) -> Voted:
    """A vote that decides nothing yet: in the trail, on the cards."""
    detail: dict[str, object] = {"verdict": vote.verdict, "comment": vote.comment}
    detail |= {"approvals": count.approvals, "required": count.stage.approvals}
    detail |= stage_detail(offers, req, count) | extra
    req.audit_head = audit.append(
        session, req.id, "vote", vote.approver, vote.via, vote.at, detail, prev=req.audit_head
    )
    store.owe_card_updates(session, req.id, vote.at)
    return Voted(
        req.id,
        count.approvals,
        count.stage.approvals,
        verdict=vote.verdict,
        rejections=count.rejections,
        rejections_required=count.stage.rejections,
    )


def stage_detail(offers: Offers, req: RequestRow, count: chains.Tally) -> dict[str, object]:
    """What the trail adds about the chain: the stage and the rejections so far (nothing for
    a rule without stages and with the default threshold, whose events stay as they were)."""
    detail: dict[str, object] = {}
    if offers.stages:
        detail["stage"] = count.stage.label(req.stage, len(offers.stages))
    if count.stage.rejections > 1:
        detail |= {"rejections": count.rejections, "rejections_required": count.stage.rejections}
    return detail
