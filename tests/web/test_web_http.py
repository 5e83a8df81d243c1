"""The web console over plain HTTP: sign-in, CSRF, headers, authorization, history, export."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import threading
from typing import Any

import pytest
from argon2 import PasswordHasher

from gate.web.console import CSRF_MESSAGE
from tests.conftest import Gate
from tests.support import config as cfg
from tests.web.conftest import (
    CSRF_RE,
    PASSWORDS,
    WebGateFactory,
    api_view,
    browser,
    csrf_of,
    landed,
    sign_in,
    submit_refund,
)


def _pay(gate: Gate, **extra: Any) -> str:
    body = {"tool_name": "pay_vendor", "tool_args": {"amount": 60000}, "user_id": "dave"}
    body.update(extra)
    answer = gate.submit(**body)
    assert answer["decision"] == "ask", answer
    request_id: str = answer["request"]["id"]
    return request_id


def _api_status(gate: Gate, request_id: str) -> dict[str, Any]:
    with gate.client(cfg.ADMIN) as c:
        data: dict[str, Any] = c.get(f"/v1/requests/{request_id}").json()
    return data


# -- sign-in --------------------------------------------------------------------------------


def test_pages_send_signed_out_visitors_to_login(web_gate: Gate) -> None:
    with browser(web_gate) as c:
        r = c.get("/requests/01ABC", params={"x": "1"})
        assert r.status_code == 303
        assert r.headers["location"] == "/login?next=/requests/01ABC%3Fx%3D1"
        assert c.get("/").headers["location"] == "/login?next=/"
        for path in ("/queue/rows", "/events", "/history/export.csv", "/history/export.jsonl"):
            assert c.get(path).status_code == 401, path


def test_login_failures_say_so_and_set_no_user(make_web_gate: WebGateFactory) -> None:
    gate = make_web_gate(without_password=("mallory",))
    with browser(gate) as c:
        token = csrf_of(c.get("/login").text)
        attempts = [
            ("alice", "wrong password"),
            ("nobody", "whatever"),
            ("mallory", "no hash configured"),
            ("", ""),
        ]
        for username, password in attempts:
            r = c.post(
                "/login", data={"username": username, "password": password, "csrf_token": token}
            )
            assert r.status_code == 401, username
            assert "Wrong username or password." in r.text
        # Still signed out.
        assert c.get("/").status_code == 303


def test_login_without_csrf_token_is_refused(web_gate: Gate) -> None:
    with browser(web_gate) as c:
        c.get("/login")
        r = c.post("/login", data={"username": "alice", "password": PASSWORDS["alice"]})
        assert r.status_code == 403
        assert CSRF_MESSAGE in r.text
        assert c.get("/").status_code == 303


def test_login_cookie_flags_and_next(web_gate: Gate) -> None:
    with browser(web_gate) as c:
        token = csrf_of(c.get("/login").text)
        r = c.post(
            "/login",
            data={
                "username": "alice",
                "password": PASSWORDS["alice"],
                "csrf_token": token,
                "next": "/history",
            },
        )
        assert r.status_code == 303
        assert r.headers["location"] == "/history"
        cookie = r.headers["set-cookie"].lower()
        assert "httponly" in cookie
        assert "samesite=lax" in cookie
        assert "secure" not in cookie  # plain http
        # The token is rotated at sign-in: the pre-login one no longer works.
        assert csrf_of(c.get("/").text) != token


def test_open_redirect_is_refused(web_gate: Gate) -> None:
    for evil in ("//evil.example/x", "https://evil.example", "/\\evil.example"):
        with browser(web_gate) as c:
            token = csrf_of(c.get("/login").text)
            r = c.post(
                "/login",
                data={
                    "username": "bob",
                    "password": PASSWORDS["bob"],
                    "csrf_token": token,
                    "next": evil,
                },
            )
            assert r.headers["location"] == "/", evil


def test_cookie_is_secure_over_https(web_gate: Gate) -> None:
    # uvicorn trusts X-Forwarded-Proto from loopback, as it would from a local TLS proxy.
    with browser(web_gate) as c:
        c.headers.update({"X-Forwarded-Proto": "https"})
        r = c.get("/login")
        assert "secure" in r.headers["set-cookie"].lower()


def test_logout_needs_csrf_and_ends_the_session(web_gate: Gate) -> None:
    with sign_in(web_gate, "alice") as c:
        assert c.post("/logout").status_code == 403
        assert c.get("/").status_code == 200
        r = c.post("/logout", data={"csrf_token": csrf_of(c.get("/").text)})
        assert r.status_code == 303
        assert r.headers["location"] == "/login"
        assert c.get("/").status_code == 303


def test_tampered_cookie_is_a_signed_out_visitor(web_gate: Gate) -> None:
    with sign_in(web_gate, "alice") as c:
        value = c.cookies["gate_session"]
        c.cookies.clear()
        c.cookies.set("gate_session", value[:-3] + "xyz")
        assert c.get("/").status_code == 303


def test_trusted_header_is_off_by_default(web_gate: Gate) -> None:
    with browser(web_gate) as c:
        c.headers.update({"X-Forwarded-User": "alice"})
        assert c.get("/").status_code == 303


PROXY_SECRET = "a-secret-only-the-proxy-knows-0123"
#: what the sign-in proxy adds to every request it forwards, besides the user
FROM_PROXY = {"X-Gate-Proxy-Secret": PROXY_SECRET}


def test_trusted_header_mode(make_web_gate: WebGateFactory) -> None:
    gate = make_web_gate(trusted_user_header="X-Forwarded-User", trusted_proxy_secret=PROXY_SECRET)
    with browser(gate) as c:
        c.headers.update({"X-Forwarded-User": "carol", **FROM_PROXY})
        r = c.get("/")
        assert r.status_code == 200
        assert "Signed in as <strong>carol</strong>" in r.text
        assert "Sign out" not in r.text  # the proxy owns the sign-in
    with browser(gate) as c:  # a proxy that sends the email, in its own letter case
        c.headers.update({"X-Forwarded-User": "Alice@EXAMPLE.com", **FROM_PROXY})
        assert "Signed in as <strong>alice</strong>" in c.get("/").text
    with browser(gate) as c:
        c.headers.update({"X-Forwarded-User": "eve", **FROM_PROXY})
        r = c.get("/")
        assert r.status_code == 403
        assert "does not match any [[approvers]]" in r.text
    with browser(gate) as c:
        assert c.get("/").status_code == 303


@pytest.mark.parametrize("secret", [None, "", "a-secret-only-the-proxy-knows-012", "wrong"])
def test_the_trusted_header_counts_only_from_the_proxy(
    make_web_gate: WebGateFactory, secret: str | None
) -> None:
    # Anything that can reach gate can send any header: an agent on the proxy's host could
    # name an approver and decide its own request. Without the proxy's secret the header
    # signs nobody in, and no decision can be made under it.
    gate = make_web_gate(trusted_user_header="X-Forwarded-User", trusted_proxy_secret=PROXY_SECRET)
    rid = submit_refund(gate)
    with browser(gate) as c:
        c.headers.update({"X-Forwarded-User": "alice"})
        if secret is not None:
            c.headers.update({"X-Gate-Proxy-Secret": secret})
        r = c.get("/")
        assert r.status_code == 403
        assert "proxy secret (X-Gate-Proxy-Secret): only the sign-in proxy" in r.text
        assert "Signed in as" not in r.text
        page = c.get(f"/requests/{rid}")
        assert page.status_code == 403 and "Signed in as" not in page.text
        found = CSRF_RE.search(c.get("/login").text)
        form = {"csrf_token": found.group(1) if found else "", "verdict": "approve"}
        assert c.post(f"/requests/{rid}/decide", data=form).status_code in (303, 403)
    assert api_view(gate, rid)["status"] == "pending"


def test_hash_password_command_prints_a_verifiable_hash() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gate.cli", "users", "hash-password"],
        input="s3cret pass\n",
        capture_output=True,
        text=True,
        check=True,
    )
    digest = out.stdout.strip()
    assert digest.startswith("$argon2id$")
    assert PasswordHasher().verify(digest, "s3cret pass")
    empty = subprocess.run(
        [sys.executable, "-m", "gate.cli", "users", "hash-password"],
        input="\n",
        capture_output=True,
        text=True,
    )
    assert empty.returncode == 1
    assert "empty password" in empty.stderr


# -- headers --------------------------------------------------------------------------------


def test_every_page_has_a_strict_csp(web_gate: Gate) -> None:
    request_id = _pay(web_gate)
    with sign_in(web_gate, "alice") as c:
        for path in ("/login", "/", f"/requests/{request_id}", "/history", "/stats", "/nope"):
            r = c.get(path)
            csp = r.headers["content-security-policy"]
            assert "frame-ancestors 'none'" in csp, path
            assert "script-src 'self'" in csp
            assert "unsafe-inline" not in csp
            assert "default-src 'none'" in csp
            assert r.headers["x-frame-options"] == "DENY"
            assert r.headers["x-content-type-options"] == "nosniff"
        page = c.get(f"/requests/{request_id}").text
        # No inline script or style anywhere: the CSP would block it.
        assert "<script>" not in page
        assert "style=" not in page
        assert "onclick" not in page


def test_static_assets_are_served_locally(web_gate: Gate) -> None:
    with web_gate.client() as c:
        assert c.get("/static/app.js").headers["content-type"].startswith("text/javascript")
        assert c.get("/static/app.css").status_code == 200
    with sign_in(web_gate, "alice") as c:
        assert "http" not in "".join(
            line for line in c.get("/").text.splitlines() if "src=" in line or "href=" in line
        )


# -- deciding -------------------------------------------------------------------------------


def test_approve_from_the_page(web_gate_db: Gate) -> None:
    request_id = _pay(web_gate_db)
    with sign_in(web_gate_db, "alice") as c:
        page = c.get(f"/requests/{request_id}")
        assert ">Approve</button>" in page.text
        assert ">Reject</button>" in page.text
        r = c.post(
            f"/requests/{request_id}/decide",
            data={"verdict": "approve", "comment": "ok", "csrf_token": csrf_of(page.text)},
        )
        r = landed(c, r, f"/requests/{request_id}")
        assert "Approved by alice in the web console." in r.text
        again = c.post(
            f"/requests/{request_id}/decide",
            data={"verdict": "approve", "csrf_token": csrf_of(page.text)},
        )
        assert again.status_code == 409
        assert "Already approved by alice" in again.text
    data = _api_status(web_gate_db, request_id)
    assert (data["status"], data["decided_by"], data["decided_via"]) == ("approved", "alice", "web")


def test_decide_without_csrf_token_is_refused(web_gate: Gate) -> None:
    request_id = _pay(web_gate)
    with sign_in(web_gate, "alice") as c:
        url = f"/requests/{request_id}/decide"
        assert c.post(url, data={"verdict": "approve"}).status_code == 403
        r = c.post(url, data={"verdict": "approve", "csrf_token": "forged"})
        assert r.status_code == 403
        assert CSRF_MESSAGE in r.text
    # Bob's valid token does not work with Alice's cookie.
    with sign_in(web_gate, "bob") as bob, sign_in(web_gate, "alice") as alice:
        bob_token = csrf_of(bob.get("/").text)
        assert (
            alice.post(url, data={"verdict": "approve", "csrf_token": bob_token}).status_code == 403
        )
    assert _api_status(web_gate, request_id)["status"] == "pending"


def test_reject_needs_a_reason(web_gate: Gate) -> None:
    request_id = _pay(web_gate)
    with sign_in(web_gate, "bob") as c:
        token = csrf_of(c.get("/").text)
        r = c.post(
            f"/requests/{request_id}/decide",
            data={"verdict": "reject", "comment": "   ", "csrf_token": token},
        )
        assert r.status_code == 422
        assert "Say why you reject it" in r.text
        bad = c.post(
            f"/requests/{request_id}/decide", data={"verdict": "maybe", "csrf_token": token}
        )
        assert bad.status_code == 400
        assert _api_status(web_gate, request_id)["status"] == "pending"
        r = c.post(
            f"/requests/{request_id}/decide",
            data={"verdict": "reject", "comment": "vendor not on the list", "csrf_token": token},
        )
        landed(c, r, f"/requests/{request_id}")
    data = _api_status(web_gate, request_id)
    assert data["status"] == "rejected"
    assert data["reason"] == "Rejected by bob in the web console: vendor not on the list"


def test_non_approver_sees_the_request_read_only(web_gate: Gate) -> None:
    request_id = _pay(web_gate)
    with sign_in(web_gate, "carol") as c:
        page = c.get(f"/requests/{request_id}")
        assert page.status_code == 200
        assert "<button" not in page.text.split('id="fields-h"')[0].split("</header>")[1]
        assert "Read only: you are not an approver for this rule." in page.text
        r = c.post(
            f"/requests/{request_id}/decide",
            data={"verdict": "approve", "csrf_token": csrf_of(page.text)},
        )
        assert r.status_code == 403
        assert "Not recorded: you are not an approver for this rule." in r.text
        assert 'class="badge">yours to decide' not in c.get("/").text
    assert _api_status(web_gate, request_id)["status"] == "pending"


def test_requester_cannot_decide_their_own_request(web_gate: Gate) -> None:
    request_id = _pay(web_gate, user_id="alice")
    with sign_in(web_gate, "alice") as c:
        page = c.get(f"/requests/{request_id}")
        assert "you asked for this call, so you cannot approve it yourself" in page.text
        assert ">Approve</button>" not in page.text
        r = c.post(
            f"/requests/{request_id}/decide",
            data={"verdict": "approve", "csrf_token": csrf_of(page.text)},
        )
        assert r.status_code == 403
    assert _api_status(web_gate, request_id)["status"] == "pending"


def test_quorum_vote_shows_progress(web_gate: Gate) -> None:
    answer = web_gate.submit(tool_name="wire_funds", tool_args={"to": "x"})
    request_id = answer["request"]["id"]
    with sign_in(web_gate, "alice") as c:
        token = csrf_of(c.get("/").text)
        r = c.post(
            f"/requests/{request_id}/decide", data={"verdict": "approve", "csrf_token": token}
        )
        r = landed(c, r, f"/requests/{request_id}")
        assert "Your approval is recorded (1 of 2)." in r.text
        assert "You voted to approve" in r.text
        assert "you voted" in c.get("/queue/rows").text


def test_unknown_request_is_a_404_page(web_gate: Gate) -> None:
    with sign_in(web_gate, "alice") as c:
        r = c.get("/requests/01NOTAREALREQUEST000000000")
        assert r.status_code == 404
        assert "No request with id" in r.text
        token = csrf_of(r.text)
        r = c.post(
            "/requests/01NOTAREALREQUEST000000000/decide",
            data={"verdict": "approve", "csrf_token": token},
        )
        assert r.status_code == 404


def test_untrusted_text_is_escaped(web_gate: Gate) -> None:
    request_id = _pay(
        web_gate,
        summary="<script>alert('summary')</script>",
        agent_id='"><img src=x onerror=alert(1)>',
        tool_args={"amount": 60000, "memo": "<img src=x onerror=alert('args')>"},
    )
    with sign_in(web_gate, "alice") as c:
        for path in (f"/requests/{request_id}", "/", "/queue/rows"):
            text = c.get(path).text
            assert "<script>alert" not in text, path
            assert "<img src=x" not in text, path
            assert "&lt;script&gt;alert(&#39;summary&#39;)&lt;/script&gt;" in text, path
        detail = c.get(f"/requests/{request_id}").text
        assert "&lt;img src=x onerror=alert(&#39;args&#39;)&gt;" in detail


def test_queue_lists_pending_newest_first(web_gate: Gate) -> None:
    first = _pay(web_gate, summary="first one")
    second = _pay(web_gate, summary="second one")
    decided = _pay(web_gate, summary="decided one")
    assert web_gate.decide(decided, cfg.BOB).status_code == 200
    with sign_in(web_gate, "alice") as c:
        text = c.get("/").text
        assert text.index(second) < text.index(first)
        assert decided not in text
        assert "yours to decide" in text
        assert 'data-expires="' in text


def test_event_stream_reports_new_requests(web_gate_db: Gate) -> None:
    seen: list[str] = []
    connected = threading.Event()
    with sign_in(web_gate_db, "alice") as c:

        def listen() -> None:
            with c.stream("GET", "/events", timeout=15) as r:
                assert r.headers["content-type"].startswith("text/event-stream")
                for line in r.iter_lines():
                    if line.startswith(": connected"):
                        connected.set()
                    seen.append(line)
                    if line.startswith("data:"):
                        return

        t = threading.Thread(target=listen, daemon=True)
        t.start()
        assert connected.wait(10)
        request_id = _pay(web_gate_db)
        t.join(15)
    assert "event: created" in seen
    data = json.loads(next(s for s in seen if s.startswith("data:"))[5:])
    assert data == {"id": request_id, "kind": "created"}


# -- history, export, stats -----------------------------------------------------------------


def _finished_requests(gate: Gate) -> dict[str, str]:
    ids = {
        "approved": _pay(gate, agent_id="billing"),
        "rejected": _pay(gate, agent_id="billing"),
        "deploy": gate.submit(tool_name="deploy_app", tool_args={}, agent_id="ci")["request"]["id"],
        "pending": _pay(gate, agent_id="billing"),
        "formula": _pay(gate, agent_id='=HYPERLINK("http://evil")'),
    }
    assert gate.decide(ids["approved"], cfg.ALICE, "approve", "ok").status_code == 200
    assert gate.decide(ids["rejected"], cfg.BOB, "reject", "no").status_code == 200
    assert gate.decide(ids["deploy"], cfg.CAROL, "approve").status_code == 200
    assert gate.decide(ids["formula"], cfg.BOB, "reject", "=1+1").status_code == 200
    return ids


def test_history_filters_and_paging(web_gate_db: Gate) -> None:
    ids = _finished_requests(web_gate_db)
    with sign_in(web_gate_db, "alice") as c:
        everything = c.get("/history").text
        assert ids["pending"] not in everything
        for key in ("approved", "rejected", "deploy", "formula"):
            assert ids[key] in everything

        def shown(**params: str) -> set[str]:
            text = c.get("/history", params=params).text
            return {k for k, v in ids.items() if v in text}

        assert shown(status="approved") == {"approved", "deploy"}
        assert shown(tool="deploy_app") == {"deploy"}
        assert shown(agent="billing") == {"approved", "rejected"}
        assert shown(approver="bob") == {"rejected", "formula"}
        assert shown(since="2000-01-01", until="2000-01-02") == set()
        assert shown(since="2000-01-01") == {"approved", "rejected", "deploy", "formula"}

        page1 = c.get("/history", params={"limit": "3"}).text
        assert 'rel="next"' in page1
        next_url = page1.split('rel="next"')[0].rsplit('href="', 1)[1].split('"')[0]
        page2 = c.get(next_url.replace("&amp;", "&")).text
        assert {k for k, v in ids.items() if v in page1} == {"formula", "deploy", "rejected"}
        assert {k for k, v in ids.items() if v in page2} == {"approved"}
        assert 'rel="next"' not in page2

        bad = c.get("/history", params={"since": "yesterday"})
        assert bad.status_code == 400
        assert "since must be a date like 2026-01-31" in bad.text
        assert c.get("/history", params={"status": "pending"}).status_code == 400


def test_export_csv_and_jsonl(web_gate_db: Gate) -> None:
    ids = _finished_requests(web_gate_db)
    with sign_in(web_gate_db, "alice") as c:
        r = c.get("/history/export.csv", params={"status": "rejected"})
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/csv")
        assert r.headers["content-disposition"].startswith("attachment;")
        rows = list(csv.DictReader(io.StringIO(r.text)))
        assert {row["request_id"] for row in rows} == {ids["rejected"], ids["formula"]}
        assert {row["kind"] for row in rows} == {"created", "rejected"}
        formula = [row for row in rows if row["request_id"] == ids["formula"]]
        # A cell a spreadsheet would evaluate is kept as text.
        assert all(row["agent_id"].startswith("'=HYPERLINK") for row in formula)
        rejected = next(row for row in rows if row["kind"] == "rejected" and row["actor"] == "bob")
        assert rejected["via"] == "api"
        assert json.loads(rejected["detail"])

        r = c.get("/history/export.jsonl", params={"approver": "carol"})
        assert r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in r.text.splitlines()]
        assert {line["request_id"] for line in lines} == {ids["deploy"]}
        assert [line["kind"] for line in lines] == ["created", "approved"]
        assert lines[1]["actor"] == "carol"
        assert isinstance(lines[1]["detail"], dict)

        assert c.get("/history/export.csv", params={"until": "nope"}).status_code == 400


def test_stats_page_draws_charts_with_numbers(web_gate_db: Gate) -> None:
    _finished_requests(web_gate_db)
    with sign_in(web_gate_db, "alice") as c:
        r = c.get("/stats")
        assert r.status_code == 200
        text = r.text
        # twelve charts, each drawn at a desk and a phone width; a table of numbers beside each
        assert text.count("<svg") == 24
        assert text.count('<svg class="chart phone"') == 12
        assert text.count('<table class="numbers">') == 12
        assert "<title>Time to decision</title>" in text
        assert '<th scope="row">big-payments</th>' in text
        assert '<th scope="row">bob</th>' in text
        assert "<strong>5</strong> requests in 14 days" in text
        assert "<strong>1</strong> pending now" in text
        assert c.get("/stats", params={"days": "30"}).status_code == 200
