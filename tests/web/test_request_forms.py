"""The request page's forms over HTTP: approve with edits, preset reject reasons, extend
the deadline, CSRF on each form, and the outcome and audit chain the page shows."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import col

from gate.store.tables import AuditEvent
from gate.web.console import CSRF_MESSAGE
from tests.conftest import Gate
from tests.support import config as cfg
from tests.web.conftest import (
    api_view,
    csrf_of,
    flash_error,
    landed,
    post_decide,
    sign_in,
    submit_refund,
)

# -- approve with edits ---------------------------------------------------------------------


def test_approve_with_edits_stores_both_and_shows_the_diff(web_gate_db: Gate) -> None:
    request_id = submit_refund(web_gate_db)
    with sign_in(web_gate_db, "alice") as c:
        page = c.get(f"/requests/{request_id}").text
        assert 'id="edited-args"' in page
        # Prefilled with the pretty-printed arguments, escaped like any untrusted text.
        assert "&#34;note&#34;: &#34;&lt;b&gt;late&lt;/b&gt;&#34;" in page
        edited = '{"customer": "c1", "amount": 500, "note": "<b>late</b>"}'
        r = post_decide(c, request_id, verdict="approve", edited_args=edited, comment="half now")
        r = landed(c, r, f"/requests/{request_id}")
        assert "The call runs with your edited arguments." in r.text
        assert 'id="args-asked"' in r.text and 'id="args-approved"' in r.text
        diff = r.text.split('id="edits"')[1].split("</table>")[0]
        assert "<code>amount</code>" in diff
        assert "<del><code>900</code></del>" in diff and "<ins><code>500</code></ins>" in diff
        approved_row = r.text.split('data-kind="approved"')[1].split("</tr>\n      <tr")[0]
        assert "<ins><code>500</code></ins>" in approved_row
    data = api_view(web_gate_db, request_id)
    assert data["status"] == "approved"
    assert data["tool_args"]["amount"] == 900
    assert data["approved_args"] == {"customer": "c1", "amount": 500, "note": "<b>late</b>"}
    assert data["reason"] == (
        "Approved with edits by alice in the web console: half now Changed: amount 900 -> 500"
    )


def test_edit_validation_errors_are_precise_and_keep_the_text(web_gate: Gate) -> None:
    request_id = submit_refund(web_gate)
    cases = [
        ('{"amount": 500,}', "not valid JSON: Expecting property name enclosed in double quotes"),
        ('{\n  "amount": 500\n  "customer": "c1"\n}', "(line 3, column 3)"),
        ("[1, 2]", "must be a JSON object ({...} with named arguments), not an array"),
        ('"500"', "not a string"),
        ("   ", "The edited arguments are empty"),
        ('{"amount": 500, "amount": 5}', "the key 'amount' appears twice"),
        ('{"amount": NaN}', "NaN is not a JSON number"),
    ]
    with sign_in(web_gate, "alice") as c:
        for text, expected in cases:
            r = post_decide(c, request_id, verdict="approve", edited_args=text)
            assert r.status_code == 422, text
            assert expected in flash_error(r.text), (text, flash_error(r.text))
            # The editor shows what was sent, so nothing typed is lost.
            shown = r.text.split('id="edited-args"')[1].split(">", 1)[1].split("</textarea>")[0]
            assert shown.replace("&#34;", '"') == text
    assert api_view(web_gate, request_id)["status"] == "pending"


def test_rules_that_forbid_edits_show_no_editor_and_refuse_a_forced_post(
    web_gate: Gate,
) -> None:
    strict = web_gate.submit(tool_name="strict_thing", tool_args={"a": 1}, user_id="dave")
    quorum = web_gate.submit(tool_name="wire_money", tool_args={"a": 1}, user_id="dave")
    with sign_in(web_gate, "alice") as c:
        for answer in (strict, quorum):
            request_id = answer["request"]["id"]
            page = c.get(f"/requests/{request_id}").text
            assert ">Approve</button>" in page
            assert "edited-args" not in page and "Approve with edits" not in page
            r = post_decide(c, request_id, verdict="approve", edited_args='{"a": 2}')
            assert r.status_code == 422
            assert flash_error(r.text) == (
                "This rule does not allow approving with edits "
                "(it forbids them, or it needs more than one approver)."
            )
            assert api_view(web_gate, request_id)["status"] == "pending"


def test_an_unchanged_edit_is_a_plain_approval(web_gate: Gate) -> None:
    request_id = submit_refund(web_gate)
    with sign_in(web_gate, "bob") as c:
        original = '{"note": "<b>late</b>", "amount": 900, "customer": "c1"}'
        r = post_decide(c, request_id, verdict="approve", edited_args=original)
        r = landed(c, r, f"/requests/{request_id}")
        assert 'id="args-approved"' not in r.text
    data = api_view(web_gate, request_id)
    assert (data["status"], data["approved_args"]) == ("approved", None)
    assert data["reason"] == "Approved by bob in the web console"


# -- preset reject reasons ------------------------------------------------------------------


def test_preset_reasons_alone_or_with_text(web_gate: Gate) -> None:
    only_preset = submit_refund(web_gate)
    both = submit_refund(web_gate)
    neither = submit_refund(web_gate)
    with sign_in(web_gate, "bob") as c:
        page = c.get(f"/requests/{only_preset}").text
        assert 'name="reasons" value="wrong customer"' in page
        assert 'name="reasons" value="too expensive"' in page
        assert "required" not in page.split('id="reject-reason"')[1].split(">")[0]
        r = post_decide(c, only_preset, verdict="reject", reasons="too expensive")
        landed(c, r, f"/requests/{only_preset}")
        r = post_decide(
            c,
            both,
            verdict="reject",
            reasons=["wrong customer", "too expensive"],
            comment="check the ticket",
        )
        landed(c, r, f"/requests/{both}")
        r = post_decide(c, neither, verdict="reject", comment=" ")
        assert r.status_code == 422
        assert "Say why you reject it" in flash_error(r.text)
        r = post_decide(c, neither, verdict="reject", reasons="made up")
        assert r.status_code == 422
        assert "Not one of this rule's reject reasons: ['made up']" in flash_error(r.text)
    assert api_view(web_gate, only_preset)["reason"] == (
        "Rejected by bob in the web console: too expensive"
    )
    assert api_view(web_gate, both)["reason"] == (
        "Rejected by bob in the web console: wrong customer; too expensive - check the ticket"
    )
    assert api_view(web_gate, neither)["status"] == "pending"


# -- extend ---------------------------------------------------------------------------------


def test_extend_the_deadline(web_gate: Gate) -> None:
    request_id = submit_refund(web_gate)
    before = datetime.fromisoformat(api_view(web_gate, request_id)["expires_at"])
    with sign_in(web_gate, "alice") as c:
        page = c.get(f"/requests/{request_id}").text
        assert 'action="/requests/' in page and 'name="by" value="15m"' in page
        token = csrf_of(page)
        r = c.post(f"/requests/{request_id}/extend", data={"csrf_token": token, "by": "15m"})
        r = landed(c, r, f"/requests/{request_id}")
        assert "Deadline extended by 15m" in r.text
        # Shown once: a reload of the page does not extend again, nor repeat the notice.
        assert "Deadline extended" not in c.get(f"/requests/{request_id}").text
        bad = c.post(f"/requests/{request_id}/extend", data={"csrf_token": token, "by": "9d"})
        assert bad.status_code == 422
        assert flash_error(bad.text) == "Extend by 15m or 1h, not '9d'."
    after = datetime.fromisoformat(api_view(web_gate, request_id)["expires_at"])
    assert (after - before).total_seconds() >= 15 * 60
    with web_gate.client(cfg.ADMIN) as c:
        events = c.get(f"/v1/requests/{request_id}/audit").json()
    assert (events[-1]["kind"], events[-1]["actor"], events[-1]["via"]) == (
        "extended",
        "alice",
        "web",
    )
    # Carol is no approver of this rule: no button, and a forced post is refused.
    with sign_in(web_gate, "carol") as c:
        page = c.get(f"/requests/{request_id}").text
        assert "extend-form" not in page
        r = c.post(f"/requests/{request_id}/extend", data={"csrf_token": csrf_of(page), "by": "1h"})
        assert r.status_code == 403
        assert flash_error(r.text) == "You are not an approver for this rule."
    assert web_gate.decide(request_id, cfg.BOB, "approve").status_code == 200
    with sign_in(web_gate, "alice") as c:
        page = c.get(f"/requests/{request_id}").text
        assert "extend-form" not in page
        r = c.post(f"/requests/{request_id}/extend", data={"csrf_token": csrf_of(page), "by": "1h"})
        assert r.status_code == 409
        assert flash_error(r.text).startswith("Already approved by bob")


# -- CSRF on the new forms ------------------------------------------------------------------


def test_new_forms_refuse_posts_without_the_csrf_token(web_gate: Gate) -> None:
    request_id = web_gate.submit(tool_name="shell_run", tool_args={"c": 1}, session_id="s")[
        "request"
    ]["id"]
    with sign_in(web_gate, "alice") as c:
        r = post_decide(
            c, request_id, verdict="approve", grant_scope="session", grant_duration="5m"
        )
        landed(c, r, f"/requests/{request_id}")
    with web_gate.client(cfg.ALICE) as api:
        grant_id = api.get("/v1/grants").json()[0]["id"]
    other = submit_refund(web_gate)
    before = api_view(web_gate, other)["expires_at"]
    with sign_in(web_gate, "alice") as c:
        posts = [
            (f"/grants/{grant_id}/revoke", {}),
            (f"/requests/{other}/extend", {"by": "15m"}),
            (f"/requests/{other}/decide", {"verdict": "approve", "edited_args": '{"a": 1}'}),
            (f"/requests/{other}/decide", {"verdict": "reject", "reasons": "too expensive"}),
        ]
        for path, data in posts:
            for token in (None, "forged"):
                body = {**data, **({"csrf_token": token} if token else {})}
                r = c.post(path, data=body)
                assert r.status_code == 403, path
                assert CSRF_MESSAGE in r.text
    with web_gate.client(cfg.ALICE) as api:
        assert api.get("/v1/grants").json()[0]["status"] == "active"
    data = api_view(web_gate, other)
    assert (data["status"], data["expires_at"]) == ("pending", before)


# -- outcome and the audit chain ------------------------------------------------------------


def test_outcome_and_audit_chain(web_gate_db: Gate) -> None:
    gate = web_gate_db
    request_id = submit_refund(gate)
    assert gate.decide(request_id, cfg.ALICE, "approve").status_code == 200
    with gate.client(cfg.AGENT) as agent:
        r = agent.post(
            f"/v1/requests/{request_id}/outcome",
            json={"outcome": "ran", "summary": "refund <r-77> issued"},
        )
        assert r.status_code == 200, r.text
    with sign_in(gate, "bob") as c:
        page = c.get(f"/requests/{request_id}").text
        assert (
            '<p class="ran" id="outcome">Outcome: <strong>ran</strong>: refund &lt;r-77&gt; issued'
            in page
        )
        assert 'class="chain intact"' in page
        with gate.client(cfg.ADMIN) as api:
            events = api.get(f"/v1/requests/{request_id}/audit").json()
        for event in events:
            assert f'<code class="hash">{event["chain_hash"][:12]}</code>' in page
        # Someone edits the approval in the database after the fact.
        approved = next(e for e in events if e["kind"] == "approved")
        with gate.state.db.write() as session:
            session.execute(
                sa.update(AuditEvent)
                .where(col(AuditEvent.id) == approved["id"])
                .values(actor="mallory")
            )
        page = c.get(f"/requests/{request_id}").text
        assert 'class="chain broken"' in page
        assert f"Chain broken at event {approved['id']}:" in page
        assert '<tr data-kind="approved" class="broken">' in page
