"""Hostile input through the web console's forms, on SQLite and PostgreSQL: edited arguments
the database could not store (or show again) are a precise form error, and a text the
database refuses is a 422, never a 500."""

from __future__ import annotations

import pytest

from tests.conftest import Gate
from tests.support import config as cfg
from tests.web.conftest import api_view, flash_error, post_decide, sign_in, submit_refund


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"amount": ' + "[" * 300 + "]" * 300 + "}", "nested deeper than 32 levels"),
        ('{"amount": ' + "[" * 5000 + "]" * 5000 + "}", "nested too deeply to read"),
        ('{"note": "a\\u0000b"}', "note contains a NUL character"),
        ('{"note": "\\ud800"}', "note contains a lone surrogate"),
        ('{"amount": 99999999999999999999}', "amount is an integer outside the 64-bit range"),
    ],
    ids=["too deep", "too deep to parse", "nul", "lone surrogate", "huge integer"],
)
def test_edits_that_could_not_be_stored_are_a_form_error(
    web_gate_db: Gate, text: str, expected: str
) -> None:
    gate = web_gate_db
    request_id = submit_refund(gate)
    with sign_in(gate, "alice") as c:
        r = post_decide(c, request_id, verdict="approve", edited_args=text)
    assert r.status_code == 422, r.text[:500]
    assert expected in flash_error(r.text), flash_error(r.text)
    data = api_view(gate, request_id)
    assert data["status"] == "pending" and data["approved_args"] is None
    with gate.client(cfg.ADMIN) as c:
        assert c.get("/v1/requests").status_code == 200


def test_a_comment_with_a_nul_character_is_never_a_500(web_gate_db: Gate) -> None:
    # PostgreSQL cannot hold NUL in text: the database's refusal is the client's 422.
    # SQLite stores it, and it shows back as the JSON escape.
    gate = web_gate_db
    request_id = submit_refund(gate)
    with sign_in(gate, "alice") as c:
        r = post_decide(c, request_id, verdict="reject", comment="no\x00way")
    postgres = gate.state.db.url.startswith("postgresql")
    with gate.client(cfg.ADMIN) as c:
        listed = c.get("/v1/requests")
    assert listed.status_code == 200
    if postgres:
        assert r.status_code == 422, r.text[:300]
        assert r.json()["error"]["code"] == "invalid_input"
        assert "NUL" in r.json()["error"]["message"]
        assert api_view(gate, request_id)["status"] == "pending"
    else:
        assert r.status_code == 303
        assert api_view(gate, request_id)["reason"].endswith("no\x00way")
