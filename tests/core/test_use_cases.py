"""The state machine and the decision pipeline, called directly on a fixed clock.

No HTTP here: a real database (SQLite and PostgreSQL, migrated like `gate serve` does), the
real policy and service, and a clock the test moves by hand, so deadlines, grants and
refusals are checked to the second. What each surface adds on top (status codes, cards,
pages) is tested with that surface.
"""

from __future__ import annotations

from datetime import timedelta

from gate.base.notify import Notifier
from gate.base.statuses import RequestStatus, Verdict
from gate.config.settings import Settings
from gate.decisions import deciding, machine, outcomes
from gate.decisions.acting import Refusal
from gate.decisions.clicks import Click
from gate.decisions.service import GateService
from gate.inputs.bodies import GateCall
from gate.policy.rules import Policy
from tests.core.conftest import (
    AGENT,
    OTHER_AGENT,
    RULES,
    Clock,
    approver,
    ask,
    granted_refund,
    service_of,
)
from tests.support import config as cfg


def test_a_decision_is_one_transition_with_its_audit(service: GateService, clock: Clock) -> None:
    rid = ask(service, tool_name="refund", tool_args={"amount": 10})
    clock.advance(seconds=30)
    result = deciding.decide(service, rid, approver(service, "alice"), Verdict.approve, "ok")
    assert isinstance(result.outcome, outcomes.Changed)
    assert result.outcome.status is RequestStatus.approved
    view = service.view(rid, full=True)
    assert view is not None and view.decided_at == clock.now and view.decided_by == "alice"
    assert [a.kind for a in view.audit] == ["created", "approved"]
    again = deciding.decide(service, rid, approver(service, "bob"), Verdict.reject, "late")
    assert isinstance(again.outcome, outcomes.AlreadyFinal) and again.outcome.decided_by == "alice"


def test_the_deadline_is_exact_and_applied_by_whoever_comes_first(
    service: GateService, clock: Clock
) -> None:
    rid = ask(service, tool_name="refund", tool_args={"amount": 10})
    clock.advance(minutes=10, seconds=-1)
    assert deciding.extend(service, rid, approver(service, "alice"), "1s").changed
    clock.advance(seconds=2)  # now exactly at the extended deadline: too late
    result = deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    assert isinstance(result.outcome, outcomes.AlreadyFinal)
    assert result.outcome.status is RequestStatus.expired
    assert service.expire_due() == 0  # the sweep finds nothing left to do


def test_refusals_are_an_enum_not_words(service: GateService) -> None:
    rid = ask(service, tool_name="refund", tool_args={"amount": 10}, user_id="alice")
    carol = deciding.decide(service, rid, approver(service, "carol"), Verdict.approve)
    assert carol.refusal is Refusal.not_an_approver and carol.outcome is None
    alice = deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    assert alice.refusal is Refusal.self_approval
    reason = deciding.decide(
        service, rid, approver(service, "bob"), Verdict.reject, reasons=["not offered"]
    )
    assert reason.refusal is Refusal.not_offered and reason.code == "unknown_reason"
    edit = deciding.decide(
        service,
        rid,
        approver(service, "bob"),
        Verdict.approve,
        edited_args={"amount": 10, "to": "elsewhere"},
    )
    assert edit.refusal is Refusal.not_offered and edit.code == "edit_not_offered"
    view = service.view(rid)
    assert view is not None and view.status == "pending" and view.votes == []


def test_a_quorum_counts_people_and_a_grant_needs_every_vote(service: GateService) -> None:
    rid = ask(service, tool_name="wire", tool_args={"amount": 1})
    first = deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    assert isinstance(first.outcome, outcomes.Voted) and first.outcome.approvals == 1
    twice = deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    assert isinstance(twice.outcome, outcomes.AlreadyVoted)
    second = deciding.decide(service, rid, approver(service, "bob"), Verdict.approve)
    assert isinstance(second.outcome, outcomes.Changed)


def test_grants_ride_only_with_the_principal_and_rule_that_earned_them(
    service: GateService, clock: Clock
) -> None:
    granted_refund(service, agent_id="bot")
    mine = service.submit(
        GateCall(tool_name="refund", tool_args={"amount": 2}, agent_id="bot"), AGENT
    )
    assert mine.decision.action == "allow" and mine.view is not None
    assert mine.view.decided_via == "grant"
    theirs = service.submit(
        GateCall(tool_name="refund", tool_args={"amount": 2}, agent_id="bot"), OTHER_AGENT
    )
    assert theirs.decision.action == "ask"
    clock.advance(minutes=30)  # the grant's time is up, even before the sweep ends it
    later = service.submit(
        GateCall(tool_name="refund", tool_args={"amount": 3}, agent_id="bot"), AGENT
    )
    assert later.decision.action == "ask"


def test_a_grant_never_covers_a_call_asked_for_by_one_who_approved_it(
    service: GateService,
) -> None:
    # One agent token serves several people. alice approves dave's call with a grant for
    # the agent; the agent then asks the same on alice's behalf: she would have approved
    # her own call, which no decision of hers may do.
    rid = ask(service, tool_name="refund", tool_args={"amount": 1}, agent_id="bot", user_id="dave")
    deciding.decide(
        service, rid, approver(service, "alice"), Verdict.approve, grant=("agent", "30m")
    )
    for user in ("alice", "ALICE", "alice@example.com", "\uff41lice"):
        call = GateCall(tool_name="refund", tool_args={"amount": 2}, agent_id="bot", user_id=user)
        submitted = service.submit(call, AGENT)
        assert submitted.decision.action == "ask", user
        assert submitted.view is not None and submitted.view.status == "pending"
    # and still covers everyone else's
    call = GateCall(tool_name="refund", tool_args={"amount": 3}, agent_id="bot", user_id="erin")
    assert service.submit(call, AGENT).decision.action == "allow"


def test_a_grant_covers_calls_only_while_its_rule_still_offers_its_scope(
    service: GateService, clock: Clock
) -> None:
    rid = ask(service, tool_name="refund", tool_args={"amount": 1}, agent_id="bot")
    deciding.decide(
        service, rid, approver(service, "alice"), Verdict.approve, grant=("agent", "30m")
    )
    call = GateCall(tool_name="refund", tool_args={"amount": 2}, agent_id="bot")
    assert service.submit(call, AGENT).decision.action == "allow"
    # gate.toml changed: the same rule, same approvers and quorum, no longer offers grants
    data = cfg.settings_data(service.settings.server.database_url)
    data["rules"] = [{**RULES[0], "grant_scopes": []}, *RULES[1:], *data["rules"]]
    settings = Settings(**data)
    now_strict = GateService(
        settings=settings,
        db=service.db,
        policy=Policy(settings),
        notifier=Notifier(),
        clock=clock,
    )
    again = now_strict.submit(call, AGENT)
    assert again.decision.action == "ask", again.decision


def test_a_click_goes_through_the_same_pipeline(service: GateService) -> None:
    rid = ask(service, tool_name="refund", tool_args={"amount": 10, "to": "a"})
    stranger = deciding.act(service, Click("slack", "U0NOBODY", rid, "approve"))
    assert stranger.refusal is Refusal.not_an_approver
    check = deciding.act(service, Click("slack", "U0BOB", rid, "check"))
    assert check.refusal is None and check.outcome is None
    # a channel that does not say how much of the call its card showed approves nothing
    unsaid = deciding.act(service, Click("slack", "U0BOB", rid, "approve"))
    assert unsaid.refusal is Refusal.arguments_not_shown and not unsaid.changed
    shown = Click("slack", "U0BOB", rid, "approve", edits={"amount": 5}, args_chars=3000)
    edited = deciding.act(service, shown)
    assert edited.changed and edited.view is not None
    assert edited.view.approved_args == {"amount": 5, "to": "a"}
    assert "Approved with edits by bob in Slack" in (edited.view.reason or "")


def test_a_numeric_channel_id_is_one_identity_for_clicks_and_self_approval(
    db_url: str, clock: Clock
) -> None:
    """`telegram = 4242` unquoted in gate.toml: the id that maps bob's click to bob must
    also be one of bob's identities, or bob approves a call he asked for as user 4242."""
    data = cfg.settings_data(db_url)
    data["approvers"][1]["telegram"] = 4242  # bob, as a TOML integer
    svc = service_of(data, clock)
    try:
        rid = ask(svc, tool_name="refund", tool_args={"amount": 10}, user_id="4242")
        result = deciding.act(svc, Click("telegram", "4242", rid, "approve"))
        assert result.refusal is Refusal.self_approval
        other = ask(svc, tool_name="refund", tool_args={"amount": 11}, user_id="dave")
        assert deciding.act(
            svc, Click("telegram", "4242", other, "approve", args_chars=1000)
        ).changed
    finally:
        svc.db.dispose()


def test_an_extension_from_a_deadline_already_moved_moves_nothing(
    service: GateService, clock: Clock
) -> None:
    rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    view = service.view(rid)
    assert view is not None
    shown = view.expires_at
    bob = approver(service, "bob")
    first = deciding.extend(service, rid, bob, "15m", seen=shown)
    assert isinstance(first.outcome, outcomes.Extended)
    again = deciding.extend(service, rid, bob, "15m", seen=shown)  # the same click, again
    assert isinstance(again.outcome, outcomes.Extended)
    assert again.outcome.until == first.outcome.until == shown + timedelta(minutes=15)
    trail = service.view(rid, full=True)
    assert trail is not None and [a.kind for a in trail.audit].count("extended") == 1


def test_an_expiry_finding_the_deadline_moved_since_the_sweep_read_it_leaves_the_request(
    service: GateService, clock: Clock
) -> None:
    # the sweep reads what is due, then expires each in a transaction of its own: an
    # approver's extension that committed in between stands (the request stays pending)
    rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    clock.advance(minutes=10, seconds=-1)
    assert deciding.extend(service, rid, approver(service, "alice"), "1h").changed
    clock.advance(seconds=1)  # the old deadline, as the sweep found it
    with service.changing() as change:
        outcome = machine.expire(change.session, request_id=rid, now=clock.now)
    assert isinstance(outcome, outcomes.Extended) and outcome.until > clock.now
    view = service.view(rid, full=True)
    assert view is not None and view.status == RequestStatus.pending
    assert [a.kind for a in view.audit] == ["created", "extended"]
