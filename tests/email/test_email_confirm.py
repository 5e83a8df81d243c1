"""The confirm page a mail's link opens: a GET never decides, the POST needs the page's form,
and a link acts only as its approver on its request, once."""

from __future__ import annotations

import base64
import json

import httpx

from tests.conftest import Gate
from tests.email.conftest import (
    ADDRESSES,
    ask,
    links,
    local,
    open_link,
    state,
    submit,
    token,
    wait_mail,
)
from tests.support import config as cfg
from tests.support.fake_smtp import FakeSMTP
from tests.support.http import TLS
from tests.support.servers import wait_until


def test_opening_a_link_decides_nothing(email_gate: Gate, smtp: FakeSMTP) -> None:
    # Mail scanners and link previews open every link, some more than once, some with HEAD.
    request_id = ask(email_gate)
    mail = wait_mail(smtp, request_id, ADDRESSES["alice"])
    for url in links(mail).values():
        for _ in range(2):
            r, page = open_link(email_gate, url)
            assert r.status_code == 200 and "csrf" in page.hidden
        assert httpx.head(local(url, email_gate), verify=TLS).status_code == 405
    now = state(email_gate, request_id)
    assert now["status"] == "pending" and now["votes"] == []
    assert now["acknowledged_by"] is None  # the "I'm on it" link opens a page too


def test_the_page_shows_the_request_with_gates_headers(email_gate: Gate, smtp: FakeSMTP) -> None:
    args = {"amount": 60000, "api_key": "sk-live-abcdef123456"}
    summary = "Pay acme <script>alert(1)</script>"
    request_id = ask(email_gate, args=args, summary=summary, agent_id="billing-bot")
    # A value masked whole under a secret-named key is never approvable from a mail (it must
    # be revealed on gate's page first), so the mail's confirm page is opened by its reject link.
    mail_links = links(wait_mail(smtp, request_id, ADDRESSES["alice"]))
    assert "approve" not in mail_links
    r, page = open_link(email_gate, mail_links["reject"])
    # The token is in the URL: no Referer ever carries it on; nothing caches the page.
    assert r.headers["referrer-policy"] == "no-referrer"
    assert r.headers["cache-control"] == "no-store"
    # gate's own page headers apply here too (no inline script, never framed).
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert r.headers["x-frame-options"] == "DENY"
    assert "script" not in page.tags
    assert "<script>alert(1)</script>" in page.text  # shown as text, escaped
    for shown in (request_id, "pay_vendor", "billing-bot", "dave", "big-payments", "UTC"):
        assert shown in page.text, shown
    assert "sk-live-abcdef123456" not in r.text
    assert page.by_id["acting-as"] == ADDRESSES["alice"]


def test_a_decision_needs_the_pages_form(email_gate: Gate, smtp: FakeSMTP) -> None:
    request_id = ask(email_gate)
    alice = links(wait_mail(smtp, request_id, ADDRESSES["alice"]))["approve"]
    bob = links(wait_mail(smtp, request_id, ADDRESSES["bob"]))["approve"]
    _, alices_page = open_link(email_gate, alice)
    _, bobs_page = open_link(email_gate, bob)
    # No form token, a forged one, or bob's (tied to his link, not alice's): 403.
    for csrf in (None, "forged", bobs_page.hidden["csrf"]):
        data = {} if csrf is None else {"csrf": csrf}
        r = httpx.post(local(alice, email_gate), data=data, verify=TLS)
        assert r.status_code == 403, r.text
        assert r.json()["error"]["code"] == "csrf_failed"
    # The right form sent from another site: 403 too (Origin: null is any page that sends
    # no referrer, so then the browser's Sec-Fetch-Site must say same-origin).
    for headers in (
        {"Origin": "https://evil.example"},
        {"Origin": "null", "Sec-Fetch-Site": "cross-site"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "same-site"},
    ):
        r, _ = submit(email_gate, alice, alices_page, **headers)
        assert r.status_code == 403, headers
    assert state(email_gate, request_id)["votes"] == []
    # From gate's own page it decides, as alice, through the email channel.
    r, page = submit(email_gate, alice, alices_page, Origin=email_gate.url)
    assert r.status_code == 200, r.text
    assert "Approved by alice in email" in page.by_id["answer"]
    now = state(email_gate, request_id)
    assert (now["status"], now["decided_by"], now["decided_via"]) == ("approved", "alice", "email")


def test_a_used_link_says_what_happened(email_gate: Gate, smtp: FakeSMTP) -> None:
    quorum = ask(email_gate, "wire_funds", {"amount": 10})  # two approvals needed
    url = links(wait_mail(smtp, quorum, ADDRESSES["alice"]))["approve"]
    _, page = open_link(email_gate, url)
    r, answer = submit(email_gate, url, page)
    assert "Your approval is recorded (1 of 2)" in answer.by_id["answer"]
    # The same link again, opened or posted: alice already voted; nothing is counted twice.
    r, again = open_link(email_gate, url)
    assert "You already voted to approve" in again.by_id["answer"] and "csrf" not in again.hidden
    r, again = submit(email_gate, url, page)
    assert r.status_code == 200 and "You already voted" in again.by_id["answer"]
    assert [v["approver"] for v in state(email_gate, quorum)["votes"]] == ["alice"]
    # Once bob decides, every link of the request says so.
    assert email_gate.decide(quorum, cfg.BOB, "reject", "no").status_code == 200
    _, closed = open_link(email_gate, links(wait_mail(smtp, quorum, ADDRESSES["alice"]))["reject"])
    assert "Already rejected by bob" in closed.by_id["answer"]


def test_a_foreign_or_tampered_link_is_refused(email_gate: Gate, smtp: FakeSMTP) -> None:
    mine = ask(email_gate)
    other = ask(email_gate)
    alices = token(wait_mail(smtp, mine, ADDRESSES["alice"]))
    wait_mail(smtp, other, ADDRESSES["alice"])
    payload, stamp, signature = alices.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))

    def forged(**change: str) -> str:
        raw = json.dumps({**claims, **change}, separators=(",", ":")).encode()
        body = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        return f"{body}.{stamp}.{signature}"

    # Alice's signature on the other request, or as bob: the signature no longer matches.
    for bad in (forged(r=other), forged(u=ADDRESSES["bob"])):
        for method in ("GET", "POST"):
            r = httpx.request(
                method, f"{email_gate.url}/channels/email/confirm?t={bad}", verify=TLS
            )
            assert r.status_code == 401, r.text
            assert r.json()["error"]["code"] == "bad_email_link"
    # The request is the token's, never the form's: a field naming another request is ignored.
    url = f"{email_gate.url}/channels/email/confirm?t={alices}&do=approve&request_id={other}"
    _, page = open_link(email_gate, url)
    r, _ = submit(email_gate, url, page, {"request_id": other, "r": other})
    assert state(email_gate, mine)["status"] == "approved"
    assert state(email_gate, other)["status"] == "pending"


def test_a_bad_link_gets_a_page_in_a_browser(email_gate: Gate) -> None:
    r = httpx.get(
        f"{email_gate.url}/channels/email/confirm?t=not-a-token",
        headers={"Accept": "text/html,application/xhtml+xml"},
        verify=TLS,
    )
    assert r.status_code == 401
    assert r.headers["content-type"].startswith("text/html")
    assert "not one gate sent" in r.text
    assert r.headers["referrer-policy"] == "no-referrer"


def test_an_expired_request_takes_no_decision(email_gate: Gate, smtp: FakeSMTP) -> None:
    request_id = ask(email_gate, "ephemeral_probe", {"n": 1})  # one-second deadline
    mail = wait_mail(smtp, request_id, ADDRESSES["alice"])
    wait_until(lambda: state(email_gate, request_id)["status"] == "expired")
    _, page = open_link(email_gate, links(mail)["approve"])
    assert "Already expired" in page.by_id["answer"] and "csrf" not in page.hidden


def test_reject_needs_a_reason_and_keeps_what_was_typed(email_gate: Gate, smtp: FakeSMTP) -> None:
    request_id = ask(email_gate, "refund_order", {"amount": 900})
    url = links(wait_mail(smtp, request_id, ADDRESSES["bob"]))["reject"]
    _, page = open_link(email_gate, url)
    assert set(page.checks) == {"wrong customer", "too expensive"}
    r, again = submit(email_gate, url, page, {"reason": "   "})
    assert r.status_code == 422 and "Type a reason" in again.by_id["answer"]
    r, again = submit(email_gate, url, page, {"reasons": "r9"})
    assert r.status_code == 422 and "not one of this rule's reasons" in again.by_id["answer"]
    assert state(email_gate, request_id)["votes"] == []
    r, done = submit(email_gate, url, page, {"reasons": "r1", "reason": "ask finance"})
    assert r.status_code == 200, done.text
    now = state(email_gate, request_id)
    assert now["status"] == "rejected"
    assert "too expensive" in now["reason"] and "ask finance" in now["reason"]


def test_edits_that_do_not_parse_are_shown_not_decided(email_gate: Gate, smtp: FakeSMTP) -> None:
    request_id = ask(email_gate, "refund_order", {"amount": 900, "currency": "EUR"})
    url = links(wait_mail(smtp, request_id, ADDRESSES["alice"]))["edit"]
    _, page = open_link(email_gate, url)
    assert page.boxes == {"amount": "e0", "currency": "e1"}
    for bad in ("lots", "[1, 2", "1" * 5000, "1e999", "[" * 5000):
        r, again = submit(email_gate, url, page, {"e0": bad})
        assert r.status_code in (400, 422), (bad, r.text)  # never a 500
    assert state(email_gate, request_id)["votes"] == []
    r, done = submit(email_gate, url, page, {"e0": "450"})
    assert r.status_code == 200
    assert state(email_gate, request_id)["approved_args"] == {"amount": 450, "currency": "EUR"}


def test_hostile_form_bodies_never_500(email_gate: Gate, smtp: FakeSMTP) -> None:
    request_id = ask(email_gate)
    url = local(links(wait_mail(smtp, request_id, ADDRESSES["alice"]))["approve"], email_gate)
    bodies = [
        (b"\xff\xfe%%%=&&&", "application/x-www-form-urlencoded"),
        (b"--x\r\nnot multipart", "multipart/form-data; boundary=x"),
        (b"{}", "application/json"),
        (b"csrf=%ED%B3%BF&e0=%ED%B3%BF", "application/x-www-form-urlencoded"),
        (b"csrf=" + b"A" * 5000, "application/x-www-form-urlencoded"),
    ]
    for body, kind in bodies:
        r = httpx.post(url, content=body, headers={"Content-Type": kind}, verify=TLS)
        assert r.status_code in (400, 403, 422), (body[:20], r.status_code, r.text)
    for query in ("t=" + "A" * 5000, "t=%00", "t=%ff%fe", "do=approve"):
        r = httpx.get(f"{email_gate.url}/channels/email/confirm?{query}", verify=TLS)
        assert r.status_code in (400, 401), (query, r.text)
    assert state(email_gate, request_id)["votes"] == []
