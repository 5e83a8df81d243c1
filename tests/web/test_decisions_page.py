"""The Decisions page: the decision log over HTTP (filters, paging, masking, escaping) and in a
real browser at desktop and phone widths; the request page names the policy revision."""

from __future__ import annotations

from typing import Any

from tests.conftest import Gate
from tests.support.servers import wait_until
from tests.web.conftest import WebGateFactory, sign_in


def logged(gate: Gate, count: int) -> None:
    """Wait until `count` answers were written (a window is about half a second)."""
    log = gate.state.decision_log
    assert log is not None
    wait_until(lambda: log.written >= count, timeout=10)


def calls(gate: Gate) -> dict[str, Any]:
    gate.submit(
        tool_name="read_file",
        tool_args={"path": "<script>alert(1)</script>", "token": "ghp_" + "a" * 36},
        agent_id="reader-bot",
    )
    gate.submit(tool_name="db_write", tool_args={"env": "prod"}, agent_id="writer-bot")
    asked = gate.submit(tool_name="ask_ops", tool_args={"n": 1}, agent_id="ops-bot")
    logged(gate, 3)
    return asked


def test_the_page_lists_answers_with_filters(web_gate_db: Gate) -> None:
    gate = web_gate_db
    asked = calls(gate)
    with sign_in(gate, "carol") as c:
        page = c.get("/decisions")
        assert page.status_code == 200, page.text
        html = page.text
        assert html.count("<tr>") == 4  # the header and three rows
        assert "&lt;script&gt;" in html and "<script>alert" not in html
        assert "ghp_" not in html and "[masked]" in html
        assert f'href="/requests/{asked["request"]["id"]}"' in html
        assert f"<code>{gate.state.policy.revision}</code>" in html
        denied = c.get("/decisions", params={"answer": "deny"}).text
        assert "db_write" in denied and "read_file" not in denied
        by_agent = c.get("/decisions", params={"agent": "ops-bot"}).text
        assert "ask_ops" in by_agent and "db_write" not in by_agent
        assert c.get("/decisions", params={"since": "2999-01-01"}).text.count("<tr>") == 0
        assert c.get("/decisions", params={"since": "soon"}).status_code == 400
        assert c.get("/decisions", params={"answer": "maybe"}).status_code == 400
        assert c.get("/decisions", params={"cursor": "x"}).status_code == 400
        detail = c.get(f"/requests/{asked['request']['id']}").text
        assert f"policy revision <code>{gate.state.policy.revision}</code>" in detail


def test_the_page_pages(make_web_gate: WebGateFactory) -> None:
    gate = make_web_gate()
    for n in range(53):
        gate.submit(tool_name="read_file", tool_args={"n": n})
    logged(gate, 53)
    with sign_in(gate, "alice") as c:
        first = c.get("/decisions").text
        assert first.count("<tr>") == 51 and 'rel="next"' in first
        next_url = first.split('href="/decisions?cursor=')[1].split('"')[0]
        second = c.get(f"/decisions?cursor={next_url}").text
        assert second.count("<tr>") == 4 and 'rel="next"' not in second


def test_signed_out_goes_to_sign_in(web_gate: Gate) -> None:
    with web_gate.client(follow_redirects=False) as c:
        r = c.get("/decisions")
    assert r.status_code in (302, 303) and "/login" in r.headers["location"]
