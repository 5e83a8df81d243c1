"""The request page's "I'm on it" button: an approver acknowledges without deciding, the
page says who is on it, a non-approver gets no button and a forced post is refused."""

from __future__ import annotations

from tests.conftest import Gate
from tests.support import config as cfg
from tests.web.conftest import api_view, csrf_of, flash_error, landed, sign_in, submit_refund


def test_acknowledge_on_the_request_page(web_gate_db: Gate) -> None:
    request_id = submit_refund(web_gate_db)
    # carol may not decide this rule's requests: no button, and a forced post is refused
    with sign_in(web_gate_db, "carol") as c:
        page = c.get(f"/requests/{request_id}").text
        assert "acknowledge-form" not in page
        r = c.post(f"/requests/{request_id}/acknowledge", data={"csrf_token": csrf_of(page)})
        assert r.status_code == 403
        assert flash_error(r.text) == "You are not an approver for this rule."
    assert api_view(web_gate_db, request_id)["acknowledged_by"] is None
    with sign_in(web_gate_db, "alice") as c:
        page = c.get(f"/requests/{request_id}").text
        assert 'id="acknowledge-form"' in page and "I'm on it" in page
        r = c.post(f"/requests/{request_id}/acknowledge", data={"csrf_token": csrf_of(page)})
        r = landed(c, r, f"/requests/{request_id}")
        assert "Acknowledged: you are on it." in r.text
        assert 'id="acknowledged"' in r.text and "alice is on it (acknowledged" in r.text
        assert "acknowledge-form" not in r.text
        # still open for a decision
        assert "extend-form" in r.text
    data = api_view(web_gate_db, request_id)
    assert (data["status"], data["acknowledged_by"]) == ("pending", "alice")
    with web_gate_db.client(cfg.ADMIN) as c:
        events = c.get(f"/v1/requests/{request_id}/audit").json()
    assert (events[-1]["kind"], events[-1]["actor"], events[-1]["via"]) == (
        "acknowledged",
        "alice",
        "web",
    )
    # the CSRF token is checked as on every form
    with sign_in(web_gate_db, "bob") as c:
        r = c.post(f"/requests/{request_id}/acknowledge", data={"csrf_token": "forged"})
        assert r.status_code == 403
    assert api_view(web_gate_db, request_id)["acknowledged_by"] == "alice"
