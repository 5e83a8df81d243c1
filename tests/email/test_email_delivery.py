"""Cards as mail through a real SMTP server: who gets what, and how SMTP failures reach the
outbox (temporary ones retried, permanent ones given up on, no token in any error or log)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gate.rendering import render_call
from tests.conftest import Gate, GateFactory
from tests.email.conftest import (
    ADDRESSES,
    ask,
    email_settings,
    links,
    mails,
    open_link,
    state,
    submit,
    token,
    wait_mail,
)
from tests.support import config as cfg
from tests.support.fake_smtp import FakeSMTP
from tests.support.servers import wait_until


def deliveries(gate: Gate, request_id: str) -> list[Any]:
    view = gate.state.service.view(request_id, full=True)
    assert view is not None
    return list(view.deliveries)


def post_of(gate: Gate, request_id: str, status: str) -> Any:
    """The card's post delivery once it has `status` (waits)."""

    def found() -> Any:
        posts = [d for d in deliveries(gate, request_id) if d.kind == "post"]
        return posts[0] if posts and posts[0].status == status else None

    return wait_until(found)


def test_each_approver_gets_a_card_of_their_own_then_the_outcome(
    smtp: FakeSMTP, make_gate: GateFactory, db_url: str
) -> None:
    gate = make_gate(settings=email_settings(db_url, smtp))
    request_id = ask(gate, summary="Pay acme 60k")
    alice = wait_mail(smtp, request_id, ADDRESSES["alice"])
    bob = wait_mail(smtp, request_id, ADDRESSES["bob"])
    assert {m.recipients[0] for m in mails(smtp, request_id)} == {
        ADDRESSES["alice"],
        ADDRESSES["bob"],
    }
    assert token(alice) != token(bob)  # links of their own
    assert smtp.auth_failures == 0  # AUTH after STARTTLS (the fake refuses it before)
    head = alice.message
    # gate's headline of the call, never the agent's summary
    headline = render_call("pay_vendor", {"amount": 60000}).headline
    assert head["Subject"] == f"[gate] Approval needed: {headline} ({request_id})"
    assert head["From"] == "gate <gate@example.com>" and head["To"] == ADDRESSES["alice"]
    assert head["Auto-Submitted"] == "auto-generated"
    said = "Agent's summary (the agent's claim, not checked by gate):\nPay acme 60k"
    assert said in alice.part("plain") and "Pay acme 60k" in alice.part("html")
    assert alice.part("plain").index("The call:") < alice.part("plain").index(said)
    assert set(links(alice)) == {"approve", "reject", "edit", "extend", "acknowledge"}
    url = links(alice)["approve"]
    assert url.startswith("http://127.0.0.1:8000/channels/email/confirm?t=")  # public_url
    assert url in alice.part("plain")
    _, page = open_link(gate, url)
    submit(gate, url, page)
    assert state(gate, request_id)["status"] == "approved"
    # The outcome, to everyone who got the card, threaded under it, with no links left.
    for address, first in ((ADDRESSES["alice"], alice), (ADDRESSES["bob"], bob)):
        outcome = wait_mail(smtp, request_id, address, count=2)
        assert outcome.message["In-Reply-To"] == first.message["Message-ID"]
        assert "Approved by alice in email" in outcome.part("plain")
        assert links(outcome) == {}
    assert post_of(gate, request_id, "sent").message_ref == "pending:2"
    assert smtp.problems == []  # nothing the strict server refused


def test_a_vote_refreshes_only_those_who_may_still_act(email_gate: Gate, smtp: FakeSMTP) -> None:
    quorum = ask(email_gate, "wire_funds", {"amount": 10})
    url = links(wait_mail(smtp, quorum, ADDRESSES["alice"]))["approve"]
    wait_mail(smtp, quorum, ADDRESSES["bob"])
    _, page = open_link(email_gate, url)
    submit(email_gate, url, page)
    refresh = wait_mail(smtp, quorum, ADDRESSES["bob"], count=2)
    assert "Still waiting" in str(refresh.message["Subject"])
    assert "1 of 2" in refresh.part("plain") and "approve" in links(refresh)
    assert len(mails(smtp, quorum, ADDRESSES["alice"])) == 1  # she voted: nothing new for her


def test_reminders_and_escalations_reuse_the_card(
    smtp: FakeSMTP, make_gate: GateFactory, sqlite_url: str
) -> None:
    slow = {"name": "slow", "tools": ["slow_*"], "approvers": ["alice"], "timeout": "10m",
            "remind_after": "1s", "escalate_after": "2s", "escalate_approvers": ["bob"],
            "escalate_to": ["email:audit@example.com"]}  # fmt: skip
    server = {"followup_interval_seconds": 0.2}
    gate = make_gate(settings=email_settings(sqlite_url, smtp, extra_rules=[slow], server=server))
    request_id = ask(gate, "slow_job", {"n": 1})
    first = wait_mail(smtp, request_id, ADDRESSES["alice"])
    assert mails(smtp, request_id, ADDRESSES["bob"]) == []  # not an approver yet
    reminder = wait_mail(smtp, request_id, ADDRESSES["alice"], count=2)
    # (a long Subject is folded on the wire; Python's parser keeps the fold's space)
    assert str(reminder.message["Subject"]).strip().startswith("[gate] Still waiting for")
    assert reminder.message["In-Reply-To"] == first.message["Message-ID"]
    assert token(reminder) != token(first) and "approve" in links(reminder)
    # Escalated: bob may decide now, and gets links of his own; the audit address a notice.
    bobs = wait_mail(smtp, request_id, ADDRESSES["bob"])
    assert "approve" in links(bobs)
    assert links(wait_mail(smtp, request_id, "audit@example.com")) == {}
    _, page = open_link(gate, links(bobs)["approve"])
    submit(gate, links(bobs)["approve"], page)
    assert state(gate, request_id)["decided_by"] == "bob"


def test_outcome_emails_per_rule(smtp: FakeSMTP, make_gate: GateFactory, sqlite_url: str) -> None:
    gate = make_gate(settings=email_settings(sqlite_url, smtp, outcome_emails=["refunds"]))
    quiet = ask(gate)  # big-payments: no outcome mail
    loud = ask(gate, "refund_order", {"amount": 900})
    for request_id in (quiet, loud):
        wait_mail(smtp, request_id, ADDRESSES["alice"])
        assert gate.decide(request_id, cfg.ALICE).status_code == 200
    wait_mail(smtp, loud, ADDRESSES["alice"], count=2)
    wait_until(lambda: all(d.status == "sent" for d in deliveries(gate, quiet)))
    assert len(mails(smtp, quiet, ADDRESSES["alice"])) == 1


def test_someone_who_is_no_approver_gets_no_links(
    smtp: FakeSMTP, make_gate: GateFactory, sqlite_url: str
) -> None:
    audit = {"name": "audited", "tools": ["audit_*"], "approvers": ["group:finance"],
             "channels": ["email:audit@example.com", "email:group:finance"]}  # fmt: skip
    gate = make_gate(settings=email_settings(sqlite_url, smtp, extra_rules=[audit]))
    request_id = ask(gate, "audit_books", {"year": 2026})
    watcher = wait_mail(smtp, request_id, "audit@example.com")
    assert links(watcher) == {}
    assert f"http://127.0.0.1:8000/requests/{request_id}" in watcher.part("plain")
    assert "approve" in links(wait_mail(smtp, request_id, ADDRESSES["bob"]))


def test_the_requester_gets_no_links(email_gate: Gate, smtp: FakeSMTP) -> None:
    request_id = ask(email_gate, user_id="alice")  # alice asked for this call herself
    assert links(wait_mail(smtp, request_id, ADDRESSES["alice"])) == {}
    assert "approve" in links(wait_mail(smtp, request_id, ADDRESSES["bob"]))


def test_untrusted_text_cannot_add_headers_or_links(email_gate: Gate, smtp: FakeSMTP) -> None:
    summary = (
        "Pay\r\nBcc: evil@example.net\r\n\r\n<img src=https://evil.example/x.png> www.evil.example"
    )
    request_id = ask(email_gate, args={"memo": '<a href="https://evil.example">Approve</a>'},
                     summary=summary)  # fmt: skip
    mail = wait_mail(smtp, request_id, ADDRESSES["alice"])
    assert mail.recipients == [ADDRESSES["alice"]]
    assert mail.message["Bcc"] is None
    # the subject is gate's headline: the agent's summary never reaches a header
    assert "\n" not in str(mail.message["Subject"]) and "Bcc" not in str(mail.message["Subject"])
    # in the body, as the agent's claim, its address defanged like any host an agent wrote
    assert "Bcc: evil@example[.]net" in mail.part("plain")
    html = mail.part("html")
    assert "<img" not in html and "&lt;img" in html
    assert "https://evil" not in html + mail.part("plain")
    assert "https[:]//evil[.]example" in mail.part("plain")
    assert "www[.]evil[.]example" in mail.part("plain")


def test_a_temporary_failure_is_retried(email_gate: Gate, smtp: FakeSMTP) -> None:
    with smtp.down(451):
        request_id = ask(email_gate)
        wait_until(lambda: smtp.attempts >= 1)
        failed = wait_until(lambda: (d := deliveries(email_gate, request_id)[0]).last_error and d)
        assert failed.status == "pending" and "451" in failed.last_error
    post = post_of(email_gate, request_id, "sent")
    assert post.attempts >= 2
    wait_mail(smtp, request_id, ADDRESSES["alice"])


def test_a_refused_address_does_not_hold_back_the_others(email_gate: Gate, smtp: FakeSMTP) -> None:
    smtp.refuse(ADDRESSES["alice"], 550)
    request_id = ask(email_gate)
    wait_mail(smtp, request_id, ADDRESSES["bob"])
    assert post_of(email_gate, request_id, "sent").message_ref == "pending:1"
    smtp.refuse(ADDRESSES["bob"], 550)
    dead = ask(email_gate)
    post = post_of(email_gate, dead, "dead")
    assert post.attempts == 1 and "refused every recipient" in post.last_error


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"password": "wrong-password"}, "check username and password"),
        ({"validate_certs": True}, "certificate"),
    ],
)
def test_permanent_failures_are_not_retried(
    smtp: FakeSMTP, make_gate: GateFactory, sqlite_url: str, change: dict[str, Any], words: str
) -> None:
    gate = make_gate(settings=email_settings(sqlite_url, smtp, **change))
    request_id = ask(gate)
    post = post_of(gate, request_id, "dead")
    assert post.attempts == 1 and words in post.last_error
    assert smtp.received() == []


def test_no_server_is_retried(make_gate: GateFactory, sqlite_url: str) -> None:
    gone = FakeSMTP().start()
    gone.stop()  # nothing listens on its port now
    gate = make_gate(settings=email_settings(sqlite_url, gone, username=None, password=None))
    request_id = ask(gate)
    failed = wait_until(lambda: (d := deliveries(gate, request_id)[0]).last_error and d)
    assert failed.status == "pending", failed


def test_starttls_is_required_when_asked_for(make_gate: GateFactory, sqlite_url: str) -> None:
    plain = FakeSMTP().start()  # offers no STARTTLS
    try:
        settings = email_settings(sqlite_url, plain, username=None, password=None)
        gate = make_gate(settings=settings)
        request_id = ask(gate)
        post = post_of(gate, request_id, "dead")
        assert "STARTTLS" in post.last_error or "starttls" in post.last_error.lower()
        assert plain.received() == []
    finally:
        plain.stop()


def test_implicit_tls(make_gate: GateFactory, sqlite_url: str) -> None:
    smtps = FakeSMTP(implicit_tls=True).start()
    try:
        table = {"security": "tls", "username": None, "password": None}
        gate = make_gate(settings=email_settings(sqlite_url, smtps, **table))
        request_id = ask(gate)
        assert "approve" in links(wait_mail(smtps, request_id, ADDRESSES["alice"]))
    finally:
        smtps.stop()


def test_tokens_are_never_logged(
    email_gate: Gate, smtp: FakeSMTP, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    request_id = ask(email_gate)
    mail = wait_mail(smtp, request_id, ADDRESSES["alice"])
    with smtp.down(451):  # failures are logged: with no token in them
        assert email_gate.decide(request_id, cfg.BOB, "reject", "no").status_code == 200
        wait_until(lambda: any(d.last_error for d in deliveries(email_gate, request_id)))
    wait_until(lambda: all(d.status == "sent" for d in deliveries(email_gate, request_id)))
    secret = token(mail)
    signature = secret.rsplit(".", 1)[1]
    assert caplog.records
    # (aiosmtpd's own "mail.log" is the fake server logging what it receives: not gate's)
    ours = [r for r in caplog.records if not r.name.startswith("mail.log")]
    assert any(r.name.startswith("gate") for r in ours)
    for record in ours:
        assert signature not in record.getMessage(), record.name
    for d in deliveries(email_gate, request_id):
        assert signature not in (d.last_error or "") and signature not in (d.message_ref or "")
