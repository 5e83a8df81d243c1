"""What each hot path costs the database, counted: a regression here fails CI.

Counts are deterministic (timings are not; those live in bench/). Each use case runs on a
real database with a card channel configured, through `tests.support.sql_counter`, on
SQLite and PostgreSQL.
"""

from __future__ import annotations

import pytest

from gate.base.statuses import Verdict
from gate.decisions import deciding, outcomes
from gate.decisions.clicks import Click
from gate.decisions.service import GateService
from gate.delivery import sending
from gate.inputs.bodies import GateCall
from gate.store import outbox
from tests.core.conftest import AGENT, approver, ask
from tests.support.sql_counter import Tally, counting, per_database


@pytest.fixture(autouse=True)
def with_cards(service: GateService) -> None:
    # the log channel's default target: every new request owes one card post
    service.configured_channels = service.settings.channels.configured()


def check(tally: Tally, *, statements: int, transactions: int) -> None:
    assert (tally.count, tally.transactions) == (statements, transactions), str(tally)


def writes(service: GateService, *, sqlite: int, postgres: int) -> int:
    """Statements of a change: on PostgreSQL its trailing writes are one (`gate.store.batch`)."""
    return per_database(service.db.engine, sqlite=sqlite, postgres=postgres)


def test_an_ungated_call_touches_no_database(service: GateService) -> None:
    with counting(service.db.engine) as tally:
        submitted = service.submit(GateCall(tool_name="read_file", tool_args={}), AGENT)
    assert submitted.decision.action == "allow"
    check(tally, statements=0, transactions=0)


def test_an_ask_is_one_transaction(service: GateService) -> None:
    # grant lookup, then the request, its audit event and its card post (PostgreSQL: one)
    with counting(service.db.engine) as tally:
        ask(service, tool_name="refund", tool_args={"amount": 1})
    check(tally, statements=writes(service, sqlite=4, postgres=2), transactions=1)
    # with an idempotency key: one more read, in the same transaction
    with counting(service.db.engine) as tally:
        ask(service, tool_name="refund", tool_args={"amount": 2}, idempotency_key="toolu_1")
    check(tally, statements=writes(service, sqlite=5, postgres=3), transactions=1)
    # under a rule that offers no grants there is no grant to look for
    with counting(service.db.engine) as tally:
        ask(service, tool_name="wire", tool_args={"amount": 3})
    check(tally, statements=writes(service, sqlite=3, postgres=1), transactions=1)


def test_asking_again_under_the_same_key_is_one_read(service: GateService) -> None:
    first = ask(service, tool_name="refund", tool_args={"amount": 2}, idempotency_key="toolu_1")
    with counting(service.db.engine) as tally:
        again = ask(service, tool_name="refund", tool_args={"amount": 2}, idempotency_key="toolu_1")
    assert again == first
    check(tally, statements=2, transactions=1)  # the request and its votes


def test_a_decision_is_one_transaction(service: GateService) -> None:
    rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    # SQLite: the lock, the transition (returning the audit chain's head: a pending request
    # one approval decides has no votes to read), the vote, the audit event and the card
    # refresh. PostgreSQL: the row with its head, unlocked and autocommitted, then the
    # transition checking both under the lock with the rest, as one autocommitted statement
    # (tests/core/test_direct.py checks that no BEGIN or COMMIT is sent)
    with counting(service.db.engine) as tally:
        result = deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    assert result.changed
    check(tally, statements=writes(service, sqlite=5, postgres=2), transactions=1)


def test_a_vote_on_a_request_needing_two_reads_its_votes(service: GateService) -> None:
    rid = ask(service, tool_name="wire", tool_args={"amount": 1})
    # the lock, the votes with the chain's head; then the vote, its event and the card refresh
    # (PostgreSQL: after a first read without the lock, which finds a quorum to count)
    with counting(service.db.engine) as tally:
        first = deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    assert isinstance(first.outcome, outcomes.Voted)
    check(tally, statements=writes(service, sqlite=5, postgres=4), transactions=1)
    # the second approval also reads the first, and ends the request
    with counting(service.db.engine) as tally:
        second = deciding.decide(service, rid, approver(service, "bob"), Verdict.approve)
    assert isinstance(second.outcome, outcomes.Changed)
    check(tally, statements=writes(service, sqlite=6, postgres=4), transactions=1)


def test_a_decision_on_a_decided_request_is_one_read(service: GateService) -> None:
    rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    with counting(service.db.engine) as tally:
        result = deciding.decide(service, rid, approver(service, "bob"), Verdict.reject, "no")
    assert not result.changed
    check(tally, statements=2, transactions=1)


def test_a_refused_decision_writes_nothing(service: GateService) -> None:
    rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    with counting(service.db.engine) as tally:
        result = deciding.decide(service, rid, approver(service, "carol"), Verdict.approve)
    assert result.refusal is not None
    check(tally, statements=1, transactions=1)  # the locked row: nothing else


def test_a_chat_click_with_edits_is_one_transaction(service: GateService) -> None:
    rid = ask(service, tool_name="refund", tool_args={"amount": 10, "to": "a"})
    with counting(service.db.engine) as tally:
        result = deciding.act(
            service, Click("slack", "U0BOB", rid, "approve", edits={"amount": 5}, args_chars=3000)
        )
    assert result.changed and result.view is not None
    assert result.view.approved_args == {"amount": 5, "to": "a"}
    # the edits merge under the lock, no extra read
    check(tally, statements=writes(service, sqlite=5, postgres=2), transactions=1)


def test_reading_a_request_is_one_statement(service: GateService) -> None:
    rid = ask(service, tool_name="wire", tool_args={"amount": 1})
    deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    with counting(service.db.engine) as tally:
        view = service.view(rid)
    assert view is not None and [v.approver for v in view.votes] == ["alice"]
    check(tally, statements=1, transactions=1)  # the request joined with its votes


def test_the_outbox_claims_and_marks_in_one_transaction_each(service: GateService) -> None:
    rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    posted = outbox.claim_due(service.db, service.clock())
    assert [c.kind for c in posted] == ["post"]
    sending.mark_sent(service.db, posted[0], service.clock(), "msg-1")
    deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    # the claim alone, then one read of the posts of the cards its updates refresh
    with counting(service.db.engine) as tally:
        updates = outbox.claim_due(service.db, service.clock())
    assert [(c.kind, c.post_ref, c.post_status) for c in updates] == [("update", "msg-1", "sent")]
    check(tally, statements=2, transactions=2)
    # sent, older pending refreshes of the same card superseded, and whether another
    # update of the card was sent after it began, in one statement (on PostgreSQL it
    # takes its turn on the card's post row first, in the same statement: marks of one
    # card must not overlap)
    with counting(service.db.engine) as tally:
        sending.mark_sent(service.db, updates[0], service.clock(), "msg-1")
    check(tally, statements=1, transactions=1)


def test_the_background_jobs_finding_nothing_run_one_statement_each(
    service: GateService,
) -> None:
    # Every replica runs both every second, mostly to find nothing
    ask(service, tool_name="refund", tool_args={"amount": 1})  # pending, not due yet
    with counting(service.db.engine) as tally:
        assert outbox.claim_due(service.db, service.clock()) != []  # its card's post
        assert outbox.claim_due(service.db, service.clock()) == []
    check(tally, statements=2, transactions=2)
    with counting(service.db.engine) as tally:
        assert service.expire_due() == 0  # due requests and due grants, in one statement
    check(tally, statements=1, transactions=1)


def test_each_claimed_update_carries_its_own_cards_post(service: GateService) -> None:
    rids = [ask(service, tool_name="refund", tool_args={"amount": n}) for n in (1, 2, 3)]
    for post in outbox.claim_due(service.db, service.clock()):
        sending.mark_sent(service.db, post, service.clock(), f"msg-{post.request_id}")
    for rid in rids:
        deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    updates = outbox.claim_due(service.db, service.clock())
    assert sorted((c.request_id, c.post_ref) for c in updates) == [
        (rid, f"msg-{rid}") for rid in sorted(rids)
    ]


def test_a_webhook_message_rides_in_the_change_it_reports(service: GateService) -> None:
    # `[[webhooks]]` wanting both events (what create_app sets from gate.toml): each change
    # writes one more row, in its own transaction; on PostgreSQL inside its one batch
    service.db.webhooks = {"feed": frozenset({"created", "decided"})}
    with counting(service.db.engine) as tally:
        rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    check(tally, statements=writes(service, sqlite=5, postgres=2), transactions=1)
    with counting(service.db.engine) as tally:
        result = deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    assert result.changed
    check(tally, statements=writes(service, sqlite=6, postgres=2), transactions=1)
