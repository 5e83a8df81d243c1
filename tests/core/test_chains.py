"""Approval chains through the one decision pipeline: stages decided in order, vote
thresholds and filters, changed votes, the agent's justification, approvers' comments and
self-approval by rule. A real database (SQLite and PostgreSQL), the real policy and service,
a clock the test moves; the surfaces' own tests show the same on the API, the console and
each channel's card.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from gate.base.errors import InvalidInput
from gate.base.statuses import RequestStatus, Verdict
from gate.decisions import audit, deciding, outcomes
from gate.decisions.acting import Refusal
from gate.decisions.service import GateService
from gate.delivery import reminders
from tests.core.conftest import Clock, approver, ask, service_of
from tests.support import config as cfg
from tests.support.sql_counter import counting, per_database

#: a stage without its own `timeout` waits the rule's
CHAIN_HOUR = timedelta(hours=1)
#: a lead, then two of finance, then security: the chain the docs walk through
CHAIN: dict[str, Any] = {
    "name": "payments",
    "tools": ["pay"],
    "timeout": "1h",
    "stages": [
        {"name": "team lead", "approvers": ["carol"], "timeout": "30m"},
        {
            "name": "finance",
            "approvers": ["group:finance"],
            "votes": {"approve": 2},
            "escalate_after": "10m",
            "escalate_approvers": ["erin"],
        },
        {"name": "security", "approvers": ["mallory"], "justify": True},
    ],
}
RULES: list[dict[str, Any]] = [
    CHAIN,
    {
        "name": "votes",
        "tools": ["vote"],
        "approvers": ["group:finance", "carol"],
        "votes": {"approve": 2, "reject": 2, "groups": ["finance"]},
    },
    {
        "name": "fallback",
        "tools": ["fallback"],
        "stages": [
            {"approvers": ["alice"], "fallback_approvers": ["bob"]},
            {"approvers": ["group:auditors"], "fallback_approvers": ["carol"]},
        ],
    },
    {"name": "justified", "tools": ["justified"], "justification": "required"},
    {"name": "reviewable", "tools": ["reviewable"], "justification": "to_review"},
    {"name": "commented", "tools": ["commented"], "approvers_justify": True},
    {"name": "own", "tools": ["own"], "self_approval": {"groups": ["finance"]}},
    {"name": "web-only", "tools": ["web_only"], "votes": {"via": ["web"]}},
]


@pytest.fixture
def chained(db_url: str, clock: Clock) -> Iterator[GateService]:
    data = cfg.settings_data(db_url)
    data["approvers"] += [
        {"name": "dave", "groups": ["finance"]},
        {"name": "erin", "groups": ["managers"]},
    ]
    data["rules"] = RULES + data["rules"]
    svc = service_of(data, clock)
    yield svc
    svc.db.dispose()


def decide(svc: GateService, rid: str, who: str, verdict: str, comment: str | None = None) -> Any:
    return deciding.decide(svc, rid, approver(svc, who), Verdict(verdict), comment)


def test_stages_are_decided_in_order_and_each_shows_who_decided_the_ones_before(
    chained: GateService,
) -> None:
    rid = ask(chained, tool_name="pay", tool_args={"amount": 5})
    early = decide(chained, rid, "alice", "approve")  # finance, before its turn
    assert early.refusal is Refusal.not_your_turn
    assert "earlier stage" in early.message()
    passed = decide(chained, rid, "carol", "approve")
    assert isinstance(passed.outcome, outcomes.Voted)
    assert passed.outcome.next_stage == "stage 2 of 3 (finance)"
    assert passed.message() == "Your approval is recorded; stage 2 of 3 (finance) decides next."
    view = chained.view(rid)
    assert view is not None and view.stage == 1 and view.approvers == ["alice", "bob", "dave"]
    assert view.outcome_sentence() == (
        "Waiting for stage 2 of 3 (finance) (0 of 2); stage 1 of 3 (team lead): approved by carol"
    )
    assert decide(chained, rid, "carol", "approve").refusal is Refusal.not_an_approver
    assert decide(chained, rid, "mallory", "approve").refusal is Refusal.not_your_turn
    assert isinstance(decide(chained, rid, "alice", "approve").outcome, outcomes.Voted)
    assert decide(chained, rid, "bob", "approve").outcome.next_stage == "stage 3 of 3 (security)"
    unjustified = decide(chained, rid, "mallory", "approve")  # security must say why
    assert unjustified.refusal is Refusal.not_offered and unjustified.code == "comment_required"
    done = decide(chained, rid, "mallory", "approve", "checked the payee")
    assert isinstance(done.outcome, outcomes.Changed)
    assert done.outcome.status is RequestStatus.approved
    view = chained.view(rid, full=True)
    assert view is not None
    kinds = [a.kind for a in view.audit]
    assert kinds == ["created", "stage_approved", "vote", "stage_approved", "approved"]
    passes = [a.detail for a in view.audit if a.kind == "stage_approved"]
    assert passes[0]["approved_by"] == ["carol"] and passes[1]["approved_by"] == ["alice", "bob"]
    assert [(v.approver, v.stage) for v in view.votes] == [
        ("carol", 0),
        ("alice", 1),
        ("bob", 1),
        ("mallory", 2),
    ]


def test_a_rejection_in_any_stage_rejects_and_a_stage_denies_by_itself(
    chained: GateService, clock: Clock
) -> None:
    rid = ask(chained, tool_name="pay", tool_args={"amount": 5})
    decide(chained, rid, "carol", "approve")
    rejected = decide(chained, rid, "bob", "reject", "not this month")
    assert isinstance(rejected.outcome, outcomes.Changed)
    assert rejected.outcome.status is RequestStatus.rejected
    # the first stage waits 30 minutes, not the rule's hour
    slow = ask(chained, tool_name="pay", tool_args={"amount": 6})
    clock.advance(minutes=31)
    assert chained.expire_due() == 1
    view = chained.view(slow)
    assert view is not None and view.status == "expired"
    assert view.reason is not None
    assert view.reason.startswith("Nobody answered within 30m (stage 1 of 3 (team lead) of rule")


def test_each_stage_has_its_own_clock_for_deadline_and_escalation(
    chained: GateService, clock: Clock
) -> None:
    rid = ask(chained, tool_name="pay", tool_args={"amount": 5})
    clock.advance(minutes=20)
    decide(chained, rid, "carol", "approve")
    view = chained.view(rid)
    assert view is not None and view.stage_at == clock.now
    assert view.expires_at == clock.now + CHAIN_HOUR  # finance waits the rule's hour
    clock.advance(minutes=9)  # 29 minutes in, 9 into finance's stage: not yet
    assert reminders.remind_and_escalate(chained, clock.now) == (0, 0)
    clock.advance(minutes=2)
    assert reminders.remind_and_escalate(chained, clock.now) == (0, 1)
    view = chained.view(rid)
    assert view is not None and "erin" in view.approvers
    assert isinstance(decide(chained, rid, "erin", "approve").outcome, outcomes.Voted)


def test_two_of_finance_approve_or_any_two_reject_and_a_changed_vote_is_audited(
    chained: GateService,
) -> None:
    rid = ask(chained, tool_name="vote", tool_args={})
    assert decide(chained, rid, "carol", "approve").refusal is Refusal.vote_not_counted
    first = decide(chained, rid, "alice", "reject", "too much")
    assert isinstance(first.outcome, outcomes.Voted) and first.outcome.verdict == "reject"
    assert first.message() == "Your rejection is recorded (1 of 2 needed to reject)."
    changed = decide(chained, rid, "alice", "approve")  # alice changes her mind
    assert isinstance(changed.outcome, outcomes.Voted) and changed.outcome.approvals == 1
    assert isinstance(decide(chained, rid, "bob", "reject", "no").outcome, outcomes.Voted)
    final = decide(chained, rid, "dave", "reject", "no")
    assert isinstance(final.outcome, outcomes.Changed)
    assert final.outcome.status is RequestStatus.rejected
    view = chained.view(rid, full=True)
    assert view is not None
    votes = [a.detail for a in view.audit if a.kind == "vote"]
    assert votes[1]["changed_from"] == "reject" and votes[1]["verdict"] == "approve"
    assert view.audit[-1].detail["rejections"] == 2


def test_a_vote_filter_on_the_surface_refuses_votes_it_would_not_count(
    chained: GateService,
) -> None:
    rid = ask(chained, tool_name="web_only", tool_args={})
    assert decide(chained, rid, "alice", "approve").refusal is Refusal.vote_not_counted


def test_fallback_approvers_decide_when_the_primary_ones_are_nobody_or_the_requester(
    chained: GateService,
) -> None:
    rid = ask(chained, tool_name="fallback", tool_args={}, user_id="alice")
    view = chained.view(rid)
    assert view is not None and view.approvers == ["bob"]  # alice asked: bob is her fallback
    assert view.offers.stages[0].fallback and view.offers.stages[1].approvers == ("carol",)
    decide(chained, rid, "bob", "approve")
    done = decide(chained, rid, "carol", "approve")  # the empty auditors group: carol
    assert isinstance(done.outcome, outcomes.Changed)


def test_a_rule_can_require_the_agents_justification(chained: GateService) -> None:
    with pytest.raises(InvalidInput) as refused:
        ask(chained, tool_name="justified", tool_args={})
    assert refused.value.code == "justification_required"
    assert refused.value.body()["error"]["problems"][0]["field"] == "justification"
    rid = ask(chained, tool_name="justified", tool_args={}, justification="ticket 42")
    view = chained.view(rid, full=True)
    assert view is not None and view.justification == "ticket 42"
    assert view.audit[0].kind == "created"
    assert view.audit[0].detail["justification"] == "ticket 42"  # the trail keeps it


def test_a_request_without_justification_can_be_unreviewable(chained: GateService) -> None:
    rid = ask(chained, tool_name="reviewable", tool_args={})
    assert decide(chained, rid, "alice", "approve").refusal is Refusal.unreviewable
    assert isinstance(decide(chained, rid, "alice", "reject", "why?").outcome, outcomes.Changed)
    rid = ask(chained, tool_name="reviewable", tool_args={}, justification="the user asked")
    assert isinstance(decide(chained, rid, "alice", "approve").outcome, outcomes.Changed)


def test_approvers_may_have_to_say_why_they_approve(chained: GateService) -> None:
    rid = ask(chained, tool_name="commented", tool_args={})
    refused = decide(chained, rid, "alice", "approve")
    assert refused.code == "comment_required"
    assert isinstance(decide(chained, rid, "alice", "approve", "fine").outcome, outcomes.Changed)


def test_self_approval_by_rule_needs_a_reason_and_is_audited(chained: GateService) -> None:
    rid = ask(chained, tool_name="own", tool_args={}, user_id="alice")
    assert decide(chained, rid, "alice", "approve").code == "reason_required"
    done = decide(chained, rid, "alice", "approve", "on call, nobody else awake")
    assert isinstance(done.outcome, outcomes.Changed)
    view = chained.view(rid, full=True)
    assert view is not None and view.audit[-1].detail["self_approval"] is True
    # carol is not in finance: her own call stays refused; so does any call elsewhere
    rid = ask(chained, tool_name="own", tool_args={}, user_id="carol")
    assert decide(chained, rid, "carol", "approve", "mine").refusal is Refusal.self_approval
    rid = ask(chained, tool_name="commented", tool_args={}, user_id="alice")
    assert decide(chained, rid, "alice", "approve", "mine").refusal is Refusal.self_approval


def test_two_approvals_of_one_stage_at_once_pass_it_once(chained: GateService) -> None:
    # finance needs two: alice, bob and dave approve at once; exactly one pass to security
    for _ in range(3):
        rid = ask(chained, tool_name="pay", tool_args={"amount": 5})
        decide(chained, rid, "carol", "approve")
        results = _at_once(chained, rid, ["alice", "bob", "dave"])
        passed = [r for r in results if getattr(r.outcome, "next_stage", None)]
        assert len(passed) == 1, [r.message() for r in results]
        view = chained.view(rid, full=True)
        assert view is not None and view.stage == 2
        assert [a.kind for a in view.audit].count("stage_approved") == 2
        _chain_ok(chained)


def test_a_vote_and_an_escalation_at_once_leave_one_consistent_stage(
    chained: GateService, clock: Clock
) -> None:
    for _ in range(3):
        rid = ask(chained, tool_name="pay", tool_args={"amount": 5})
        decide(chained, rid, "carol", "approve")
        decide(chained, rid, "alice", "approve")
        clock.advance(minutes=11)  # finance's escalation is due
        _together(
            lambda rid=rid: decide(chained, rid, "bob", "approve"),
            lambda: reminders.remind_and_escalate(chained, clock.now),
        )
        view = chained.view(rid, full=True)
        assert view is not None and view.stage == 2
        # the security stage's approvers, whichever came first: never finance's escalation
        assert view.approvers == ["mallory"]
        # an escalation that came first added erin to finance before the vote passed it; one
        # that came second found the request in the next stage and did nothing
        assert [a.kind for a in view.audit][-1] == "stage_approved"
        _chain_ok(chained)


def _together(*calls: Callable[[], object]) -> list[object]:
    """Run `calls` at once, each in its own thread, released together; their results."""
    barrier = threading.Barrier(len(calls))
    results: list[object] = []

    def one(call: Callable[[], object]) -> None:
        barrier.wait()
        results.append(call())

    threads = [threading.Thread(target=one, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _at_once(svc: GateService, rid: str, people: list[str]) -> list[Any]:
    return _together(*(lambda name=name: decide(svc, rid, name, "approve") for name in people))


def _chain_ok(svc: GateService) -> None:
    """Every request's audit chain verifies (`gate audit verify`): no event forked it."""
    assert audit.verify(svc.db) == []


def test_what_each_decision_of_a_three_stage_chain_costs_the_database(
    chained: GateService,
) -> None:
    # Counted like tests/core/test_statement_counts.py (a card channel configured): a chain's
    # decision reads its votes under the row's lock, like a quorum's; passing a stage is one
    # compare-and-set with its event and card refresh. bench/call_cost.py reports the sum.
    chained.configured_channels = chained.settings.channels.configured()
    rid = ask(chained, tool_name="pay", tool_args={"amount": 5})
    counts = []
    for who, comment in [("carol", None), ("alice", None), ("bob", None), ("mallory", "ok")]:
        with counting(chained.db.engine) as tally:
            assert decide(chained, rid, who, "approve", comment).changed
        counts.append((tally.count, tally.transactions))
    # carol passes stage 1, alice's is a vote short of finance's two, bob passes finance and
    # mallory approves: each as a quorum's vote costs (the lock, the votes with the chain's
    # head, then the writes: SQLite one by one, PostgreSQL batched after a first unlocked read)
    passes = per_database(chained.db.engine, sqlite=6, postgres=4)
    vote = per_database(chained.db.engine, sqlite=5, postgres=4)
    assert counts == [(passes, 1), (vote, 1), (passes, 1), (passes, 1)], counts
