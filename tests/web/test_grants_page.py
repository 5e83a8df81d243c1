"""The Grants page over HTTP: a grant chosen on the request page, listed, revoked; grants
the rule does not offer refused."""

from __future__ import annotations

from tests.conftest import Gate
from tests.web.conftest import (
    api_view,
    browser,
    csrf_of,
    flash_error,
    landed,
    post_decide,
    sign_in,
)


def test_grant_from_the_page_then_revoke_it(web_gate_db: Gate) -> None:
    gate = web_gate_db
    first = gate.submit(tool_name="shell_run", tool_args={"cmd": "ls"}, session_id="s-9")
    first_id = first["request"]["id"]
    with sign_in(gate, "alice") as c:
        page = c.get(f"/requests/{first_id}").text
        # The rule offers session and agent; this request has no agent_id, so no agent grant.
        assert 'value="session"' in page and 'value="agent"' not in page
        assert 'value="call"' not in page
        # Durations stop at the rule's max_grant (45m), which is offered as itself.
        assert '<option value="30m" selected>' in page
        assert '<option value="45m" >45 minutes (the longest allowed)' in page
        assert '<option value="1h"' not in page
        r = post_decide(c, first_id, verdict="approve", grant_scope="session", grant_duration="30m")
        r = landed(c, r, f"/requests/{first_id}")
        assert 'id="grants-made"' in r.text

        second = gate.submit(tool_name="shell_run", tool_args={"cmd": "rm x"}, session_id="s-9")
        assert second["decision"] == "allow"
        second_id = second["request"]["id"]
        detail = c.get(f"/requests/{second_id}").text
        assert "Allowed by a grant from alice." in detail
        assert "the approval it came from" in detail
        assert f'<a href="/requests/{first_id}">the approval it came from</a>' in detail

        grants = c.get("/grants").text
        active = grants.split('id="active-grants"')[1].split("</table>")[0]
        grant_id = second["request"]["grant_id"]
        assert f'data-grant-id="{grant_id}"' in active
        assert "<code>shell_run</code>" in active and "session <code>s-9</code>" in active
        assert f'<a href="/requests/{first_id}">' in active
        assert '<td data-label="Uses">1</td>' in active

        r = c.post(f"/grants/{grant_id}/revoke", data={"csrf_token": csrf_of(grants)})
        r = landed(c, r, "/grants")
        assert "Revoked the grant for shell_run (session)" in r.text
        assert "No active grants." in r.text
        ended = r.text.split('id="ended-grants"')[1].split("</table>")[0]
        assert '<span class="status revoked">revoked</span>' in ended and "by alice" in ended

        third = gate.submit(tool_name="shell_run", tool_args={"cmd": "ls"}, session_id="s-9")
        assert third["decision"] == "ask"

        again = c.post(f"/grants/{grant_id}/revoke", data={"csrf_token": csrf_of(grants)})
        assert again.status_code == 409
        assert "already ended (revoked)" in flash_error(again.text)
        missing = c.post("/grants/01NOPE/revoke", data={"csrf_token": csrf_of(grants)})
        assert missing.status_code == 404
        assert flash_error(missing.text) == "No grant with id '01NOPE'."


def test_grants_the_rule_does_not_offer_are_refused(web_gate: Gate) -> None:
    request_id = web_gate.submit(tool_name="shell_run", tool_args={"c": 1}, session_id="s")[
        "request"
    ]["id"]
    with sign_in(web_gate, "alice") as c:
        r = post_decide(
            c, request_id, verdict="approve", grant_scope="session", grant_duration="2h"
        )
        assert r.status_code == 422
        assert flash_error(r.text) == ("Grant duration 2h is longer than this rule allows (45m).")
        r = post_decide(c, request_id, verdict="approve", grant_scope="call", grant_duration="5m")
        assert r.status_code == 422
        assert "This rule offers no 'call' grant (offered: session, agent)." == flash_error(r.text)
        r = post_decide(c, request_id, verdict="approve", grant_scope="agent", grant_duration="5m")
        assert r.status_code == 422
        assert flash_error(r.text) == "An agent grant needs a request with an agent_id."
        r = post_decide(c, request_id, verdict="approve", grant_scope="session")
        assert r.status_code == 422
        assert flash_error(r.text) == "Choose how long the grant lasts."
    assert api_view(web_gate, request_id)["status"] == "pending"
    plain = web_gate.submit(tool_name="ask_x", tool_args={})["request"]["id"]
    with sign_in(web_gate, "alice") as c:
        assert "Also allow the same for" not in c.get(f"/requests/{plain}").text


def test_grants_page_needs_sign_in(web_gate: Gate) -> None:
    with browser(web_gate) as c:
        assert c.get("/grants").headers["location"] == "/login?next=/grants"


def test_a_pattern_grant_with_uses_from_the_page(web_gate_db: Gate) -> None:
    gate = web_gate_db
    args = {"repo": "web", "channel": "beta", "tag": "v1"}
    request_id = gate.submit(tool_name="release_app", tool_args=args)["request"]["id"]
    with sign_in(gate, "alice") as c:
        page = c.get(f"/requests/{request_id}").text
        assert 'value="pattern"' in page and "calls with the same repo" in page
        # the rule pins the repo; the approver may pin the others, and choose fewer uses
        assert 'name="grant_pin" value="channel"' in page and 'value="repo"' not in page
        assert '<option value="">3 calls (the most this rule allows)</option>' in page
        assert '<option value="1">once (single-use)</option>' in page
        r = post_decide(
            c,
            request_id,
            verdict="approve",
            grant_scope="pattern",
            grant_duration="30m",
            grant_uses="2",
            grant_pin="channel",
        )
        landed(c, r, f"/requests/{request_id}")
        assert gate.submit(tool_name="release_app", tool_args=args)["decision"] == "allow"
        stable = {**args, "channel": "stable"}
        assert gate.submit(tool_name="release_app", tool_args=stable)["decision"] == "ask"

        grants = c.get("/grants").text
        active = grants.split('id="active-grants"')[1].split("</table>")[0]
        assert (
            'calls with <code class="pinned">repo=&#34;web&#34;, channel=&#34;beta&#34;' in active
        )
        assert '<td data-label="Uses">1 of 2 (1 left)</td>' in active
        assert gate.submit(tool_name="release_app", tool_args=args)["decision"] == "allow"
        ended = c.get("/grants").text.split('id="ended-grants"')[1].split("</table>")[0]
        assert '<span class="status used_up">used up</span>' in ended
        assert '<td data-label="Uses">2 of 2 (0 left)</td>' in ended

        # more uses than the rule allows, or a grant the call cannot have: the page says why
        other = gate.submit(tool_name="release_app", tool_args={"tag": "v2"})["request"]["id"]
        r = post_decide(c, other, verdict="approve", grant_scope="pattern", grant_duration="5m")
        assert r.status_code == 422
        assert "pins arguments this call does not have: repo" in flash_error(r.text)
        r = post_decide(
            c,
            request_id,
            verdict="approve",
            grant_scope="call",
            grant_duration="5m",
            grant_uses="x",
        )
        assert r.status_code == 422
        assert flash_error(r.text) == "Choose how many calls the grant may let through."
