"""In a real browser: the shadow-mode banner on every console page, and a tripped agent
reset with the Agents page's button."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gate.config.settings import Settings
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support.browser import BROWSER_TESTS, ENABLED
from tests.web.conftest import OpenPage, shot, web_settings

pytestmark = BROWSER_TESTS

if ENABLED:
    from playwright.sync_api import expect


def _gate(make_gate: GateFactory, sqlite_url: str) -> Gate:
    data = web_settings(sqlite_url).model_dump()
    until = datetime.now(UTC) + timedelta(days=9)
    data["rules"].insert(
        0, {"name": "ask-reads", "tools": ["read_*"], "mode": "shadow", "until": until}
    )
    data["denials"] = {"in_a_row": 1}
    return make_gate(settings=Settings(**data))


def test_the_banner_on_every_page_and_a_reset(
    make_gate: GateFactory, sqlite_url: str, open_page: OpenPage
) -> None:
    gate = _gate(make_gate, sqlite_url)
    first = gate.submit(tool_name="ask_thing", tool_args={}, agent_id="bot")["request"]["id"]
    assert gate.decide(first, cfg.ALICE, "reject", "wrong table").status_code == 200
    asked = gate.submit(tool_name="read_file", tool_args={"path": "a"}, agent_id="bot")
    assert asked["decision"] == "ask"
    page = open_page(gate, "alice").page
    for path in ("/", "/history", "/stats", "/grants", "/agents", f"/requests/{first}"):
        page.goto(gate.url + path)
        banner = page.locator("#shadow-banner")
        expect(banner).to_be_visible()
        expect(banner).to_contain_text("ask-reads")
        expect(banner).to_contain_text("never change an answer")
    page.goto(gate.url + f"/requests/{asked['request']['id']}")
    expect(page.locator(".tripped").first).to_contain_text("1 rejections in a row")
    page.goto(gate.url + "/agents")
    expect(page.get_by_role("link", name="Agents")).to_contain_text("1")
    shot(page, "agents-page.png", full_page=True)
    page.get_by_role("button", name="Reset agent bot").click()
    expect(page.locator(".flash.ok")).to_contain_text("Reset agent 'bot'")
    expect(page.locator("#tripped-agents")).to_have_count(0)
    assert gate.submit(tool_name="read_file", tool_args={}, agent_id="bot")["decision"] == "allow"
